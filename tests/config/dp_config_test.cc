// resolve_dp (config/dp_config.h): the defaults, the thresholds' ranges, the CPU share rules and the
// GPU layout, each bad value an error that names the flag.
#include "config/dp_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "util/error.h"

namespace spindle::config {
namespace {

using ::testing::HasSubstr;

std::string error_of(const DpFlags& f, int dp, int cpus, int threads, bool cuda = false, int dev = -1, int gpus = 0) {
  try {
    resolve_dp(f, dp, cpus, threads, cuda, dev, gpus);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DpConfigTest, Defaults) {
  const ResolvedDpConfig r = resolve_dp({}, 2, 8, 0, false, -1, 0);
  EXPECT_EQ(r.load_balance_method, LoadBalanceMethod::kRoundRobin);
  EXPECT_EQ(r.router_cache_threshold, kDefaultRouterCacheThreshold);
  EXPECT_EQ(r.router_balance_abs_threshold, kDefaultRouterBalanceAbsThreshold);
  EXPECT_EQ(r.router_balance_rel_threshold, kDefaultRouterBalanceRelThreshold);
  EXPECT_EQ(r.threads_per_rank, 4);
  EXPECT_EQ(resolve_router_index_pages(r, 777), 777);
  DpFlags f;
  f.router_prefix_index_pages = 12;
  EXPECT_EQ(resolve_router_index_pages(resolve_dp(f, 2, 8, 0, false, -1, 0), 777), 12);
}

TEST(DpConfigTest, MethodsAndThresholds) {
  EXPECT_EQ(parse_load_balance_method("prefix_cache_aware"), LoadBalanceMethod::kPrefixCacheAware);
  EXPECT_EQ(parse_load_balance_method("shortest_queue"), LoadBalanceMethod::kShortestQueue);
  EXPECT_EQ(load_balance_method_name(LoadBalanceMethod::kPrefixCacheAware), "prefix_cache_aware");
  DpFlags f;
  f.load_balance_method = "random";
  EXPECT_THAT(error_of(f, 2, 4, 0), HasSubstr("--load-balance-method 'random'"));
  f = {};
  f.router_cache_threshold = 1.5;
  EXPECT_THAT(error_of(f, 2, 4, 0), HasSubstr("--router-cache-threshold"));
  f = {};
  f.router_balance_rel_threshold = 0.5;
  EXPECT_THAT(error_of(f, 2, 4, 0), HasSubstr("--router-balance-rel-threshold"));
  f = {};
  f.router_prefix_index_pages = -3;
  EXPECT_THAT(error_of(f, 2, 4, 0), HasSubstr("--router-prefix-index-pages"));
  f = {};
  f.router_cache_threshold = 0;  // 0 is allowed: any match wins
  EXPECT_EQ(resolve_dp(f, 2, 4, 0, false, -1, 0).router_cache_threshold, 0);
}

TEST(DpConfigTest, CpuRanksNeedDisjointShares) {
  EXPECT_EQ(resolve_dp({}, 2, 2, 0, false, -1, 0).threads_per_rank, 1);
  EXPECT_EQ(resolve_dp({}, 2, 5, 0, false, -1, 0).threads_per_rank, 2);
  auto layout_error = [](int dp, int cpus, int threads) {
    try {
      check_cpu_rank_layout(dp, cpus, threads);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(layout_error(3, 2, 0), HasSubstr("--dp-size 3"));
  EXPECT_THAT(layout_error(2, 2, 2), HasSubstr("--threads 2 with --dp-size 2 needs 4 CPUs"));
  EXPECT_EQ(layout_error(2, 2, 1), "");
  EXPECT_EQ(layout_error(1, 1, 8), "") << "one rank: --threads may oversubscribe as before";
  EXPECT_EQ(error_of({}, 3, 2, 0), "") << "resolve_dp leaves the core count to serve (plan plans for any dp)";
  EXPECT_EQ(resolve_dp({}, 2, 4, 2, false, -1, 0).threads_per_rank, 2);
  DpFlags f;
  f.base_gpu_id = 1;
  EXPECT_THAT(error_of(f, 2, 4, 0), HasSubstr("for --device cuda"));
}

TEST(DpConfigTest, GpuLayout) {
  // Enough GPUs: one each, from the --device ordinal.
  ResolvedDpConfig r = resolve_dp({}, 2, 16, 0, true, 1, 4);
  EXPECT_EQ(r.base_gpu_id, 1);
  EXPECT_EQ(r.ranks_per_gpu, 1);
  // One GPU: both ranks share it.
  r = resolve_dp({}, 2, 16, 0, true, 0, 1);
  EXPECT_EQ(r.base_gpu_id, 0);
  EXPECT_EQ(r.ranks_per_gpu, 2);
  DpFlags f;
  f.dp_ranks_per_gpu = 1;
  EXPECT_THAT(error_of(f, 2, 16, 0, true, 0, 1), HasSubstr("needs GPU 1"));
  f = {};
  f.base_gpu_id = 3;
  EXPECT_THAT(error_of(f, 2, 16, 0, true, 0, 2), HasSubstr("--base-gpu-id 3"));
}

}  // namespace
}  // namespace spindle::config
