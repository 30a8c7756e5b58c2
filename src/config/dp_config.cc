#include "config/dp_config.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>

#include "util/error.h"

namespace spindle::config {

LoadBalanceMethod parse_load_balance_method(std::string_view text) {
  if (text == "round_robin") return LoadBalanceMethod::kRoundRobin;
  if (text == "shortest_queue") return LoadBalanceMethod::kShortestQueue;
  if (text == "prefix_cache_aware") return LoadBalanceMethod::kPrefixCacheAware;
  SPINDLE_FAIL("--load-balance-method '{}' is not one of: round_robin, shortest_queue, prefix_cache_aware", text);
}

std::string_view load_balance_method_name(LoadBalanceMethod method) {
  switch (method) {
    case LoadBalanceMethod::kRoundRobin: return "round_robin";
    case LoadBalanceMethod::kShortestQueue: return "shortest_queue";
    case LoadBalanceMethod::kPrefixCacheAware: return "prefix_cache_aware";
  }
  return "unknown";
}

ResolvedDpConfig resolve_dp(const DpFlags& flags, int dp_size, int num_cpus, int num_threads_flag, bool cuda,
                            int cuda_device, int num_gpus) {
  SPINDLE_CHECK(dp_size >= 1, "--dp-size {} must be at least 1", dp_size);
  ResolvedDpConfig r;
  r.dp_size = dp_size;
  r.load_balance_method = parse_load_balance_method(
      flags.load_balance_method.empty() ? kDefaultLoadBalanceMethod : std::string_view(flags.load_balance_method));
  r.router_cache_threshold = flags.router_cache_threshold < 0 ? kDefaultRouterCacheThreshold : flags.router_cache_threshold;
  SPINDLE_CHECK(r.router_cache_threshold <= 1.0, "--router-cache-threshold {} must be between 0 and 1 (a fraction of the prompt)",
                flags.router_cache_threshold);
  r.router_balance_abs_threshold =
      flags.router_balance_abs_threshold < 0 ? kDefaultRouterBalanceAbsThreshold : flags.router_balance_abs_threshold;
  r.router_balance_rel_threshold =
      flags.router_balance_rel_threshold == 0 ? kDefaultRouterBalanceRelThreshold : flags.router_balance_rel_threshold;
  SPINDLE_CHECK(r.router_balance_rel_threshold >= 1.0,
                "--router-balance-rel-threshold {} must be at least 1 (the most loaded rank over the least loaded)",
                flags.router_balance_rel_threshold);
  SPINDLE_CHECK(flags.router_prefix_index_pages >= 0, "--router-prefix-index-pages {} must not be negative (0: auto)",
                flags.router_prefix_index_pages);
  r.router_prefix_index_pages = flags.router_prefix_index_pages;
  SPINDLE_CHECK(num_threads_flag >= 0, "--threads {} must be positive", num_threads_flag);
  SPINDLE_CHECK(flags.dp_ranks_per_gpu >= 0, "--dp-ranks-per-gpu {} must not be negative (0: auto)", flags.dp_ranks_per_gpu);
  SPINDLE_CHECK(flags.base_gpu_id >= -1, "--base-gpu-id {} must not be negative", flags.base_gpu_id);

  if (cuda) {
    r.base_gpu_id = flags.base_gpu_id >= 0 ? flags.base_gpu_id : std::max(0, cuda_device);
    SPINDLE_CHECK(r.base_gpu_id < num_gpus, "--base-gpu-id {}: this machine has CUDA devices 0 to {}", r.base_gpu_id,
                  num_gpus - 1);
    const int gpus_left = num_gpus - r.base_gpu_id;
    // auto: a GPU per rank when there are enough, else the ranks spread over what there is.
    r.ranks_per_gpu = flags.dp_ranks_per_gpu > 0 ? flags.dp_ranks_per_gpu : (dp_size + gpus_left - 1) / gpus_left;
    const int last_gpu = r.base_gpu_id + (dp_size - 1) / r.ranks_per_gpu;
    SPINDLE_CHECK(last_gpu < num_gpus,
                  "--dp-size {} with {} rank(s) per GPU from GPU {} needs GPU {}, but this machine has CUDA devices 0 to "
                  "{} (raise --dp-ranks-per-gpu or lower --dp-size)",
                  dp_size, r.ranks_per_gpu, r.base_gpu_id, last_gpu, num_gpus - 1);
    r.threads_per_rank = num_threads_flag > 0 ? num_threads_flag : std::max(1, num_cpus / dp_size);
  } else {
    SPINDLE_CHECK(flags.base_gpu_id < 0 && flags.dp_ranks_per_gpu == 0,
                  "--base-gpu-id and --dp-ranks-per-gpu are for --device cuda; CPU ranks take disjoint core shares");
    r.threads_per_rank = num_threads_flag > 0 ? num_threads_flag : std::max(1, num_cpus / dp_size);
  }
  return r;
}

void check_cpu_rank_layout(int dp_size, int num_cpus, int num_threads_flag) {
  if (dp_size <= 1) return;
  SPINDLE_CHECK(dp_size <= num_cpus,
                "--dp-size {}: every CPU rank needs a core of its own, and this process may use {} CPU(s)", dp_size,
                num_cpus);
  SPINDLE_CHECK(num_threads_flag == 0 || int64_t{num_threads_flag} * dp_size <= num_cpus,
                "--threads {} with --dp-size {} needs {} CPUs for disjoint core shares; this process may use {} "
                "(--threads is per rank with --dp-size)",
                num_threads_flag, dp_size, int64_t{num_threads_flag} * dp_size, num_cpus);
}

int64_t resolve_router_index_pages(const ResolvedDpConfig& dp, int64_t rank_kv_pages) {
  return dp.router_prefix_index_pages > 0 ? dp.router_prefix_index_pages : std::max<int64_t>(1, rank_kv_pages);
}

void add_dp_flags(CLI::App& app, DpFlags& f) {
  app.add_option("--load-balance-method", f.load_balance_method,
                 fmt::format("How requests are spread over DP ranks: round_robin, shortest_queue (fewest waiting + "
                             "running tokens) or prefix_cache_aware ({})",
                             kDefaultLoadBalanceMethod))
      ->check(CLI::IsMember({"round_robin", "shortest_queue", "prefix_cache_aware"}));
  app.add_option("--router-cache-threshold", f.router_cache_threshold,
                 fmt::format("prefix_cache_aware: the cached fraction of a prompt above which it goes to the rank "
                             "holding that prefix ({})",
                             kDefaultRouterCacheThreshold));
  app.add_option("--router-balance-abs-threshold", f.router_balance_abs_threshold,
                 fmt::format("prefix_cache_aware: ranks are out of balance (shortest queue wins) when the most loaded "
                             "has this many tokens more than the least loaded ({}) ...",
                             kDefaultRouterBalanceAbsThreshold));
  app.add_option("--router-balance-rel-threshold", f.router_balance_rel_threshold,
                 fmt::format("... and this many times its load ({})", kDefaultRouterBalanceRelThreshold));
  app.add_option("--router-prefix-index-pages", f.router_prefix_index_pages,
                 "prefix_cache_aware: prompt pages the router remembers per rank (LRU; default: the rank's KV pages)");
  app.add_option("--base-gpu-id", f.base_gpu_id, "CUDA: the GPU of DP rank 0 (the N of --device cuda:N)");
  app.add_option("--dp-ranks-per-gpu", f.dp_ranks_per_gpu,
                 "CUDA: DP ranks sharing one GPU, each with an equal share of its memory (1 when there are enough "
                 "GPUs, else the ranks share)");
}

}  // namespace spindle::config
