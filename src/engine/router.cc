#include "engine/router.h"

#include <algorithm>
#include <limits>

#include "util/error.h"

namespace spindle::engine {

namespace {
uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

std::string_view route_reason_name(RouteReason reason) {
  switch (reason) {
    case RouteReason::kRoundRobin: return "round_robin";
    case RouteReason::kShortestQueue: return "shortest_queue";
    case RouteReason::kPrefixMatch: return "prefix_match";
    case RouteReason::kPrefixMiss: return "prefix_miss";
    case RouteReason::kImbalance: return "imbalance";
  }
  return "unknown";
}

Router::Router(int dp_size, RouterOptions options) : options_(options) {
  SPINDLE_CHECK(dp_size >= 1, "a router needs at least one rank, got {}", dp_size);
  SPINDLE_CHECK(options_.page_size >= 1, "router page size {} must be positive", options_.page_size);
  SPINDLE_CHECK(options_.index_pages_per_rank >= 1, "router prefix index of {} pages per rank must be positive",
                options_.index_pages_per_rank);
  index_.resize(static_cast<size_t>(dp_size));
}

std::vector<uint64_t> Router::page_hashes(std::span<const TokenId> prompt) const {
  const size_t page = static_cast<size_t>(options_.page_size);
  std::vector<uint64_t> out;
  out.reserve(prompt.size() / page);
  uint64_t h = 0x5350494e444c45ULL;  // any fixed seed
  for (size_t i = 0; i + page <= prompt.size(); i += page) {
    for (size_t j = i; j < i + page; ++j) h = mix(h ^ static_cast<uint32_t>(prompt[j]));
    out.push_back(h);
  }
  return out;
}

int64_t Router::matched_pages(int rank, const std::vector<uint64_t>& hashes) const {
  const RankIndex& idx = index_[static_cast<size_t>(rank)];
  int64_t n = 0;
  while (n < static_cast<int64_t>(hashes.size()) && idx.entries.count(hashes[static_cast<size_t>(n)])) ++n;
  return n;
}

int64_t Router::matched_tokens(int rank, std::span<const TokenId> prompt) const {
  SPINDLE_CHECK(rank >= 0 && rank < dp_size(), "rank {} is not in [0, {})", rank, dp_size());
  return matched_pages(rank, page_hashes(prompt)) * options_.page_size;
}

int64_t Router::index_pages(int rank) const {
  SPINDLE_CHECK(rank >= 0 && rank < dp_size(), "rank {} is not in [0, {})", rank, dp_size());
  return static_cast<int64_t>(index_[static_cast<size_t>(rank)].entries.size());
}

int Router::next_round_robin(std::span<const RankLoad> ranks) {
  const int n = dp_size();
  for (int k = 0; k < n; ++k) {
    const int r = (next_ + k) % n;
    if (ranks[static_cast<size_t>(r)].available) {
      next_ = (r + 1) % n;
      return r;
    }
  }
  return -1;
}

int Router::shortest_queue(std::span<const RankLoad> ranks) {
  const int n = dp_size();
  int best = -1;
  for (int k = 0; k < n; ++k) {  // scanned from next_, so full ties rotate
    const int r = (next_ + k) % n;
    const RankLoad& l = ranks[static_cast<size_t>(r)];
    if (!l.available) continue;
    if (best < 0) {
      best = r;
      continue;
    }
    const RankLoad& b = ranks[static_cast<size_t>(best)];
    if (l.load_tokens < b.load_tokens ||
        (l.load_tokens == b.load_tokens && index_pages(r) < index_pages(best))) {
      best = r;
    }
  }
  if (best >= 0) next_ = (best + 1) % n;
  return best;
}

RouteDecision Router::route(std::span<const TokenId> prompt, std::span<const RankLoad> ranks) {
  SPINDLE_CHECK(static_cast<int>(ranks.size()) == dp_size(), "router has {} ranks, given {} loads", dp_size(),
                ranks.size());
  SPINDLE_CHECK(std::any_of(ranks.begin(), ranks.end(), [](const RankLoad& l) { return l.available; }),
                "no data-parallel rank is available");
  RouteDecision d;
  switch (options_.method) {
    case config::LoadBalanceMethod::kRoundRobin:
      d.rank = next_round_robin(ranks);
      d.reason = RouteReason::kRoundRobin;
      break;
    case config::LoadBalanceMethod::kShortestQueue:
      d.rank = shortest_queue(ranks);
      d.reason = RouteReason::kShortestQueue;
      break;
    case config::LoadBalanceMethod::kPrefixCacheAware: {
      int64_t min_load = std::numeric_limits<int64_t>::max(), max_load = 0;
      for (const RankLoad& l : ranks) {
        if (!l.available) continue;
        min_load = std::min(min_load, l.load_tokens);
        max_load = std::max(max_load, l.load_tokens);
      }
      const bool imbalanced = max_load - min_load > options_.balance_abs_threshold &&
                              static_cast<double>(max_load) > options_.balance_rel_threshold * static_cast<double>(min_load);
      if (imbalanced) {
        d.rank = shortest_queue(ranks);
        d.reason = RouteReason::kImbalance;
        break;
      }
      const std::vector<uint64_t> hashes = page_hashes(prompt);
      int best = -1;
      int64_t best_pages = 0;
      for (int r = 0; r < dp_size(); ++r) {
        if (!ranks[static_cast<size_t>(r)].available) continue;
        const int64_t pages = matched_pages(r, hashes);
        if (pages > best_pages ||
            (pages == best_pages && best >= 0 && pages > 0 &&
             ranks[static_cast<size_t>(r)].load_tokens < ranks[static_cast<size_t>(best)].load_tokens)) {
          best = r;
          best_pages = pages;
        }
      }
      const int64_t matched = best_pages * options_.page_size;
      if (best >= 0 && matched > 0 && !prompt.empty() &&
          static_cast<double>(matched) >= options_.cache_threshold * static_cast<double>(prompt.size())) {
        d.rank = best;
        d.reason = RouteReason::kPrefixMatch;
        d.matched_tokens = matched;
      } else {
        d.rank = shortest_queue(ranks);
        d.reason = RouteReason::kPrefixMiss;
        d.matched_tokens = d.rank >= 0 ? matched_pages(d.rank, hashes) * options_.page_size : 0;
      }
      break;
    }
  }
  ++decisions_[static_cast<int>(d.reason)];
  return d;
}

void Router::record(int rank, std::span<const TokenId> prompt) {
  SPINDLE_CHECK(rank >= 0 && rank < dp_size(), "rank {} is not in [0, {})", rank, dp_size());
  if (options_.method != config::LoadBalanceMethod::kPrefixCacheAware) return;  // no one reads the index
  RankIndex& idx = index_[static_cast<size_t>(rank)];
  // Last page first, so the prompt's first page ends up most recent: eviction takes a chain's
  // tail before its head (a lost head would make the rest of the chain unreachable).
  const std::vector<uint64_t> hashes = page_hashes(prompt);
  for (auto hi = hashes.rbegin(); hi != hashes.rend(); ++hi) {
    const uint64_t h = *hi;
    if (auto it = idx.entries.find(h); it != idx.entries.end()) {
      idx.lru.splice(idx.lru.begin(), idx.lru, it->second);
      continue;
    }
    idx.lru.push_front(h);
    idx.entries.emplace(h, idx.lru.begin());
    if (static_cast<int64_t>(idx.entries.size()) > options_.index_pages_per_rank) {
      idx.entries.erase(idx.lru.back());
      idx.lru.pop_back();
    }
  }
}

void Router::forget(int rank) {
  SPINDLE_CHECK(rank >= 0 && rank < dp_size(), "rank {} is not in [0, {})", rank, dp_size());
  index_[static_cast<size_t>(rank)] = RankIndex{};
}

}  // namespace spindle::engine
