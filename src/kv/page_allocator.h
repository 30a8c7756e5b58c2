// Page accounting for one DP rank's share of the KV pool: a free list and reference counts.
//
// Page ids are rank-local, [0, num_pages()), and are what page tables hold. Every page is in
// exactly one of three states:
//   free    on the free list; ref_count 0, not cached
//   cached  held by the prefix cache and referenced by no request (evictable)
//   in use  ref_count > 0: referenced by that many block tables (it may also be cached, when
//           it is a shared prefix page)
// Pages are shared only through the prefix cache, so a page with ref_count > 1 is cached.
// Single-threaded: the engine thread of this rank owns it.
#pragma once

#include <cstdint>
#include <vector>

namespace spindle::kv {

// Frees cached, unreferenced pages when the free list runs short (the prefix cache implements it).
class PageEvictor {
 public:
  virtual ~PageEvictor() = default;
  // Tries to free num_pages pages; returns how many it freed.
  virtual int evict_pages(int num_pages) = 0;
};

class PageAllocator {
 public:
  // Pages are handed out in increasing id order while none has been freed.
  PageAllocator(int num_pages, int page_size);
  PageAllocator(const PageAllocator&) = delete;
  PageAllocator& operator=(const PageAllocator&) = delete;

  int num_pages() const { return static_cast<int>(ref_counts_.size()); }
  int page_size() const { return page_size_; }
  int num_free_pages() const { return static_cast<int>(free_list_.size()); }
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
  std::vector<int32_t> free_list_;   // a stack; back() is handed out next
  int num_cached_unreferenced_ = 0;
  int num_in_use_ = 0;
  PageEvictor* evictor_ = nullptr;
};

}  // namespace spindle::kv
