// The KV cache flags and their defaults. Defaults are decided here, in resolve_kv(), called from
// config::resolve() and nowhere else. The glue from a model and this machine to the capacity
// planner is startup/kv_planning.h.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "kv/capacity_planner.h"
#include "kv/kv_layout.h"
#include "model/model_config.h"
#include "platform/memory_info.h"

namespace CLI {
class App;
}

namespace spindle::config {

inline constexpr double kDefaultMemFraction = 0.90;
inline constexpr int kDefaultMaxNumBatchedTokens = 2048;

// The flags. "auto" and 0 mean "let resolve_kv() decide".
struct KvFlags {
  std::string max_total_tokens = "auto";  // "auto" or a positive integer: tokens per DP rank
  double mem_fraction = 0;                // 0: kDefaultMemFraction
  int max_num_batched_tokens = 0;         // 0: kDefaultMaxNumBatchedTokens
  int max_mixed_prefill_tokens = 0;       // 0: no cap beyond max_num_batched_tokens
  int max_model_len = 0;                  // 0: the model's max_position_embeddings
  int dp_size = 0;                        // 0: 1
  bool disable_prefix_cache = false;
  std::string prefix_cache_tokens = "auto";  // "auto" or a number of tokens >= 0, per DP rank
};

struct ResolvedKvConfig {
  std::optional<int64_t> max_total_tokens;  // per DP rank; nullopt: auto
  double mem_fraction = kDefaultMemFraction;
  int max_num_batched_tokens = kDefaultMaxNumBatchedTokens;
  // Prompt tokens in a step that also decodes (engine/scheduler.h); 0: no cap of its own. Off by
  // default: on the H200 (8B shape, C=32/128) a cap of 256/512 cut output tok/s by 3-28% while it cut
  // C=32 TTFT p50 4x (bench/results/2026-12-05-h200-mixed-prefill-ab); on a 2-core CPU by 8.5%.
  int max_mixed_prefill_tokens = 0;
  int max_model_len = 0;
  int dp_size = 1;
  bool enable_prefix_cache = true;
  std::optional<int64_t> prefix_cache_tokens;  // per DP rank; nullopt: auto (kv/capacity_planner.h)
};

// Throws spindle::Error on a bad value: max_total_tokens neither auto nor a positive integer,
// mem_fraction outside (0, 1], a negative count, max_mixed_prefill_tokens above
// max_num_batched_tokens, max_model_len above max_position_embeddings,
// prefix_cache_tokens neither auto nor a number >= 0, or given with disable_prefix_cache.
ResolvedKvConfig resolve_kv(const KvFlags& flags, const ModelConfig& model);

// Registers --max-total-tokens, --mem-fraction, --max-num-batched-tokens,
// --max-mixed-prefill-tokens, --max-model-len,
// --dp-size, --disable-prefix-cache and --prefix-cache-tokens.
void add_kv_flags(CLI::App& app, KvFlags& flags);

}  // namespace spindle::config
