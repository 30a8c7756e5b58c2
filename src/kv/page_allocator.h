// Page accounting for one DP rank's share of the KV pool: a free list and reference counts.
//
// Page ids are rank-local, [0, num_pages()), and are what page tables hold. Every page is in
// exactly one of three states:
//   free    on the free list; ref_count 0, not cached
//   cached  held by the prefix cache and referenced by no request (evictable)
//   in use  ref_count > 0: referenced by that many block tables (it may also be cached, when
//           it is a shared prefix page)
// Pages are shared only through the prefix cache, so a page with ref_count > 1 is cached.
//
// Residency (what the OS holds for a page's memory; CPU pools, DESIGN.md section 3): free pages
// are either resident (freed after use; handed out first, last freed first) or released (never
// used, or their memory given back through the PageMemoryReleaser). trim() keeps at most
// set_residency_limits()' number of cached unreferenced pages (evicting the least recently used
// beyond it) and of resident free pages (releasing the rest). Without limits (the default, and
// always on GPUs) nothing is evicted before the free list runs short and nothing is released.
// Single-threaded: the engine thread of this rank owns it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace spindle::kv {

// Frees cached, unreferenced pages when the free list runs short (the prefix cache implements it).
class PageEvictor {
 public:
  virtual ~PageEvictor() = default;
  // Tries to free num_pages pages; returns how many it freed.
  virtual int evict_pages(int num_pages) = 0;
};

// Gives the memory of free pages back to the OS (PagePool on the CPU: madvise(MADV_DONTNEED)).
class PageMemoryReleaser {
 public:
  virtual ~PageMemoryReleaser() = default;
  // pages: rank-local ids, free, in increasing order.
  virtual void release_page_memory(int rank, std::span<const int32_t> pages) = 0;
};

inline constexpr int64_t kNoPageLimit = -1;

class PageAllocator {
 public:
  // Pages are handed out in increasing id order while none has been freed.
  PageAllocator(int num_pages, int page_size);
  PageAllocator(const PageAllocator&) = delete;
  PageAllocator& operator=(const PageAllocator&) = delete;

  int num_pages() const { return static_cast<int>(ref_counts_.size()); }
  int page_size() const { return page_size_; }
  int num_free_pages() const { return static_cast<int>(free_list_.size() + released_list_.size()); }
  int num_resident_free_pages() const { return static_cast<int>(free_list_.size()); }
  int num_cached_pages() const { return num_cached_unreferenced_; }  // evictable
  int num_in_use_pages() const { return num_in_use_; }
  // Free pages plus those the evictor could free (cached and unreferenced).
  int num_available_pages() const { return num_free_pages() + num_cached_pages(); }

  // Appends num_pages pages to out, each with ref_count 1. When the free list is short, the
  // evictor is asked for the difference first. All or nothing: returns false, changing nothing
  // in out, when num_pages pages cannot be found.
  bool allocate(int num_pages, std::vector<int32_t>& out);
  // One more reference to a page that is in use or cached.
  void retain(int32_t page);
  // One reference fewer; an uncached page whose count reaches 0 returns to the free list.
  void release(int32_t page);
  // The prefix cache takes (true) or gives up (false) a page. Giving up an unreferenced page
  // frees it. Taking a free page is an error.
  void set_cached(int32_t page, bool cached);

  int ref_count(int32_t page) const;
  bool is_cached(int32_t page) const;

  // At most one; null removes it. The evictor must outlive this allocator or remove itself.
  void set_evictor(PageEvictor* evictor) { evictor_ = evictor; }
  PageEvictor* evictor() const { return evictor_; }

  // The releaser (null: none) and this allocator's rank, passed back to it. Must outlive this.
  void set_releaser(PageMemoryReleaser* releaser, int rank) {
    releaser_ = releaser;
    rank_ = rank;
  }
  // max_cached_pages: cached unreferenced pages kept by trim(); max_resident_free_pages: free
  // pages whose memory trim() keeps (the rest are released, when a releaser is set). Each >= 0,
  // or kNoPageLimit.
  void set_residency_limits(int64_t max_cached_pages, int64_t max_resident_free_pages);
  int64_t max_cached_pages() const { return max_cached_pages_; }
  int64_t max_resident_free_pages() const { return max_resident_free_pages_; }
  // Applies the limits: evicts (through the evictor) cached pages beyond max_cached_pages, then
  // moves resident free pages beyond max_resident_free_pages to the released list, giving their
  // memory back. BlockTable::free() calls it, so it runs whenever a request gives pages back.
  void trim();
  uint64_t num_released_total() const { return num_released_total_; }  // pages released so far

  // Recounts every page and throws spindle::Error naming the first violation:
  // free + cached + in use == total, no page on the free list twice, every free-listed page
  // unreferenced and uncached, every unreferenced uncached page on the free list (nothing leaked),
  // every page referenced more than once cached (no page owned twice), counters match.
  void check_integrity() const;

 private:
  void check_page(int32_t page) const;

  int page_size_;
  std::vector<int32_t> ref_counts_;  // [num_pages]
  std::vector<uint8_t> cached_;      // [num_pages]
  std::vector<int32_t> free_list_;      // resident free pages, a stack; back() is handed out next
  std::vector<int32_t> released_list_;  // free pages not resident, a stack; handed out after free_list_
  std::vector<int32_t> to_release_;     // trim()'s scratch
  int num_cached_unreferenced_ = 0;
  int num_in_use_ = 0;
  PageEvictor* evictor_ = nullptr;
  PageMemoryReleaser* releaser_ = nullptr;
  int rank_ = 0;
  int64_t max_cached_pages_ = kNoPageLimit;
  int64_t max_resident_free_pages_ = kNoPageLimit;
  uint64_t num_released_total_ = 0;
};

}  // namespace spindle::kv
