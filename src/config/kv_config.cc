#include "config/kv_config.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>

#include "util/error.h"

namespace spindle::config {
namespace {

std::optional<int64_t> parse_max_total_tokens(const std::string& text) {
  if (text == "auto") return std::nullopt;
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  SPINDLE_CHECK(ec == std::errc() && end == text.data() + text.size() && value > 0,
                "--max-total-tokens must be auto or a positive number of tokens per DP rank, got '{}'", text);
  return value;
}

std::optional<int64_t> parse_prefix_cache_tokens(const std::string& text) {
  if (text == "auto") return std::nullopt;
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  SPINDLE_CHECK(ec == std::errc() && end == text.data() + text.size() && value >= 0,
                "--prefix-cache-tokens must be auto or a number of tokens >= 0 per DP rank, got '{}'", text);
  return value;
}

}  // namespace

ResolvedKvConfig resolve_kv(const KvFlags& flags, const ModelConfig& model) {
  ResolvedKvConfig r;
  r.max_total_tokens = parse_max_total_tokens(flags.max_total_tokens);
  SPINDLE_CHECK(flags.mem_fraction == 0 || (flags.mem_fraction > 0 && flags.mem_fraction <= 1),
                "--mem-fraction {} must be in (0, 1]", flags.mem_fraction);
  r.mem_fraction = flags.mem_fraction > 0 ? flags.mem_fraction : kDefaultMemFraction;
  SPINDLE_CHECK(flags.max_num_batched_tokens >= 0, "--max-num-batched-tokens {} must be positive",
                flags.max_num_batched_tokens);
  r.max_num_batched_tokens =
      flags.max_num_batched_tokens > 0 ? flags.max_num_batched_tokens : kDefaultMaxNumBatchedTokens;
  SPINDLE_CHECK(flags.max_mixed_prefill_tokens >= 0, "--max-mixed-prefill-tokens {} must be positive (or 0: no cap)",
                flags.max_mixed_prefill_tokens);
  SPINDLE_CHECK(flags.max_mixed_prefill_tokens <= r.max_num_batched_tokens,
                "--max-mixed-prefill-tokens {} exceeds --max-num-batched-tokens {}: it caps the prompt tokens "
                "of a step that also decodes, within that budget",
                flags.max_mixed_prefill_tokens, r.max_num_batched_tokens);
  r.max_mixed_prefill_tokens = flags.max_mixed_prefill_tokens;
  SPINDLE_CHECK(flags.max_model_len >= 0, "--max-model-len {} must be positive", flags.max_model_len);
  SPINDLE_CHECK(flags.max_model_len <= model.max_position_embeddings,
                "--max-model-len {} exceeds the model's max_position_embeddings {}", flags.max_model_len,
                model.max_position_embeddings);
  r.max_model_len = flags.max_model_len > 0 ? flags.max_model_len : model.max_position_embeddings;
  SPINDLE_CHECK(flags.dp_size >= 0, "--dp-size {} must be at least 1", flags.dp_size);
  r.dp_size = flags.dp_size > 0 ? flags.dp_size : 1;
  r.enable_prefix_cache = !flags.disable_prefix_cache;
  r.prefix_cache_tokens = parse_prefix_cache_tokens(flags.prefix_cache_tokens);
  SPINDLE_CHECK(!r.prefix_cache_tokens || r.enable_prefix_cache,
                "--prefix-cache-tokens {} was given with --disable-prefix-cache; drop one of them",
                flags.prefix_cache_tokens);
  return r;
}

void add_kv_flags(CLI::App& app, KvFlags& f) {
  app.add_option("--max-total-tokens", f.max_total_tokens,
                 "KV cache capacity in tokens per DP rank, or auto (sized from free memory)");
  app.add_option("--mem-fraction", f.mem_fraction,
                 "Fraction of the budget left after weights, workspace and reserve given to the KV cache (0.90)");
  app.add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                 "Largest number of tokens in one forward; sizes the workspace (2048)");
  app.add_option("--max-mixed-prefill-tokens", f.max_mixed_prefill_tokens,
                 "Prompt tokens a step computes at most while some running request decodes, so prompts "
                 "are spread over the decode steps (0: no cap beyond --max-num-batched-tokens)");
  app.add_option("--max-model-len", f.max_model_len, "Longest sequence served (the model's max_position_embeddings)");
  app.add_option("--dp-size", f.dp_size, "Data-parallel ranks, each with its own KV pool (1)");
  app.add_flag("--disable-prefix-cache", f.disable_prefix_cache, "Do not share KV pages between common prefixes");
  app.add_option("--prefix-cache-tokens", f.prefix_cache_tokens,
                 "Tokens of finished requests' KV the prefix cache keeps per DP rank, or auto (CPU: a quarter of "
                 "--max-running-requests x --max-model-len; GPU: every page not in use); the least recently used "
                 "beyond it are evicted and, on the CPU, their memory goes back to the OS");
}

}  // namespace spindle::config
