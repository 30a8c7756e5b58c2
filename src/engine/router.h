// The data-parallel router: which rank gets a request. Pure policy over plain numbers (each rank's
// availability and load, the prompt's tokens) and its own approximate view of each rank's prefix
// cache, so it is unit-tested without engines (tests/engine/router_test.cc). engine/dp_group.h
// calls it under one lock; it is not thread-safe itself.
//
// Methods (--load-balance-method, config/dp_config.h):
//   round_robin         the next available rank in turn.
//   shortest_queue      the available rank with the fewest load tokens (waiting + running: prompt
//                       and output so far); ties go to the rank whose prefix index is smallest,
//                       then in turn.
//   prefix_cache_aware  when the ranks are out of balance (max load - min load > abs threshold
//                       and max load > rel threshold * min load): shortest_queue ("imbalance").
//                       Otherwise the rank whose index holds the longest prefix of the prompt, if
//                       that prefix is at least cache threshold of the prompt ("prefix_match";
//                       ties: the lower load, then the lower rank); else shortest_queue
//                       ("prefix_miss").
//
// The prefix index: per rank, the chained 64-bit hashes of the full pages (page_size tokens) of the
// prompts sent there, kept in LRU order and capped at index_pages_per_rank entries per rank
// (about 80 bytes each). It is approximate: the rank's own cache may have evicted a page the
// index still holds (or two prefixes may collide in 64 bits); a wrong guess costs a recompute,
// never a wrong answer.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/dp_config.h"
#include "util/token_id.h"

namespace spindle::engine {

struct RouterOptions {
  config::LoadBalanceMethod method = config::LoadBalanceMethod::kRoundRobin;
  double cache_threshold = 0.5;        // [0, 1]
  int64_t balance_abs_threshold = 0;   // tokens
  double balance_rel_threshold = 1.0;  // >= 1
  int64_t index_pages_per_rank = 1;    // >= 1
  int page_size = 16;                  // the KV page size: the unit the ranks cache
};

// Why a rank was chosen; the label of spindle_router_decisions_total.
enum class RouteReason { kRoundRobin, kShortestQueue, kPrefixMatch, kPrefixMiss, kImbalance };
inline constexpr int kNumRouteReasons = 5;
std::string_view route_reason_name(RouteReason reason);  // "round_robin", ..., "imbalance"

struct RankLoad {
  bool available = true;    // in rotation (not failed)
  int64_t load_tokens = 0;  // waiting + running tokens (Engine::num_load_tokens)
};

struct RouteDecision {
  int rank = -1;
  RouteReason reason = RouteReason::kRoundRobin;
  int64_t matched_tokens = 0;  // prefix_cache_aware: the prompt tokens the chosen rank's index holds
};

class Router {
 public:
  // Throws spindle::Error on dp_size < 1, a page size < 1 or an index budget < 1.
  Router(int dp_size, RouterOptions options);

  // ranks: one entry per rank. Throws spindle::Error when no rank is available. Does not record
  // the prompt (record() does, once the rank accepted it).
  RouteDecision route(std::span<const TokenId> prompt, std::span<const RankLoad> ranks);
  // The prompt was sent to `rank`: its pages enter (or refresh) that rank's index.
  void record(int rank, std::span<const TokenId> prompt);
  // The rank left rotation: its index is emptied.
  void forget(int rank);

  int dp_size() const { return static_cast<int>(index_.size()); }
  const RouterOptions& options() const { return options_; }
  // Entries (pages) in a rank's index, <= index_pages_per_rank.
  int64_t index_pages(int rank) const;
  // The longest prefix of `prompt` that `rank`'s index holds, in tokens (whole pages).
  int64_t matched_tokens(int rank, std::span<const TokenId> prompt) const;
  // Decisions so far by reason.
  uint64_t num_decisions(RouteReason reason) const { return decisions_[static_cast<int>(reason)]; }

 private:
  // The chained hash of each full page: hashes[i] covers tokens [0, (i + 1) * page_size).
  std::vector<uint64_t> page_hashes(std::span<const TokenId> prompt) const;
  int64_t matched_pages(int rank, const std::vector<uint64_t>& hashes) const;
  int shortest_queue(std::span<const RankLoad> ranks);
  int next_round_robin(std::span<const RankLoad> ranks);

  struct RankIndex {
    std::list<uint64_t> lru;  // most recent first
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> entries;
  };
  RouterOptions options_;
  std::vector<RankIndex> index_;  // [dp_size]
  int next_ = 0;                  // round robin (and shortest-queue ties) start here
  uint64_t decisions_[kNumRouteReasons] = {};
};

}  // namespace spindle::engine
