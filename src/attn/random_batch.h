// Random attention inputs over scattered pages, for validation, tests and benchmarks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attn/attention_backend.h"

namespace spindle::attn {

struct SequenceSpec {
  int num_new_tokens = 0;
  int num_cached_tokens = 0;
};

// A batch with its own KV pool (one layer). Cached positions are filled with random K/V; page ids
// are shuffled so no sequence owns contiguous pages. Values are uniform in [-1, 1] (FP8 pages:
// those values quantized with their head's scale).
struct RandomBatch {
  AttentionShape shape;
  StepBatch step;                         // token ids are all 0 (attention does not read them)
  std::vector<float> q, k, v;            // [tokens, heads * head_dim], [tokens, kv_heads * head_dim] x2
  std::vector<std::byte> k_pages, v_pages;
  int num_pages = 0;
  // FP8 KV only: per KV head scales (1 + 0.5 * (h % 3)) / 448, so every head differs and values in
  // [-1, 1] use the E4M3 range without saturating; empty for other dtypes.
  std::vector<float> k_scales, v_scales;

  LayerKvCache layer_cache();             // views into k_pages / v_pages (and the scales)
  int64_t num_tokens() const { return step.num_tokens(); }
  int64_t q_cols() const { return int64_t{shape.num_heads} * shape.head_dim; }
  int64_t kv_cols() const { return int64_t{shape.num_kv_heads} * shape.head_dim; }
};

// extra_pages: unused pages added to the pool (scattered among the used ones).
RandomBatch make_random_batch(const AttentionShape& shape, const std::vector<SequenceSpec>& specs,
                              uint64_t seed, bool causal = true, int extra_pages = 3);

// Runs one forward of `backend` over the batch (writing the new K/V into the batch's pages) and
// returns out [tokens, heads * head_dim]. The output is poisoned with NaN first. CUDA backends get
// device copies (StagedBatch) on the current device; their pages are copied back afterwards.
std::vector<float> run_backend_once(AttentionBackend& backend, RandomBatch& batch);

}  // namespace spindle::attn
