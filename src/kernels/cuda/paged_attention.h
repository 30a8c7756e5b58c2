// Paged attention on a CUDA device: the contract of kernels/cpu/paged_attention.h, with every
// tensor (q, out, k/v pages, new k/v) in device memory and the batch layout (sequences and their
// page tables) on the host. Host-side checks (kernels::cpu::check_paged_attention_params) run
// before any launch; the per-row metadata is uploaded into a DeviceScratch.
//
// cuda_reference: one thread block per (query row, head), float accumulation, online softmax with
// a running max. Correctness first; head_dim up to kCudaReferenceMaxHeadDim.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/paged_attention.h"

namespace spindle::kernels::cuda {

inline constexpr int kCudaReferenceMaxHeadDim = 256;  // == detail::kMaxHeadDim

// A grow-only device allocation (cudaMalloc), freed on destruction. Not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { reserve(bytes); }
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  // Ensures at least `bytes` are allocated (contents are lost when it grows).
  void reserve(size_t bytes);
  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Scratch for the per-row metadata of one launch (reused across calls).
struct AttentionScratch {
  DeviceBuffer rows;         // per query row: RowInfo (paged_attention_reference.cu)
  DeviceBuffer page_tables;  // every sequence's page table, concatenated
  DeviceBuffer slots;        // per new token: its page slot (write_kv_pages)
};

// p.q, p.out, p.k_pages, p.v_pages are device pointers; p.sequences (and their page tables) are
// host memory. p.pool is ignored. Synchronous on `stream` only for the metadata upload.
void paged_attention_reference(const cpu::PagedAttentionParams& p, AttentionScratch& scratch,
                               cudaStream_t stream = nullptr);

// New tokens' K/V into their device pages: p.k, p.v, p.k_pages, p.v_pages are device pointers,
// p.sequences host memory. bf16: round to nearest even, bit-identical to cpu::write_kv_pages.
void write_kv_pages(const cpu::KvWriteParams& p, AttentionScratch& scratch, cudaStream_t stream = nullptr);

}  // namespace spindle::kernels::cuda
