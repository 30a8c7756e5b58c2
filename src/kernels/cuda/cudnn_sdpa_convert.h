// Device-side glue around the cuDNN SDPA graph (cudnn_sdpa_plan.h): builds cuDNN's per-step
// inputs from Spindle's batch (paged_layer_launch.h) and converts q / out between f32 and the
// graph's io type. Plain structs of device pointers, shared with the .cu file (C++17).
//
// Scratch row layouts (row = num_heads * head_dim io elements):
//   packed  (padded_q_len == 0): row r < num_rows is q row r; then one zero row per padding
//           sequence (sequences num_sequences .. batch-1).
//   padded  (padded_q_len == Sq): row s * Sq + i is row i of sequence s ([batch, Sq, H, D]);
//           rows past a sequence's new tokens (and padding sequences) are zero.
// Padding sequences (batch > num_sequences) have 1 query token and 1 KV token in page 0, so
// every dim of the plan stays valid; their outputs are ignored.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/paged_layer_launch.h"

namespace spindle::kernels::cuda::detail {

// Builds seq_len_q [batch], seq_len_kv [batch], page_table [batch, table_width] (entries past a
// sequence's pages are 0) and, when ragged_offsets is set, ragged_offsets [batch + 1] (the
// packed layout's first element of each sequence; the last entry is the total).
struct CudnnSdpaPrepareParams {
  const DeviceSequence* sequences = nullptr;  // [num_sequences]
  const int32_t* page_tables = nullptr;       // Spindle's concatenated page tables
  int num_sequences = 0;
  int batch = 0;  // >= num_sequences
  int num_rows = 0;
  int page_size = 0;
  int table_width = 0;
  int64_t row_elems = 0;  // num_heads * head_dim
  int32_t* seq_len_q = nullptr;
  int32_t* seq_len_kv = nullptr;
  int32_t* page_table = nullptr;
  int32_t* ragged_offsets = nullptr;  // null for the padded layout
};
void launch_cudnn_sdpa_prepare(const CudnnSdpaPrepareParams& p, cudaStream_t stream);

// q (f32 [num_rows, row_elems]) <-> scratch (io type, layout above).
struct CudnnSdpaConvertParams {
  const DeviceSequence* sequences = nullptr;
  int num_sequences = 0;
  int batch = 0;
  int num_rows = 0;
  int padded_q_len = 0;  // 0: packed layout
  int64_t row_elems = 0;
  KvType io_type = KvType::kBF16;  // kBF16 or kF16
};
// Writes every scratch row (zeros where no q row maps).
void launch_cudnn_sdpa_q_to_io(const CudnnSdpaConvertParams& p, const float* q, void* q_io, cudaStream_t stream);
// Writes every out row from its scratch row.
void launch_cudnn_sdpa_o_to_f32(const CudnnSdpaConvertParams& p, const void* o_io, float* out,
                                cudaStream_t stream);

// Rows of the scratch layout (the Q/O scratch holds this many rows of row_elems).
inline int64_t cudnn_sdpa_scratch_rows(const CudnnSdpaConvertParams& p) {
  return p.padded_q_len == 0 ? int64_t{p.num_rows} + (p.batch - p.num_sequences)
                             : int64_t{p.batch} * p.padded_q_len;
}

}  // namespace spindle::kernels::cuda::detail
