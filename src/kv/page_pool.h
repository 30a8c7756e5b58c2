// PagePool: the KV cache memory, fixed pages of page_size tokens holding every layer's K and V,
// and one PageAllocator per DP rank over that rank's pages.
//
// Memory: for each layer, a K array and a V array, each
//   [num_pages, page_size, num_kv_heads, head_dim] of layout.dtype (bf16, f16, f32 or f8_e4m3),
// each starting on a 4096-byte boundary, in one allocation.
// FP8 pools also hold the KV scales (kernels/kv_scales.h; 1.0 until set_kv_scales), in the pool's
// memory (host, or a small CUDA allocation): layer_caches() points each layer at its K and V scales.
//
// Host pool (Device::kCpu): one anonymous mapping. The kernel supplies zeroed
// memory as pages are first written, so start-up costs nothing and resident memory grows with use
// up to the planned size (the planner already proved the plan fits). Pre-faulting the whole pool
// (MAP_POPULATE) was tried: a 19 GiB pool took ~55 s to start on the 2-core dev machine.
// CUDA pool (Device::kCuda, builds with CUDA): one cudaMalloc on the calling thread's current
// device, zeroed once; k_page()/v_page() and layer_caches() then hold device pointers.
//
// Residency (CPU): the pool is every allocator's PageMemoryReleaser. A released page's K and V
// memory goes back to the OS with madvise(MADV_DONTNEED) over the whole OS pages inside each of
// its 2 * num_layers chunks (a chunk of bytes_per_layer_page() smaller than an OS page, or the
// OS pages it shares with a neighbour, stay resident); it reads as zeros when used again.
//
// Data parallelism: the pool holds every rank's pages; rank r owns the global pages
// rank_page_range(num_pages, dp_size, r) (kernels/kv_geometry.h, the formula the attention
// backends use too), and num_pages must be a multiple of dp_size. allocator(r) hands out rank-local ids
// [0, num_pages_per_rank()), the ids page tables hold; global = first_page(r) + local.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "attn/attention_types.h"
#include "kernels/kv_geometry.h"
#include "kernels/kv_scales.h"
#include "kv/kv_layout.h"
#include "kv/page_allocator.h"

namespace spindle::kv {

class PagePool final : public PageMemoryReleaser {
 public:
  // num_pages: the whole pool, every rank's pages. Throws when the layout is invalid, num_pages
  // is not a positive multiple of dp_size, or the memory cannot be mapped or allocated.
  PagePool(const KvLayout& layout, int num_pages, int dp_size = 1, attn::Device device = attn::Device::kCpu);
  ~PagePool() override;
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  const KvLayout& layout() const { return layout_; }
  attn::Device device() const { return device_; }
  int num_pages() const { return num_pages_; }
  int dp_size() const { return static_cast<int>(allocators_.size()); }
  int num_pages_per_rank() const { return rank_page_range(num_pages_, dp_size(), 0).count; }
  // The first global page of a rank's range.
  int first_page(int rank) const;
  // The rank's KV geometry: the layout's, with the rank's page range.
  KvGeometry geometry(int rank) const;
  // Bytes of K and V held: 2 * num_layers * num_pages * layout.bytes_per_layer_page() (before
  // alignment padding).
  uint64_t num_bytes() const;

  // The rank's allocator (rank-local page ids).
  PageAllocator& allocator(int rank = 0);
  const PageAllocator& allocator(int rank = 0) const;

  // One entry per layer, each covering the whole pool (all ranks), for bind_kv_caches().
  std::vector<attn::LayerKvCache> layer_caches() const;

  // FP8 pools: the dequantization scales every layer's pages are written and read with (host
  // copy). Set them before the first page is written (and bind the caches again); throws for a
  // pool of another dtype, for scales of another shape than [num_layers, num_kv_heads], and for
  // a scale that is not positive and finite.
  void set_kv_scales(const KvScales& scales);
  const KvScales& kv_scales() const { return scales_; }

  // num_pages consecutive pages of one layer's K (v false) or V array from global_page on, copied
  // to the host (from the device for a CUDA pool): [num_pages, page_size, num_kv_heads, head_dim].
  std::vector<std::byte> copy_pages_to_host(int layer, bool v, int global_page, int num_pages) const;

  // The K (or V) bytes of one layer's page: [page_size, num_kv_heads, head_dim] of dtype.
  std::byte* k_page(int layer, int global_page) const;
  std::byte* v_page(int layer, int global_page) const;

  // PageMemoryReleaser (CPU pools; a CUDA pool keeps its memory).
  void release_page_memory(int rank, std::span<const int32_t> pages) override;
  uint64_t num_released_bytes() const { return num_released_bytes_; }  // madvise'd so far
  uint64_t num_release_failures() const { return num_release_failures_; }  // madvise calls that failed

 private:
  std::byte* array(int layer, int which, int global_page) const;  // which: 0 K, 1 V

  KvLayout layout_;
  attn::Device device_ = attn::Device::kCpu;
  int num_pages_ = 0;
  uint64_t array_stride_ = 0;  // bytes between consecutive arrays (K0, V0, K1, V1, ...)
  void* memory_ = nullptr;
  size_t mapped_bytes_ = 0;
  uint64_t num_released_bytes_ = 0;
  uint64_t num_release_failures_ = 0;
  struct DeviceMemory;
  std::unique_ptr<DeviceMemory> device_memory_;  // the CUDA allocation, when device_ is kCuda
  KvScales scales_;                  // FP8 pools: [num_layers, num_kv_heads] each (empty otherwise)
  std::vector<float> host_scales_;  // k then v scales, [2, num_layers, num_kv_heads]
  const float* scales_memory_ = nullptr;  // k then v, where the kernels read them (host or device)
  std::vector<std::unique_ptr<PageAllocator>> allocators_;  // [dp_size]
};

}  // namespace spindle::kv
