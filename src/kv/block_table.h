// BlockTable: one request's pages, in position order (page i holds tokens
// [i * page_size, (i + 1) * page_size)), with one reference held on each.
//
// Life of a request: assign_prefix() with the prefix cache's match, extend() before each forward
// by the tokens it will write, then either PrefixCache::insert() and free() (finished) or just
// free() (aborted). The destructor frees whatever is still held. The allocator must outlive it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/page_allocator.h"

namespace spindle::kv {

class BlockTable {
 public:
  explicit BlockTable(PageAllocator& allocator);
  ~BlockTable();
  BlockTable(BlockTable&& other) noexcept;
  BlockTable& operator=(BlockTable&& other) noexcept;
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;

  // Starts an empty table with cached prefix pages (from PrefixCache::match); each is retained
  // and num_tokens() becomes pages.size() * page_size.
  void assign_prefix(std::span<const int32_t> pages);
  // Pages extend(num_new_tokens) would allocate.
  int num_pages_to_extend(int num_new_tokens) const;
  // Grows the table to num_tokens() + num_new_tokens tokens, allocating the pages that needs
  // (evicting cached pages when the free list is short). All or nothing: false, with the table
  // unchanged, when the pool cannot provide them.
  bool extend(int num_new_tokens);
  // Shrinks the table to its first num_tokens tokens (speculative decoding's rollback of rejected
  // draft positions): pages past ceil(num_tokens / page_size) are released. Never below the
  // prefix-cache pages it was given, never grows.
  void truncate(int num_tokens);
  // Releases every page (finish or abort), then PageAllocator::trim() applies the residency
  // limits; the table is empty and reusable afterwards.
  void free();

  // Rank-local page ids, as SequenceMetadata::page_table wants them.
  const std::vector<int32_t>& pages() const { return pages_; }
  int num_pages() const { return static_cast<int>(pages_.size()); }
  int num_tokens() const { return num_tokens_; }
  int num_prefix_tokens() const { return num_prefix_tokens_; }  // from the prefix cache
  const PageAllocator& allocator() const { return *allocator_; }

 private:
  PageAllocator* allocator_;
  std::vector<int32_t> pages_;
  int num_tokens_ = 0;
  int num_prefix_tokens_ = 0;
};

// Checks the allocator (PageAllocator::check_integrity) and that its reference counts are exactly
// the references of the live tables: every page a table holds is in use, and each page's count
// equals the number of tables holding it. Throws spindle::Error naming the first violation.
void check_integrity(const PageAllocator& allocator, std::span<const BlockTable* const> live_tables);

}  // namespace spindle::kv
