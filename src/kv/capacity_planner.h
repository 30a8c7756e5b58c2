// The KV capacity planner (DESIGN.md section 3): plain numbers in, a KvPlan out, no I/O.
//
// With one shared memory for all DP ranks (CPU), the weights are mapped once and shared, while
// every rank runs its own forward and so needs its own workspace:
//
//   reserve            = max(128 MiB, usable / 50)                  (runtime and allocator overhead)
//   budget             = usable - weights - dp_size * workspace - reserve
//                        (weights are not subtracted when usable was measured after loading them,
//                         as cudaMemGetInfo is)
//   kv_bytes_per_rank  = floor(budget * mem_fraction / dp_size)     (mem_fraction at 1e-6 resolution)
//   auto tokens/rank   = floor(kv_bytes_per_rank / (kv_bytes_per_token + draft_kv_bytes_per_token)),
//                        rounded down to whole pages (a draft model's pool has as many pages)
//   scheduler tokens   = (max_running_requests * ceil(max_model_len / page_size) + prefix pages)
//                        * page_size: what the scheduler can use, when max_running_requests > 0
//                        (the CPU; 0 on GPUs, whose device memory is the server's);
//                        prefix pages = --prefix-cache-tokens / page_size, auto: a quarter of the
//                        running requests' pages, 0 with the prefix cache off
//   max_total_tokens   = min(auto, scheduler tokens), or the explicit --max-total-tokens (per
//                        rank, rounded down to whole pages), which must not exceed auto
//   resident bound     = weights (when subtracted) + dp_size * workspace + reserve + KV pools: the
//                        most the plan lets this memory hold
//   pages per rank     = max_total_tokens / page_size;  pool pages = dp_size * pages per rank
//
// Errors (spindle::Error, start-up stops): no budget left after weights, workspace and reserve;
// an explicit max_total_tokens above what fits (stating the bytes it needs and those available);
// a pool that cannot hold one sequence of max_model_len (naming the shortfall).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace spindle::kv {

inline constexpr uint64_t kMinReserveBytes = 128ull << 20;
inline constexpr uint64_t kReserveDivisor = 50;  // 2% of usable
// Page ids are int32 (page tables): the pool is capped at this many pages over all ranks.
inline constexpr int64_t kMaxPoolPages = 0x7fffffff;

// max(kMinReserveBytes, usable_bytes / kReserveDivisor) = max(128 MiB, usable / 50).
//
// The reserve covers what the plan does not itemise: code, heap, allocator slack, oneDNN scratch,
// thread stacks, kernel page tables. Measured by bench/kv_fill (whole pool filled through the
// forward, bench/results/2026-11-29-kv-fill-cpu-epyc.md; CPU, kjv-tiny, one rank, 2 threads):
//   - f32 KV, 512-token steps: everything but the KV peaked at 86.7 MiB against weights 27.0 MiB +
//     measured workspace 19.1 MiB, so ~41 MiB (40.6) was unitemised: code ~11 MiB (RssFile 38.3 MiB
//     less the 27.0 MiB of weights), the onednn_f32 8 MiB widening buffer, oneDNN's own buffers,
//     thread stacks, heap.
//   - bf16 KV, 2048-token steps: 97.3 MiB against 27.0 + 76.1 = 103.1 MiB planned (the measured
//     workspace's logits bound was not reached), so nothing unitemised showed.
// The 128 MiB floor is ~3x the 41 MiB measured. The 2% term takes over above 6.25 GiB of usable
// and grows with what grows with memory (page tables are ~0.2% of what is mapped; allocator
// fragmentation); mem_fraction (0.90) leaves a further 10% of the budget unallocated on top.
// The former max(256 MiB, usable / 20) held the peak RSS at 0.61-0.66 of usable but left the KV
// pool at only 0.55-0.62 of what would really have fit at 768 MiB (the floor was a third of it);
// the target is never over usable and a KV pool of >= 85% of what would fit. With this rule (same
// bench, f32 KV, 512-token steps) the non-KV peak was 89.6-89.8 MiB; peak RSS / usable 0.812 at
// 768 MiB and 0.878 at 3 GiB; KV / what would really fit 0.788 at 768 MiB (the floor is 1/6 of it)
// and 0.874 at 3 GiB (mem_fraction caps this ratio at 0.90).
// Not measured: many threads' stacks, dp_size > 1 ranks, CUDA; the reserve is not per rank.
uint64_t reserve_bytes_for(uint64_t usable_bytes);

struct KvPlanInput {
  uint64_t usable_bytes = 0;
  std::string usable_bound;           // which bound set usable_bytes (MemoryInfo::bound)
  bool usable_after_weights = false;  // usable was measured with the weights already resident
  uint64_t weight_bytes = 0;          // bytes of weights actually loaded (once, shared by ranks)
  uint64_t workspace_bytes = 0;       // peak workspace of one forward at max_num_batched_tokens, per rank
  std::string workspace_source = "estimated";  // "estimated" or "measured"
  int max_num_batched_tokens = 0;
  uint64_t kv_bytes_per_token = 0;  // KvLayout::bytes_per_token()
  // Speculative decoding with a draft model: its KV bytes per token (0: no draft). Its pool gets
  // as many pages as the target's, so the pages are sized for both: a page costs
  // (kv_bytes_per_token + draft_kv_bytes_per_token) * page_size of the budget.
  uint64_t draft_kv_bytes_per_token = 0;
  int page_size = 16;
  double mem_fraction = 0.90;  // (0, 1]
  int dp_size = 1;
  int max_model_len = 0;                        // one sequence of this length must fit in a rank
  std::optional<int64_t> max_total_tokens;      // explicit, per rank; nullopt = auto
  // > 0: auto capacity is capped at what the scheduler can use (CPU). 0: no cap (GPU).
  int max_running_requests = 0;
  bool prefix_cache_enabled = true;
  std::optional<int64_t> prefix_cache_tokens;  // explicit budget (>= 0), per rank; nullopt = auto
};

// Which bound set max_total_tokens.
enum class CapacityBound { kMemory, kScheduler, kPageIds, kExplicit };
const char* capacity_bound_name(CapacityBound bound);  // "memory", "scheduler", "page ids", "explicit"

// One DP rank's share of the pool (global page ids).
struct RankPlan {
  int rank = 0;
  int first_page = 0;
  int num_pages = 0;
  int64_t max_total_tokens = 0;
  uint64_t kv_bytes = 0;  // num_pages * bytes_per_page
};

struct KvPlan {
  uint64_t usable_bytes = 0;
  std::string usable_bound;
  uint64_t weight_bytes = 0;
  bool weights_subtracted = true;
  uint64_t workspace_bytes = 0;  // per rank
  std::string workspace_source;
  int max_num_batched_tokens = 0;
  uint64_t reserve_bytes = 0;
  uint64_t budget_bytes = 0;  // usable - weights - dp_size * workspace - reserve
  double mem_fraction = 0;
  int dp_size = 1;
  uint64_t kv_budget_bytes_per_rank = 0;  // floor(budget * mem_fraction / dp_size)

  uint64_t kv_bytes_per_token = 0;
  int page_size = 0;
  uint64_t bytes_per_page = 0;  // kv_bytes_per_token * page_size
  uint64_t draft_kv_bytes_per_token = 0;  // 0: no draft model
  uint64_t draft_bytes_per_page = 0;      // draft_kv_bytes_per_token * page_size
  uint64_t draft_kv_bytes_per_rank = 0;   // num_pages_per_rank * draft_bytes_per_page (its own pool)

  int64_t memory_max_total_tokens = 0;  // per rank: what the memory holds (after the page-id cap)
  int64_t auto_max_total_tokens = 0;    // per rank: what auto gives (memory, capped by the scheduler)
  bool capped_by_page_ids = false;    // auto was lowered to kMaxPoolPages over all ranks
  bool explicit_max_total_tokens = false;
  int64_t max_total_tokens = 0;  // per rank, whole pages
  CapacityBound bound = CapacityBound::kMemory;

  // What the scheduler can use (max_running_requests > 0), per rank; else 0.
  int max_running_requests = 0;
  int64_t running_tokens = 0;    // max_running_requests * pages_per_sequence * page_size
  int64_t scheduler_tokens = 0;  // running_tokens + prefix_cache_pages * page_size

  // The prefix cache's budget per rank: cached pages no request references that are kept (the
  // least recently used beyond it are evicted and their memory released); kNoPageLimit: every
  // page not in use (GPUs, auto). Never above num_pages_per_rank.
  int64_t prefix_cache_pages = -1;
  std::string prefix_cache_source;  // "auto", "explicit" or "disabled"

  uint64_t resident_bound_bytes = 0;  // weights (when subtracted) + dp * workspace + reserve + KV pool
  int num_pages_per_rank = 0;
  uint64_t kv_bytes_per_rank = 0;  // num_pages_per_rank * bytes_per_page

  int max_model_len = 0;
  int64_t pages_per_sequence = 0;      // ceil(max_model_len / page_size)
  int64_t num_sequences_per_rank = 0;  // sequences of max_model_len that fit at once

  std::vector<RankPlan> ranks;  // [dp_size]

  int num_pages() const { return num_pages_per_rank * dp_size; }  // the whole pool
};

// Throws spindle::Error for invalid inputs and for the errors listed above.
KvPlan plan_kv_capacity(const KvPlanInput& input);

}  // namespace spindle::kv
