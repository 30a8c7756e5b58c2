// PrefixCache: a radix tree over full pages keyed by token ids, so requests that share a prompt
// prefix share its KV pages.
//
// Each edge is exactly one full page of tokens (page_size ids) and each node owns the one page
// holding that chunk's K and V, given the path above it. (No path compression: a node is one
// page, so sharing, reference counts and eviction are all per page.) Partial pages are never
// cached. Pages in the tree are marked cached in the allocator; requests that reuse them hold
// ordinary references through their BlockTable.
//
// Eviction: when the allocator's free list runs short it asks this cache (PageEvictor) to free
// pages; the least recently used leaves whose pages no request references go first, and a parent
// becomes a candidate once its last child is gone.
//
// Disabled (--disable-prefix-cache): match() finds nothing and insert() caches nothing; lookups
// are still counted (as misses).
// Single-threaded, like the allocator it serves. The allocator must outlive the cache.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "kv/block_table.h"
#include "kv/page_allocator.h"
#include "util/token_id.h"

namespace spindle::kv {

struct PrefixCacheStats {
  uint64_t num_lookups = 0;        // match() calls
  uint64_t num_hits = 0;           // lookups that matched at least one page
  uint64_t num_lookup_tokens = 0;  // tokens offered to match()
  uint64_t num_hit_tokens = 0;     // tokens matched (whole pages)
  uint64_t num_inserted_pages = 0;
  uint64_t num_evicted_pages = 0;

  uint64_t num_misses() const { return num_lookups - num_hits; }
};

class PrefixCache final : public PageEvictor {
 public:
  // Registers itself as the allocator's evictor.
  explicit PrefixCache(PageAllocator& allocator, bool enabled = true);
  // Unregisters and gives every page back (unreferenced ones become free).
  ~PrefixCache() override;
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  bool enabled() const { return enabled_; }
  // The longest cached prefix of tokens, in whole pages: page i holds tokens
  // [i * page_size, (i + 1) * page_size). Marks the matched path most recently used. The pages
  // are not yet referenced: pass them to BlockTable::assign_prefix before allocating anything.
  // The engine offers all but the last prompt token, so at least one token is computed.
  std::vector<int32_t> match(std::span<const TokenId> tokens);
  // How many pages match(tokens) would return, without counting a lookup or touching the LRU
  // order (the scheduler asks it before deciding whether to admit).
  int num_cached_pages(std::span<const TokenId> tokens) const;

  // Caches the full pages of tokens (whose K and V the table's pages hold: tokens.size() <=
  // table.num_tokens()). A chunk already cached under the same path keeps its page, and the
  // table's duplicate stays private (freed with the table). Returns the pages newly cached.
  // The table may still be live and growing (a running request publishing its prompt): the
  // pages it caches are full and computed, so they never change again; they stay referenced by
  // the table (so not evictable) until it frees them.
  int insert(std::span<const TokenId> tokens, const BlockTable& table);

  // PageEvictor: frees up to num_pages unreferenced leaf pages, least recently used first.
  int evict_pages(int num_pages) override;

  int num_nodes() const { return num_nodes_; }  // cached pages, referenced or not
  const PrefixCacheStats& stats() const { return stats_; }
  const PageAllocator& allocator() const { return *allocator_; }

  // Tree invariants, then the allocator's: every node's page is cached in the allocator, no page
  // in two nodes, every cached page in a node, each key page_size long, parents linked.
  void check_integrity() const;

 private:
  struct ChunkLess {
    using is_transparent = void;
    bool operator()(std::span<const TokenId> a, std::span<const TokenId> b) const;
  };
  struct Node {
    std::vector<TokenId> key;  // [page_size] token ids of this page
    int32_t page = -1;
    Node* parent = nullptr;
    uint64_t last_access = 0;
    std::map<std::vector<TokenId>, std::unique_ptr<Node>, ChunkLess> children;
  };

  bool evictable(const Node& node) const;
  void release_subtree(Node& node);

  PageAllocator* allocator_;
  bool enabled_;
  Node root_;  // no page
  int num_nodes_ = 0;
  uint64_t clock_ = 0;
  PrefixCacheStats stats_;
};

// check_integrity(allocator, live_tables) plus the cache's own check_integrity().
void check_integrity(const PrefixCache& cache, std::span<const BlockTable* const> live_tables);

}  // namespace spindle::kv
