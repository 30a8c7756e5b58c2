// The DP router's policies over plain loads and prompts (engine/router.h): round robin skips
// failed ranks, shortest queue takes the fewest load tokens, prefix-aware sends a shared prefix
// to the rank that saw it, spreads unrelated prompts, falls back to the shortest queue when the
// ranks are out of balance (both thresholds), and its index stays within its page budget.
#include "engine/router.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "util/error.h"

namespace spindle::engine {
namespace {

using config::LoadBalanceMethod;

std::vector<TokenId> tokens(int n, int start) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

std::vector<TokenId> concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

RouterOptions options(LoadBalanceMethod method) {
  RouterOptions o;
  o.method = method;
  o.cache_threshold = 0.5;
  o.balance_abs_threshold = 100;
  o.balance_rel_threshold = 2.0;
  o.index_pages_per_rank = 1000;
  o.page_size = 4;
  return o;
}

TEST(RouterTest, RoundRobinCyclesAndSkipsUnavailableRanks) {
  Router router(3, options(LoadBalanceMethod::kRoundRobin));
  std::vector<RankLoad> loads(3);
  const auto prompt = tokens(8, 0);
  std::vector<int> got;
  for (int i = 0; i < 4; ++i) got.push_back(router.route(prompt, loads).rank);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 0}));
  loads[2].available = false;
  got.clear();
  for (int i = 0; i < 4; ++i) got.push_back(router.route(prompt, loads).rank);
  EXPECT_EQ(got, (std::vector<int>{1, 0, 1, 0}));
  EXPECT_EQ(router.num_decisions(RouteReason::kRoundRobin), 8u);
  loads[0].available = loads[1].available = false;
  EXPECT_THROW(router.route(prompt, loads), Error);
}

TEST(RouterTest, ShortestQueueTakesTheFewestTokensAndRotatesTies) {
  Router router(3, options(LoadBalanceMethod::kShortestQueue));
  std::vector<RankLoad> loads = {{true, 500}, {true, 20}, {true, 300}};
  const auto prompt = tokens(8, 0);
  EXPECT_EQ(router.route(prompt, loads).rank, 1);
  loads[1].available = false;
  EXPECT_EQ(router.route(prompt, loads).rank, 2);
  loads = {{true, 0}, {true, 0}, {true, 0}};
  std::vector<int> got;
  for (int i = 0; i < 3; ++i) got.push_back(router.route(prompt, loads).rank);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2})) << "equal loads must spread";
  EXPECT_EQ(router.num_decisions(RouteReason::kShortestQueue), 5u);
}

TEST(RouterTest, PrefixAwareSendsASharedPrefixToOneRankAndSpreadsUnrelatedPrompts) {
  Router router(2, options(LoadBalanceMethod::kPrefixCacheAware));
  std::vector<RankLoad> loads(2);
  const auto prefix = tokens(32, 1000);  // 8 pages
  int shared_rank = -1;
  for (int i = 0; i < 6; ++i) {
    const auto prompt = concat(prefix, tokens(4, 5000 + 10 * i));
    const RouteDecision d = router.route(prompt, loads);
    if (i == 0) {
      EXPECT_EQ(d.reason, RouteReason::kPrefixMiss);
      shared_rank = d.rank;
    } else {
      EXPECT_EQ(d.rank, shared_rank) << "request " << i;
      EXPECT_EQ(d.reason, RouteReason::kPrefixMatch);
      EXPECT_EQ(d.matched_tokens, 32);
    }
    router.record(d.rank, prompt);
  }
  // Unrelated prompts (no shared page) go by load, then by the smaller index: the other rank first.
  std::vector<int> counts(2, 0);
  for (int i = 0; i < 6; ++i) {
    const auto prompt = tokens(16, 100000 + 1000 * i);
    const RouteDecision d = router.route(prompt, loads);
    EXPECT_EQ(d.reason, RouteReason::kPrefixMiss);
    ++counts[static_cast<size_t>(d.rank)];
    router.record(d.rank, prompt);
  }
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_EQ(router.num_decisions(RouteReason::kPrefixMatch), 5u);
}

TEST(RouterTest, PrefixAwareBelowTheCacheThresholdGoesByLoad) {
  Router router(2, options(LoadBalanceMethod::kPrefixCacheAware));
  std::vector<RankLoad> loads = {{true, 0}, {true, 0}};
  const auto head = tokens(8, 0);  // 2 pages
  router.record(0, concat(head, tokens(4, 50)));
  // 8 of 40 tokens matched: 0.2 < 0.5.
  loads = {{true, 50}, {true, 10}};
  const RouteDecision low = router.route(concat(head, tokens(32, 900)), loads);
  EXPECT_EQ(low.reason, RouteReason::kPrefixMiss);
  EXPECT_EQ(low.rank, 1);
  // 8 of 12 tokens: 0.67 >= 0.5, to rank 0 although it holds more load (not out of balance).
  const RouteDecision high = router.route(concat(head, tokens(4, 900)), loads);
  EXPECT_EQ(high.reason, RouteReason::kPrefixMatch);
  EXPECT_EQ(high.rank, 0);
}

TEST(RouterTest, PrefixAwareFallsBackToShortestQueueOnlyWhenBothThresholdsAreCrossed) {
  Router router(2, options(LoadBalanceMethod::kPrefixCacheAware));  // abs 100, rel 2
  const auto prompt = tokens(16, 0);
  router.record(0, prompt);
  // 150 apart but only 1.6x: balanced, the cache wins.
  std::vector<RankLoad> loads = {{true, 400}, {true, 250}};
  EXPECT_EQ(router.route(prompt, loads).reason, RouteReason::kPrefixMatch);
  // 3x apart but only 60 tokens: balanced.
  loads = {{true, 90}, {true, 30}};
  EXPECT_EQ(router.route(prompt, loads).rank, 0);
  // 300 apart and 4x: out of balance.
  loads = {{true, 400}, {true, 100}};
  const RouteDecision d = router.route(prompt, loads);
  EXPECT_EQ(d.reason, RouteReason::kImbalance);
  EXPECT_EQ(d.rank, 1);
  // A failed rank's load does not count.
  loads = {{true, 400}, {false, 0}};
  EXPECT_EQ(router.route(prompt, loads).rank, 0);
}

TEST(RouterTest, TheIndexIsBoundedAndForgetEmptiesIt) {
  RouterOptions o = options(LoadBalanceMethod::kPrefixCacheAware);
  o.index_pages_per_rank = 10;
  Router router(2, o);
  for (int i = 0; i < 20; ++i) router.record(0, tokens(16, 1000 * i));  // 4 pages each
  EXPECT_EQ(router.index_pages(0), 10);
  // The most recent prompt is still there; the first was evicted.
  EXPECT_EQ(router.matched_tokens(0, tokens(16, 19000)), 16);
  EXPECT_EQ(router.matched_tokens(0, tokens(16, 0)), 0);
  // Re-recording a prompt refreshes rather than duplicates.
  router.record(0, tokens(16, 19000));
  EXPECT_EQ(router.index_pages(0), 10);
  router.forget(0);
  EXPECT_EQ(router.index_pages(0), 0);
  EXPECT_EQ(router.matched_tokens(0, tokens(16, 19000)), 0);
}

TEST(RouterTest, PartialPagesAndDifferentTokensDoNotMatch) {
  Router router(1, options(LoadBalanceMethod::kPrefixCacheAware));
  router.record(0, tokens(10, 0));  // 2 full pages, 2 tokens left over
  EXPECT_EQ(router.matched_tokens(0, tokens(10, 0)), 8);
  auto other = tokens(10, 0);
  other[5] = 9999;  // second page differs
  EXPECT_EQ(router.matched_tokens(0, other), 4);
  other[0] = 9999;  // the first page differs: nothing after it matches either
  EXPECT_EQ(router.matched_tokens(0, other), 0);
}

TEST(RouterTest, BadOptionsAreErrors) {
  RouterOptions o = options(LoadBalanceMethod::kRoundRobin);
  EXPECT_THROW(Router(0, o), Error);
  o.page_size = 0;
  EXPECT_THROW(Router(2, o), Error);
  o = options(LoadBalanceMethod::kRoundRobin);
  o.index_pages_per_rank = 0;
  EXPECT_THROW(Router(2, o), Error);
  Router ok(2, options(LoadBalanceMethod::kRoundRobin));
  std::vector<RankLoad> wrong(3);
  EXPECT_THROW(ok.route(tokens(4, 0), wrong), Error);
}

}  // namespace
}  // namespace spindle::engine
