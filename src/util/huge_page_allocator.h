// Memory for large read-mostly arrays that the CPU streams (repacked quantized weights): a
// std::allocator replacement whose blocks of kHugePageMinBytes or more are anonymous mappings that
// start on a 2 MiB boundary and are advised MADV_HUGEPAGE, so a kernel whose transparent huge pages
// are "madvise" (Debian's default) backs their whole 2 MiB pages with huge pages; smaller blocks come
// from operator new. A decode step reads every weight once: on 4 KiB pages that is a TLB miss (a
// page walk, two-dimensional under a hypervisor) every 4 KiB; mapped_file.h does the same for
// weights read in place (bench/results/2026-12-04-zen3-hugepage-weights).
//
// A mapping ends at the block's size rounded up to 4 KiB, so no block holds more than 4 KiB it
// did not ask for (its last partial 2 MiB stays on 4 KiB pages). Advice only: without transparent
// huge pages the memory is ordinary 4 KiB pages (still correct). allocate() throws std::bad_alloc
// when the mapping fails.
#pragma once

#include <cstddef>
#include <vector>

namespace spindle {

inline constexpr size_t kHugePageMinBytes = size_t{2} << 20;

// bytes > 0. huge_page_free takes the pointer and the byte count that huge_page_alloc was given.
void* huge_page_alloc(size_t bytes);
void huge_page_free(void* p, size_t bytes) noexcept;

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>& /*other*/) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(huge_page_alloc(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { huge_page_free(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>& /*other*/) const noexcept {
    return true;
  }
};

// Many small read-mostly blocks (each below kHugePageMinBytes, e.g. a mixture of experts' per-expert
// repacked weights: 0.9-1.8 MiB each in Qwen3-30B-A3B's shape) carved out of huge-page chunks, so
// they are read on 2 MiB pages too: operator new would put them on 4 KiB pages, a TLB miss (a
// two-dimensional page walk under a hypervisor) every 4 KiB of a decode step's expert products.
// allocate() hands out `bytes` at a 64-byte boundary from the tail of the oldest chunk it fits
// (first fit), else from a new chunk of max(chunk_bytes, bytes); so a chunk's tail is left unused
// only while no later block fits it. Blocks live until the arena is destroyed. Not thread-safe: one
// caller at a time. O(chunks) a call: ~280 chunks hold the 48-layer Qwen3-30B-A3B file's 17.6 GiB.
class HugePageArena {
 public:
  static constexpr size_t kDefaultChunkBytes = size_t{64} << 20;
  explicit HugePageArena(size_t chunk_bytes = kDefaultChunkBytes);
  ~HugePageArena();
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // bytes > 0; throws std::bad_alloc when a chunk cannot be mapped.
  void* allocate(size_t bytes);
  // Bytes mapped for chunks (what the arena holds, used or not).
  size_t bytes_mapped() const { return mapped_; }

 private:
  struct Chunk {
    void* data;
    size_t bytes;
    size_t used;  // bytes from data handed out (with alignment gaps); the tail past it is free
  };
  size_t chunk_bytes_;
  std::vector<Chunk> chunks_;
  size_t mapped_ = 0;
};

}  // namespace spindle
