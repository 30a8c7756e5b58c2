// One cuDNN execution plan of the SDPA forward graph over paged K/V, built with the backend
// (graph) API for one batch signature. Graph (cuDNN >= 9.5, the pattern of cuDNN's fused flash
// attention engine):
//
//   Kt = paged_load(K pages, seq_len_kv, page_table)   [B, Hk, D, Skv] (virtual, K transposed)
//   V  = paged_load(V pages, seq_len_kv, page_table)   [B, Hk, Skv, D] (virtual)
//   S  = Q . Kt (M = seq_len_q, N = seq_len_kv)        [B, H, Sq, Skv] f32; GQA: H / Hk heads share one
//   S  = S * scale
//   S  = select(row < seq_len_q && col < seq_len_kv, S, -inf)              padding mask
//   S  = select(row + seq_len_kv - seq_len_q >= col, S, -inf)  [causal]   bottom-right causal mask
//   P  = softmax(S) (max, sub, exp, sum, div; plus the log-sum-exp stats, virtual) as io type
//   O  = P . V (M = seq_len_q, K = seq_len_kv)                             [B, H, Sq, D]
//
// Tensors (uids in CudnnSdpaUid), io type = the KV type (bf16 or fp16):
//   Q, O         [B, H, Sq, D], strides [Sq*H*D, D, H*D, 1] (token-major rows, heads inside a row).
//                Ragged: packed rows [num_rows, H, D] with ragged offsets [B+1] (elements);
//                otherwise padded [B, Sq, H, D].
//   K, V pages   [num_pages, Hk, page_size, D], strides [page_size*Hk*D, D, Hk*D, 1], which is
//                Spindle's page layout [num_pages, page_size, Hk, D] seen head-major.
//   seq_len_q/kv [B, 1, 1, 1] int32; page table [B, 1, T, 1] int32 (T = ceil(Skv / page_size)),
//                shared by K and V; scale and -inf are host scalars passed by value.
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/cudnn_api.h"

namespace spindle::kernels::cuda {

enum CudnnSdpaUid : int64_t {
  kUidQ = 1,
  kUidK = 2,
  kUidV = 3,
  kUidO = 4,
  kUidSeqLenQ = 5,
  kUidSeqLenKv = 6,
  kUidPageTableK = 7,
  kUidPageTableV = 8,
  kUidRaggedQ = 9,
  kUidRaggedO = 10,
  kUidScale = 11,
  kUidNegInfPadding = 12,
  kUidNegInfCausal = 13,
  kUidFirstVirtual = 100,
};

// The batch signature one plan serves (every dim is baked into the plan).
struct CudnnSdpaShape {
  int64_t batch = 0;      // B: sequences, including padding sequences
  int64_t num_heads = 0;  // H
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_q = 0;      // Sq >= every sequence's new tokens
  int64_t max_kv = 0;     // Skv >= every sequence's cached + new tokens
  int64_t page_size = 0;
  int64_t num_pages = 0;
  cudnnDataType_t io_type = CUDNN_DATA_BFLOAT16;
  bool ragged = false;    // packed Q/O rows with ragged offsets
  bool causal = false;

  int64_t table_width() const { return (max_kv + page_size - 1) / page_size; }
  std::string describe() const;
};

// Device pointers of one execution (page_table serves K and V; ragged_offsets Q and O).
struct CudnnSdpaBuffers {
  const void* q = nullptr;
  void* o = nullptr;
  const void* k_pages = nullptr;
  const void* v_pages = nullptr;
  const int32_t* seq_len_q = nullptr;   // [B]
  const int32_t* seq_len_kv = nullptr;  // [B]
  const int32_t* page_table = nullptr;  // [B, T]
  const int32_t* ragged_offsets = nullptr;  // [B + 1], when ragged
  void* workspace = nullptr;            // workspace_bytes()
};

// The graph of `shape`, finalized: the operation graph is the last element, the rest are the
// tensors and operations it references (they must outlive it). handle may be null where no device
// is present (a graph check without heuristics). Throws with cuDNN's message on failure.
std::vector<CudnnDescriptor> build_cudnn_sdpa_graph(const CudnnApi& api, cudnnHandle_t handle,
                                                    const CudnnSdpaShape& shape, bool debug);

class CudnnSdpaPlan {
 public:
  // Builds the graph, asks cuDNN's heuristics (mode A, then fallback) for engine configs and
  // keeps the first that finalizes into a plan. Throws spindle::Error with cuDNN's status and
  // message when the graph cannot be built or no config finalizes. `debug` logs every step.
  CudnnSdpaPlan(const CudnnApi& api, cudnnHandle_t handle, const CudnnSdpaShape& shape, bool debug);

  int64_t workspace_bytes() const { return workspace_bytes_; }
  // cuDNN's global index of the chosen engine (-1 when cuDNN did not report it).
  int64_t engine_index() const { return engine_index_; }

  // Runs on the handle's stream. Throws on a cuDNN error.
  void execute(cudnnHandle_t handle, const CudnnSdpaBuffers& buffers, float scale) const;

 private:
  void choose_engine(cudnnHandle_t handle, bool debug);

  const CudnnApi* api_;
  CudnnSdpaShape shape_;
  std::vector<CudnnDescriptor> graph_;  // tensors, operations and the operation graph (kept alive)
  CudnnDescriptor plan_;
  int64_t workspace_bytes_ = 0;
  int64_t engine_index_ = -1;
  float negative_infinity_ = 0.0f;  // the masks' fill value (lowest float before cuDNN 9.10)
};

}  // namespace spindle::kernels::cuda
