#include "kv/capacity_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kernels/kv_geometry.h"
#include "util/error.h"

namespace spindle::kv {
namespace {

// "3221225472 bytes (3.00 GiB)"
std::string bytes_text(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{} bytes ({:.2f} {})", bytes, value, units[unit]);
}

// floor(bytes * fraction_ppm / (1e6 * divisor)), exact.
uint64_t scale(uint64_t bytes, uint64_t fraction_ppm, uint64_t divisor) {
  const unsigned __int128 product = static_cast<unsigned __int128>(bytes) * fraction_ppm;
  return static_cast<uint64_t>(product / (static_cast<unsigned __int128>(1'000'000) * divisor));
}

std::string breakdown(const KvPlan& p) {
  return fmt::format("usable {} ({}){} - workspace {} x {} rank(s) - reserve {}", bytes_text(p.usable_bytes),
                     p.usable_bound,
                     p.weights_subtracted ? fmt::format(" - weights {}", bytes_text(p.weight_bytes)) : "",
                     bytes_text(p.workspace_bytes), p.dp_size, bytes_text(p.reserve_bytes));
}

void check_input(const KvPlanInput& in) {
  SPINDLE_CHECK(in.kv_bytes_per_token > 0, "KV bytes per token must be positive");
  SPINDLE_CHECK(in.page_size > 0, "--page-size {} must be positive", in.page_size);
  SPINDLE_CHECK(in.mem_fraction > 0.0 && in.mem_fraction <= 1.0, "--mem-fraction {} must be in (0, 1]",
                in.mem_fraction);
  SPINDLE_CHECK(in.dp_size >= 1, "--dp-size {} must be at least 1", in.dp_size);
  SPINDLE_CHECK(in.max_model_len > 0, "--max-model-len {} must be positive", in.max_model_len);
  SPINDLE_CHECK(in.max_num_batched_tokens > 0, "--max-num-batched-tokens {} must be positive",
                in.max_num_batched_tokens);
  SPINDLE_CHECK(!in.max_total_tokens || *in.max_total_tokens > 0, "--max-total-tokens {} must be positive",
                in.max_total_tokens.value_or(0));
  SPINDLE_CHECK(in.max_running_requests >= 0, "--max-running-requests {} must be positive",
                in.max_running_requests);
  SPINDLE_CHECK(!in.prefix_cache_tokens || *in.prefix_cache_tokens >= 0, "--prefix-cache-tokens {} must be >= 0",
                in.prefix_cache_tokens.value_or(0));
  SPINDLE_CHECK(!in.prefix_cache_tokens || in.prefix_cache_enabled,
                "--prefix-cache-tokens {} was given with --disable-prefix-cache; drop one of them",
                in.prefix_cache_tokens.value_or(0));
}

constexpr int64_t kNoLimit = -1;  // kv::kNoPageLimit (page_allocator.h)

}  // namespace

const char* capacity_bound_name(CapacityBound bound) {
  switch (bound) {
    case CapacityBound::kMemory: return "memory";
    case CapacityBound::kScheduler: return "scheduler";
    case CapacityBound::kPageIds: return "page ids";
    case CapacityBound::kExplicit: return "explicit";
  }
  return "?";
}

// max(128 MiB, 2% of usable); the measured overhead that justifies it is in capacity_planner.h.
uint64_t reserve_bytes_for(uint64_t usable_bytes) {
  return std::max(kMinReserveBytes, usable_bytes / kReserveDivisor);
}

KvPlan plan_kv_capacity(const KvPlanInput& in) {
  check_input(in);
  KvPlan p;
  p.usable_bytes = in.usable_bytes;
  p.usable_bound = in.usable_bound;
  p.weight_bytes = in.weight_bytes;
  p.weights_subtracted = !in.usable_after_weights;
  p.workspace_bytes = in.workspace_bytes;
  p.workspace_source = in.workspace_source;
  p.max_num_batched_tokens = in.max_num_batched_tokens;
  p.reserve_bytes = reserve_bytes_for(in.usable_bytes);
  p.mem_fraction = in.mem_fraction;
  p.dp_size = in.dp_size;
  p.kv_bytes_per_token = in.kv_bytes_per_token;
  p.page_size = in.page_size;
  p.bytes_per_page = in.kv_bytes_per_token * uint64_t(in.page_size);
  p.draft_kv_bytes_per_token = in.draft_kv_bytes_per_token;
  p.draft_bytes_per_page = in.draft_kv_bytes_per_token * uint64_t(in.page_size);
  const uint64_t pair_bytes_per_page = p.bytes_per_page + p.draft_bytes_per_page;  // target + draft pools
  p.max_model_len = in.max_model_len;
  p.pages_per_sequence = (int64_t{in.max_model_len} + in.page_size - 1) / in.page_size;

  // budget = usable - weights - dp * workspace - reserve, computed without wrapping.
  const unsigned __int128 spent = static_cast<unsigned __int128>(p.weights_subtracted ? in.weight_bytes : 0) +
                                  static_cast<unsigned __int128>(in.workspace_bytes) * uint64_t(in.dp_size) +
                                  p.reserve_bytes;
  if (spent >= in.usable_bytes) {
    SPINDLE_FAIL("no memory is left for the KV cache: {} is short by {}; free memory, lower "
                 "--max-num-batched-tokens or --dp-size",
                 breakdown(p), bytes_text(static_cast<uint64_t>(spent - in.usable_bytes)));
  }
  p.budget_bytes = in.usable_bytes - static_cast<uint64_t>(spent);

  const uint64_t fraction_ppm = static_cast<uint64_t>(std::llround(in.mem_fraction * 1e6));
  p.kv_budget_bytes_per_rank = scale(p.budget_bytes, fraction_ppm, uint64_t(in.dp_size));
  int64_t auto_pages = static_cast<int64_t>(p.kv_budget_bytes_per_rank / pair_bytes_per_page);
  if (auto_pages > kMaxPoolPages / in.dp_size) {
    auto_pages = kMaxPoolPages / in.dp_size;
    p.capped_by_page_ids = true;
  }
  p.bound = p.capped_by_page_ids ? CapacityBound::kPageIds : CapacityBound::kMemory;
  const int64_t memory_pages = auto_pages;
  p.memory_max_total_tokens = memory_pages * in.page_size;

  // The prefix cache's budget in pages, and what the scheduler can use (CPU).
  p.max_running_requests = in.max_running_requests;
  int64_t prefix_pages = kNoLimit;
  if (!in.prefix_cache_enabled) {
    prefix_pages = 0;
    p.prefix_cache_source = "disabled";
  } else if (in.prefix_cache_tokens) {
    prefix_pages = *in.prefix_cache_tokens / in.page_size;
    p.prefix_cache_source = "explicit";
  } else {
    p.prefix_cache_source = "auto";
  }
  if (in.max_running_requests > 0) {
    const int64_t running_pages = std::min<int64_t>(int64_t{in.max_running_requests} * p.pages_per_sequence,
                                                     kMaxPoolPages);
    if (prefix_pages == kNoLimit) prefix_pages = running_pages / 4;
    const int64_t scheduler_pages = std::min<int64_t>(running_pages + prefix_pages, kMaxPoolPages / in.dp_size);
    p.running_tokens = running_pages * in.page_size;
    p.scheduler_tokens = scheduler_pages * in.page_size;
    if (scheduler_pages < auto_pages) {
      auto_pages = scheduler_pages;
      p.bound = CapacityBound::kScheduler;
    }
  }
  p.auto_max_total_tokens = auto_pages * in.page_size;

  int64_t pages = auto_pages;
  if (in.max_total_tokens) {
    p.explicit_max_total_tokens = true;
    p.bound = CapacityBound::kExplicit;
    pages = *in.max_total_tokens / in.page_size;
    const uint64_t needed = static_cast<uint64_t>(pages) * pair_bytes_per_page;
    if (pages > memory_pages) {
      SPINDLE_FAIL("--max-total-tokens {} does not fit: {} pages of {} tokens need {} of KV per rank, but ({}) x "
                   "--mem-fraction {} / {} rank(s) leaves {} per rank, room for {} tokens; lower "
                   "--max-total-tokens or use auto",
                   *in.max_total_tokens, pages, in.page_size, bytes_text(needed), breakdown(p), in.mem_fraction,
                   in.dp_size, bytes_text(p.kv_budget_bytes_per_rank), p.memory_max_total_tokens);
    }
  }
  if (pages < p.pages_per_sequence) {
    const uint64_t needed = static_cast<uint64_t>(p.pages_per_sequence) * pair_bytes_per_page;
    const uint64_t have = static_cast<uint64_t>(pages) * pair_bytes_per_page;
    SPINDLE_FAIL("the KV cache cannot hold one sequence of --max-model-len {}: that needs {} pages of {} tokens, "
                 "{} per rank, but {} {} per rank ({} pages), short by {} per rank. Budget: ({}) x --mem-fraction {} "
                 "/ {} rank(s). Lower --max-model-len, {}raise --mem-fraction or free memory",
                 in.max_model_len, p.pages_per_sequence, in.page_size, bytes_text(needed),
                 in.max_total_tokens ? "--max-total-tokens gives" : "the budget leaves", bytes_text(have), pages,
                 bytes_text(needed - have), breakdown(p), in.mem_fraction, in.dp_size,
                 in.max_total_tokens ? "raise --max-total-tokens, " : "");
  }

  p.num_pages_per_rank = static_cast<int>(pages);
  p.max_total_tokens = pages * in.page_size;
  p.kv_bytes_per_rank = static_cast<uint64_t>(pages) * p.bytes_per_page;
  p.draft_kv_bytes_per_rank = static_cast<uint64_t>(pages) * p.draft_bytes_per_page;
  p.num_sequences_per_rank = pages / p.pages_per_sequence;
  p.prefix_cache_pages = prefix_pages == kNoLimit ? kNoLimit : std::min(prefix_pages, pages);
  p.resident_bound_bytes = (p.weights_subtracted ? in.weight_bytes : 0) + in.workspace_bytes * uint64_t(in.dp_size) +
                           p.reserve_bytes + (p.kv_bytes_per_rank + p.draft_kv_bytes_per_rank) * uint64_t(in.dp_size);
  for (int r = 0; r < in.dp_size; ++r) {  // the pool's page ranges (PagePool, the attention backends)
    const PageRange range = rank_page_range(p.num_pages_per_rank * in.dp_size, in.dp_size, r);
    p.ranks.push_back({r, range.first, range.count, p.max_total_tokens, p.kv_bytes_per_rank});
  }
  return p;
}

}  // namespace spindle::kv
