#include "util/huge_page_allocator.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace spindle {
namespace {

constexpr size_t kSmallPageBytes = 4096;

size_t mapped_bytes(size_t bytes) { return (bytes + kSmallPageBytes - 1) / kSmallPageBytes * kSmallPageBytes; }

}  // namespace

void* huge_page_alloc(size_t bytes) {
  if (bytes < kHugePageMinBytes) return ::operator new(bytes == 0 ? 1 : bytes);
  const size_t size = mapped_bytes(bytes);
  // Over-reserve by one huge page, then unmap the head before the first 2 MiB boundary and the tail
  // past `size`: what stays starts aligned and ends at the block's own (4 KiB-rounded) end.
  const size_t reserved = size + kHugePageMinBytes;
  void* p = ::mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const auto base = reinterpret_cast<uintptr_t>(p);
  const uintptr_t start = (base + kHugePageMinBytes - 1) / kHugePageMinBytes * kHugePageMinBytes;
  if (start > base) ::munmap(p, start - base);
  const uintptr_t end = start + size, reserved_end = base + reserved;
  if (reserved_end > end) ::munmap(reinterpret_cast<void*>(end), reserved_end - end);
  (void)::madvise(reinterpret_cast<void*>(start), size, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(start);
}

void huge_page_free(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kHugePageMinBytes) {
    ::operator delete(p);
    return;
  }
  ::munmap(p, mapped_bytes(bytes));
}

HugePageArena::HugePageArena(size_t chunk_bytes) : chunk_bytes_(chunk_bytes < kHugePageMinBytes ? kHugePageMinBytes : chunk_bytes) {}

HugePageArena::~HugePageArena() {
  for (const Chunk& c : chunks_) huge_page_free(c.data, c.bytes);
}

void* HugePageArena::allocate(size_t bytes) {
  constexpr size_t kAlign = 64;
  if (bytes == 0) bytes = 1;
  // First fit over the chunks' tails, oldest first: a block that does not fit the newest chunk's
  // tail often fits an older one (e.g. a 0.9 MiB down projection behind 1.8 MiB gate/up blocks).
  for (Chunk& c : chunks_) {
    const size_t start = (c.used + kAlign - 1) / kAlign * kAlign;
    if (start + bytes <= c.bytes) {
      c.used = start + bytes;
      return static_cast<char*>(c.data) + start;
    }
  }
  const size_t size = bytes > chunk_bytes_ ? mapped_bytes(bytes) : chunk_bytes_;
  chunks_.push_back({huge_page_alloc(size), size, bytes});  // size >= kHugePageMinBytes: 2 MiB-aligned
  mapped_ += size;
  return chunks_.back().data;
}

}  // namespace spindle
