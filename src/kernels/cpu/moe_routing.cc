#include "kernels/cpu/moe_routing.h"

#include <cmath>
#include <limits>

#include "util/error.h"

namespace spindle::kernels::cpu {
namespace {

void check_params(const RoutingParams& p) {
  SPINDLE_CHECK(p.num_experts >= 1 && p.top_k >= 1 && p.top_k <= p.num_experts,
                "moe routing: top {} of {} experts", p.top_k, p.num_experts);
}

// A candidate logit replaces the best so far (of a lower index) only when strictly larger, or a
// number over a NaN: exact ties stay with the lower index.
bool strictly_better(float candidate, float best) {
  if (std::isnan(candidate)) return false;
  return std::isnan(best) || candidate > best;
}

// The top-k expert ids of one row of E logits, largest first, ties to the lower index.
void top_k_row(const float* logits, int e, int k, int32_t* out) {
  for (int j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int32_t i = 0; i < e; ++i) {
      bool taken = false;
      for (int q = 0; q < j; ++q) taken = taken || out[q] == i;
      if (taken) continue;
      if (best < 0 || strictly_better(logits[i], logits[best])) best = i;
    }
    out[j] = best;
  }
}

}  // namespace

void route_top_k(const float* logits, int64_t rows, const RoutingParams& p, int32_t* experts, float* weights) {
  check_params(p);
  const int e = p.num_experts, k = p.top_k;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * e;
    int32_t* ids = experts + r * k;
    float* w = weights + r * k;
    top_k_row(row, e, k, ids);
    // softmax over all E in f32: the top-k's probabilities p_i = exp(l_i - max) / sum.
    const float max = row[ids[0]];
    float sum = 0.0f;
    for (int i = 0; i < e; ++i) sum += std::exp(row[i] - max);
    for (int j = 0; j < k; ++j) w[j] = std::exp(row[ids[j]] - max) / sum;
    if (p.norm_topk_prob) {
      float top = 0.0f;
      for (int j = 0; j < k; ++j) top += w[j];
      for (int j = 0; j < k; ++j) w[j] /= top;
    }
  }
}

void group_by_expert(const int32_t* experts, int64_t rows, const RoutingParams& p, ExpertGroups& g) {
  check_params(p);
  const int64_t n = rows * p.top_k;
  g.offsets.assign(static_cast<size_t>(p.num_experts) + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t e = experts[i];
    SPINDLE_CHECK(e >= 0 && e < p.num_experts, "moe routing: expert {} of choice {} is outside [0, {})", e, i,
                  p.num_experts);
    ++g.offsets[static_cast<size_t>(e) + 1];
  }
  g.active.clear();
  for (int32_t e = 0; e < p.num_experts; ++e) {
    if (g.offsets[static_cast<size_t>(e) + 1] > 0) g.active.push_back(e);
    g.offsets[static_cast<size_t>(e) + 1] += g.offsets[static_cast<size_t>(e)];
  }
  g.order.resize(static_cast<size_t>(n));
  g.position.resize(static_cast<size_t>(n));
  std::vector<int64_t> next(g.offsets.begin(), g.offsets.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = next[static_cast<size_t>(experts[i])]++;
    g.order[static_cast<size_t>(pos)] = i;
    g.position[static_cast<size_t>(i)] = pos;
  }
}

}  // namespace spindle::kernels::cpu
