// Paged attention on a CUDA device: the contract of kernels/cpu/paged_attention.h with every
// tensor (q, out, new k/v, k/v pages) in device memory. A step's batch layout is uploaded once
// (DeviceBatch::upload, after host-side checks) and shared by every layer's launches.
//
// Kernels: cuda_reference (paged_attention_reference.cu: one block per (query row, head), float
// accumulation, the GPU ground truth), cuda_flash (flash_attention.h), cudnn_sdpa (cudnn_sdpa.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/paged_layer_launch.h"
#include "kernels/cuda/paged_attention_launch.h"
#include "kernels/step_batch.h"
#include "util/dtype.h"

namespace spindle::kernels::cuda {

inline constexpr int kCudaReferenceMaxHeadDim = 256;  // == detail::kMaxHeadDim

// kF32, kBF16 or kF16; throws for any other KV dtype.
detail::KvType kv_type_of(DType dtype);

// One step's StepBatch on the device, uploaded with one host-to-device copy: its own arrays
// (token ids, positions, sequences, page tables, logit rows: step()) plus what the attention
// kernels derive from it, per query row its page slot (for the K/V writer) and RowInfo (for the
// reference kernel), and in steps of 2..kRowSequencesMaxRows rows (not all decode rows) each row
// as a one-token sequence (view().row_sequences, for cuda_flash's decode kernel). The transformer
// and every CUDA backend of the step read this one copy.
class DeviceBatch {
 public:
  // Uploads the batch (queued on `stream` from pinned staging; the staging is reused only after
  // the previous copy finished). The sequences must already satisfy
  // cpu::check_paged_attention_params (rows contiguous in batch order, page tables covering every
  // position); page ids are checked against the pool there too, before any kernel runs (PagedBackend
  // does both). Throws only for sizes the launch grids cannot take.
  //
  // The step's kernels run on stream(). Padding sequences' rows get slot -1 (their K/V is not
  // written). plan_kv_len > max_kv_len makes view().max_kv_len that bound instead, so launch
  // plans derived from it (the decode splits) hold for every step up to it: a CUDA graph's. The
  // arrays whose size is per row or per sequence sit at offsets that depend only on the counts
  // (the page tables come last), so equal counts give equal device pointers while the buffer does
  // not grow (reserve() it for the largest step first).
  void upload(const StepBatch& batch, int page_size, cudaStream_t stream = nullptr, int plan_kv_len = 0);
  // Grows the device buffer and the staging for steps of up to these sizes.
  void reserve(int64_t max_rows, int64_t max_sequences, int64_t max_page_entries);
  DeviceBatch() = default;
  ~DeviceBatch();
  DeviceBatch(const DeviceBatch&) = delete;  // owns pinned staging and an event
  DeviceBatch& operator=(const DeviceBatch&) = delete;

  const detail::PagedBatchView& view() const { return view_; }
  const StepBatchView& step() const { return step_; }                  // device pointers
  // The uploaded token ids, writable (pending tokens are copied in after the upload).
  int32_t* token_ids() const { return const_cast<int32_t*>(step_.token_ids); }
  const int64_t* slots() const { return slots_; }   // [num_rows]
  const void* rows() const { return rows_; }        // [num_rows] detail::RowInfo
  cudaStream_t stream() const { return stream_; }
  uint64_t device_bytes() const { return buffer_.size(); }

 private:
  detail::PagedBatchView view_;
  StepBatchView step_;
  const int64_t* slots_ = nullptr;
  const void* rows_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer buffer_;
  void grow_staging(size_t bytes);

  std::byte* staging_ = nullptr;  // pinned host memory of staging_bytes_
  size_t staging_bytes_ = 0;
  cudaEvent_t copied_ = nullptr;  // the last upload's copy finished
  std::vector<int64_t> slots_host_;
  std::vector<detail::RowInfo> rows_host_;
  std::vector<StepSequence> row_sequences_host_;
};

// The common launch of one layer over this rank's pages (p's pointers are device memory).
detail::PagedLayerLaunch make_layer_launch(const cpu::PagedAttentionParams& p, const DeviceBatch& batch,
                                           int num_sms);

// New tokens' K/V (device f32 [rows, kv_heads * head_dim]) into their device pages, rounded to
// the KV type (nearest even), bit-identical to cpu::write_kv_pages. On batch.stream(), as is:
void write_kv_pages(const cpu::KvWriteParams& p, const DeviceBatch& batch);

// cuda_reference over the uploaded batch.
void paged_attention_reference(const cpu::PagedAttentionParams& p, const DeviceBatch& batch);

// out[i] += value over n device floats (the validation tests' `wrong` fault).
void add_constant(float* out, int64_t n, float value, cudaStream_t stream = nullptr);

// Multiprocessors of the current device.
int current_device_sm_count();

}  // namespace spindle::kernels::cuda
