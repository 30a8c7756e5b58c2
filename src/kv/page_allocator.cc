#include "kv/page_allocator.h"

#include <algorithm>

#include "util/error.h"

namespace spindle::kv {

PageAllocator::PageAllocator(int num_pages, int page_size) : page_size_(page_size) {
  SPINDLE_CHECK(num_pages > 0, "a page allocator needs at least one page (got {})", num_pages);
  SPINDLE_CHECK(page_size > 0, "page size must be positive (got {})", page_size);
  ref_counts_.assign(static_cast<size_t>(num_pages), 0);
  cached_.assign(static_cast<size_t>(num_pages), 0);
  // Untouched pages are not resident: the released list, handed out in increasing id order.
  released_list_.reserve(static_cast<size_t>(num_pages));
  for (int32_t p = num_pages - 1; p >= 0; --p) released_list_.push_back(p);
}

void PageAllocator::check_page(int32_t page) const {
  SPINDLE_CHECK(page >= 0 && page < num_pages(), "page {} is outside this rank's pages [0, {})", page, num_pages());
}

bool PageAllocator::allocate(int num_pages, std::vector<int32_t>& out) {
  SPINDLE_CHECK(num_pages >= 0, "cannot allocate {} pages", num_pages);
  if (num_free_pages() < num_pages && evictor_ != nullptr) evictor_->evict_pages(num_pages - num_free_pages());
  if (num_free_pages() < num_pages) return false;
  for (int i = 0; i < num_pages; ++i) {
    std::vector<int32_t>& from = free_list_.empty() ? released_list_ : free_list_;
    const int32_t page = from.back();
    from.pop_back();
    ref_counts_[page] = 1;
    out.push_back(page);
  }
  num_in_use_ += num_pages;
  return true;
}

void PageAllocator::retain(int32_t page) {
  check_page(page);
  int32_t& count = ref_counts_[page];
  SPINDLE_CHECK(count > 0 || cached_[page], "retain of free page {}", page);
  if (count == 0) {
    --num_cached_unreferenced_;
    ++num_in_use_;
  }
  ++count;
}

void PageAllocator::release(int32_t page) {
  check_page(page);
  int32_t& count = ref_counts_[page];
  SPINDLE_CHECK(count > 0, "release of unreferenced page {}", page);
  if (--count > 0) return;
  --num_in_use_;
  if (cached_[page]) {
    ++num_cached_unreferenced_;
  } else {
    free_list_.push_back(page);
  }
}

void PageAllocator::set_cached(int32_t page, bool cached) {
  check_page(page);
  const bool was = cached_[page] != 0;
  if (was == cached) return;
  const int32_t count = ref_counts_[page];
  if (cached) {
    SPINDLE_CHECK(count > 0, "page {} is free; only a page in use can enter the prefix cache", page);
  } else if (count == 0) {
    --num_cached_unreferenced_;
    free_list_.push_back(page);
  }
  cached_[page] = cached ? 1 : 0;
}

void PageAllocator::set_residency_limits(int64_t max_cached_pages, int64_t max_resident_free_pages) {
  SPINDLE_CHECK(max_cached_pages >= 0 || max_cached_pages == kNoPageLimit,
                "the prefix cache's page limit must be >= 0 (got {})", max_cached_pages);
  SPINDLE_CHECK(max_resident_free_pages >= 0 || max_resident_free_pages == kNoPageLimit,
                "the resident free page limit must be >= 0 (got {})", max_resident_free_pages);
  max_cached_pages_ = max_cached_pages;
  max_resident_free_pages_ = max_resident_free_pages;
}

void PageAllocator::trim() {
  if (max_cached_pages_ != kNoPageLimit && evictor_ != nullptr && num_cached_unreferenced_ > max_cached_pages_) {
    evictor_->evict_pages(static_cast<int>(num_cached_unreferenced_ - max_cached_pages_));
  }
  if (max_resident_free_pages_ == kNoPageLimit || releaser_ == nullptr ||
      static_cast<int64_t>(free_list_.size()) <= max_resident_free_pages_) {
    return;
  }
  // The least recently freed (the bottom of the stack) go; the rest stay in their order.
  const size_t excess = free_list_.size() - static_cast<size_t>(max_resident_free_pages_);
  to_release_.assign(free_list_.begin(), free_list_.begin() + static_cast<std::ptrdiff_t>(excess));
  free_list_.erase(free_list_.begin(), free_list_.begin() + static_cast<std::ptrdiff_t>(excess));
  std::sort(to_release_.begin(), to_release_.end());
  releaser_->release_page_memory(rank_, to_release_);
  // Descending on the stack, so released pages are handed out again in increasing id order.
  released_list_.insert(released_list_.end(), to_release_.rbegin(), to_release_.rend());
  num_released_total_ += excess;
}

int PageAllocator::ref_count(int32_t page) const {
  check_page(page);
  return ref_counts_[page];
}

bool PageAllocator::is_cached(int32_t page) const {
  check_page(page);
  return cached_[page] != 0;
}

void PageAllocator::check_integrity() const {
  std::vector<uint8_t> on_free_list(ref_counts_.size(), 0);
  std::vector<int32_t> all_free(free_list_);
  all_free.insert(all_free.end(), released_list_.begin(), released_list_.end());
  for (const int32_t page : all_free) {
    SPINDLE_CHECK(page >= 0 && page < num_pages(), "free list holds page {} outside [0, {})", page, num_pages());
    SPINDLE_CHECK(!on_free_list[page], "page {} is on the free list twice", page);
    on_free_list[page] = 1;
    SPINDLE_CHECK(ref_counts_[page] == 0, "free page {} has {} references", page, ref_counts_[page]);
    SPINDLE_CHECK(!cached_[page], "free page {} is also in the prefix cache", page);
  }
  int num_free = 0, num_cached = 0, num_in_use = 0;
  for (int32_t page = 0; page < num_pages(); ++page) {
    const int32_t count = ref_counts_[page];
    SPINDLE_CHECK(count >= 0, "page {} has a negative reference count {}", page, count);
    SPINDLE_CHECK(count <= 1 || cached_[page], "page {} is owned {} times but is not a shared prefix-cache page",
                  page, count);
    if (count > 0) {
      ++num_in_use;
    } else if (cached_[page]) {
      ++num_cached;
    } else {
      SPINDLE_CHECK(on_free_list[page], "page {} leaked: unreferenced, uncached and not on the free list", page);
      ++num_free;
    }
  }
  SPINDLE_CHECK(num_free + num_cached + num_in_use == num_pages(),
                "free {} + cached {} + in use {} != total {}", num_free, num_cached, num_in_use, num_pages());
  SPINDLE_CHECK(num_free == num_free_pages() && num_cached == num_cached_unreferenced_ && num_in_use == num_in_use_,
                "page counters drifted: counted free {} cached {} in use {}, tracked {} {} {}", num_free, num_cached,
                num_in_use, num_free_pages(), num_cached_unreferenced_, num_in_use_);
}

}  // namespace spindle::kv
