// Data-parallel serving flags (--dp-size is a KV flag: kv_config.h) and their defaults: the rank
// layout (CPU core shares, GPU per rank) and the router in front of the ranks. Defaults are
// decided here, in resolve_dp(), called from config::resolve() and nowhere else.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace CLI {
class App;
}

namespace spindle::config {

enum class LoadBalanceMethod { kRoundRobin, kShortestQueue, kPrefixCacheAware };
// "round_robin" | "shortest_queue" | "prefix_cache_aware"; throws naming the accepted values.
LoadBalanceMethod parse_load_balance_method(std::string_view text);
std::string_view load_balance_method_name(LoadBalanceMethod method);

inline constexpr std::string_view kDefaultLoadBalanceMethod = "round_robin";  // SGLang's default
// prefix_cache_aware: a request goes to the rank whose cache holds the longest prefix of its
// prompt when that prefix is at least this fraction of the prompt (SGLang's router uses a
// cache threshold the same way).
inline constexpr double kDefaultRouterCacheThreshold = 0.5;
// The ranks are out of balance (prefix_cache_aware falls back to shortest_queue) when the most
// loaded rank has more than this many tokens (waiting + running) above the least loaded one...
// (bench/results/2026-12-01-dp-serving*: at C=16 with 416-token prompts, 2048 sent 29-34 of 64
// requests away from their cached prefix as "imbalance"; 8192 kept 56 of 64 on their prefix with
// the ranks within 37/27, TTFT p50 160 ms against round robin's 267 ms.)
inline constexpr int64_t kDefaultRouterBalanceAbsThreshold = 8192;
// ...and more than this many times its load.
inline constexpr double kDefaultRouterBalanceRelThreshold = 1.5;

// The flags. 0 / "" mean "let resolve_dp() decide".
struct DpFlags {
  std::string load_balance_method;   // "": kDefaultLoadBalanceMethod
  double router_cache_threshold = -1;           // < 0: kDefaultRouterCacheThreshold
  int64_t router_balance_abs_threshold = -1;    // < 0: kDefaultRouterBalanceAbsThreshold
  double router_balance_rel_threshold = 0;      // 0: kDefaultRouterBalanceRelThreshold
  int64_t router_prefix_index_pages = 0;        // 0: the rank's KV pages (resolve_router_index_pages)
  int base_gpu_id = -1;                         // -1: the N of --device cuda:N
  int dp_ranks_per_gpu = 0;                     // 0: 1 when every rank has its own GPU, else shared
};

struct ResolvedDpConfig {
  int dp_size = 1;
  LoadBalanceMethod load_balance_method = LoadBalanceMethod::kRoundRobin;
  double router_cache_threshold = kDefaultRouterCacheThreshold;        // [0, 1]
  int64_t router_balance_abs_threshold = kDefaultRouterBalanceAbsThreshold;  // tokens, >= 0
  double router_balance_rel_threshold = kDefaultRouterBalanceRelThreshold;   // >= 1
  int64_t router_prefix_index_pages = 0;  // per rank; 0 until resolve_router_index_pages
  int base_gpu_id = 0;       // CUDA: rank r binds GPU base_gpu_id + r / ranks_per_gpu
  int ranks_per_gpu = 1;     // CUDA: ranks that share one GPU (and its memory, equally)
  int threads_per_rank = 1;  // CPU: kernel worker threads of each rank (its core share)
};

// Checks and fills the router and layout settings. dp_size >= 1 (already resolved);
// num_cpus: CPUs this process may use; num_threads_flag: --threads (0: auto); cuda: the device
// is a GPU, cuda_device its ordinal and num_gpus how many the machine has. Throws on a bad value:
// an unknown method, a threshold out of range, a rank whose GPU does not exist. The CPU share
// rules are check_cpu_rank_layout's (serve runs it; `plan` may plan for more ranks than here).
ResolvedDpConfig resolve_dp(const DpFlags& flags, int dp_size, int num_cpus, int num_threads_flag, bool cuda,
                            int cuda_device, int num_gpus);

// CPU ranks need disjoint core shares: throws when dp_size > num_cpus, or when --threads (per rank,
// num_threads_flag > 0) x dp_size > num_cpus. No-op for dp_size 1.
void check_cpu_rank_layout(int dp_size, int num_cpus, int num_threads_flag);

// The router's prefix index budget per rank: the flag, or (auto) the rank's KV pool pages, so the
// router remembers about as many pages as the rank can cache.
int64_t resolve_router_index_pages(const ResolvedDpConfig& dp, int64_t rank_kv_pages);

// --load-balance-method, --router-cache-threshold, --router-balance-abs-threshold,
// --router-balance-rel-threshold, --router-prefix-index-pages, --base-gpu-id, --dp-ranks-per-gpu.
void add_dp_flags(CLI::App& app, DpFlags& flags);

}  // namespace spindle::config
