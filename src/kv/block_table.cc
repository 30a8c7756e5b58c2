#include "kv/block_table.h"

#include <utility>

#include "util/error.h"

namespace spindle::kv {

BlockTable::BlockTable(PageAllocator& allocator) : allocator_(&allocator) {}

BlockTable::~BlockTable() {
  if (allocator_ != nullptr) free();
}

BlockTable::BlockTable(BlockTable&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      pages_(std::move(other.pages_)),
      num_tokens_(std::exchange(other.num_tokens_, 0)),
      num_prefix_tokens_(std::exchange(other.num_prefix_tokens_, 0)) {
  other.pages_.clear();
}

BlockTable& BlockTable::operator=(BlockTable&& other) noexcept {
  if (this != &other) {
    if (allocator_ != nullptr) free();
    allocator_ = std::exchange(other.allocator_, nullptr);
    pages_ = std::move(other.pages_);
    other.pages_.clear();
    num_tokens_ = std::exchange(other.num_tokens_, 0);
    num_prefix_tokens_ = std::exchange(other.num_prefix_tokens_, 0);
  }
  return *this;
}

void BlockTable::assign_prefix(std::span<const int32_t> pages) {
  SPINDLE_CHECK(allocator_ != nullptr, "block table was moved from");
  SPINDLE_CHECK(pages_.empty(), "assign_prefix needs an empty block table (it holds {} pages)", pages_.size());
  for (const int32_t page : pages) allocator_->retain(page);
  pages_.assign(pages.begin(), pages.end());
  num_tokens_ = num_prefix_tokens_ = static_cast<int>(pages.size()) * allocator_->page_size();
}

int BlockTable::num_pages_to_extend(int num_new_tokens) const {
  SPINDLE_CHECK(allocator_ != nullptr, "block table was moved from");
  SPINDLE_CHECK(num_new_tokens >= 0, "cannot extend a block table by {} tokens", num_new_tokens);
  const int64_t page_size = allocator_->page_size();
  const int64_t needed = (int64_t{num_tokens_} + num_new_tokens + page_size - 1) / page_size;
  return static_cast<int>(needed - num_pages());
}

bool BlockTable::extend(int num_new_tokens) {
  const int num_new_pages = num_pages_to_extend(num_new_tokens);
  if (!allocator_->allocate(num_new_pages, pages_)) return false;
  num_tokens_ += num_new_tokens;
  return true;
}

void BlockTable::truncate(int num_tokens) {
  SPINDLE_CHECK(allocator_ != nullptr, "block table was moved from");
  SPINDLE_CHECK(num_tokens >= num_prefix_tokens_ && num_tokens <= num_tokens_,
                "cannot truncate a block table of {} tokens ({} from the prefix cache) to {}", num_tokens_,
                num_prefix_tokens_, num_tokens);
  const int64_t page_size = allocator_->page_size();
  const size_t keep = static_cast<size_t>((int64_t{num_tokens} + page_size - 1) / page_size);
  const bool released = keep < pages_.size();
  while (pages_.size() > keep) {
    allocator_->release(pages_.back());
    pages_.pop_back();
  }
  num_tokens_ = num_tokens;
  if (released) allocator_->trim();
}

void BlockTable::free() {
  if (allocator_ == nullptr) return;
  const bool had_pages = !pages_.empty();
  for (const int32_t page : pages_) allocator_->release(page);
  pages_.clear();
  num_tokens_ = num_prefix_tokens_ = 0;
  if (had_pages) allocator_->trim();  // the residency limits, now that pages came back
}

void check_integrity(const PageAllocator& allocator, std::span<const BlockTable* const> live_tables) {
  allocator.check_integrity();
  std::vector<int32_t> references(static_cast<size_t>(allocator.num_pages()), 0);
  for (const BlockTable* table : live_tables) {
    SPINDLE_CHECK(&table->allocator() == &allocator, "a live block table belongs to another allocator");
    const int page_size = allocator.page_size();
    SPINDLE_CHECK(table->num_pages() == (table->num_tokens() + page_size - 1) / page_size,
                  "a block table of {} tokens holds {} pages", table->num_tokens(), table->num_pages());
    for (const int32_t page : table->pages()) {
      SPINDLE_CHECK(page >= 0 && page < allocator.num_pages(), "a block table holds page {} outside [0, {})", page,
                    allocator.num_pages());
      ++references[page];
    }
  }
  for (int32_t page = 0; page < allocator.num_pages(); ++page) {
    SPINDLE_CHECK(references[page] == allocator.ref_count(page),
                  "page {} has {} references but {} live block tables hold it", page, allocator.ref_count(page),
                  references[page]);
  }
}

}  // namespace spindle::kv
