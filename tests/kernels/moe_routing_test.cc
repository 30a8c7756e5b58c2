// kernels::cpu::route_top_k and group_by_expert against a float64 reference written from the
// definition (Hugging Face's Qwen2-MoE / Qwen3-MoE / Mixtral routers):
//   p_i = exp(l_i) / sum_j exp(l_j); the k largest, ties to the lower index;
//   norm_topk_prob: w = p_top / sum(p_top). Mixtral's form (a softmax over the k top logits
//   alone) is checked separately: it must equal the renormalized top-k.
// Tolerance: 1e-6 absolute on weights in [0, 1] (f32 exp and sum of at most 128 terms: a few ulp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/moe_routing.h"
#include "util/error.h"

namespace spindle::kernels::cpu {
namespace {

constexpr double kWeightTolerance = 1e-6;

struct Reference {
  std::vector<int32_t> experts;
  std::vector<double> weights;
};

// The definition in float64: a stable sort by descending logit keeps the lower index first on ties.
Reference reference_route(const std::vector<float>& logits, int k, bool norm) {
  const int e = static_cast<int>(logits.size());
  std::vector<int32_t> idx(static_cast<size_t>(e));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  double sum = 0;
  for (const float l : logits) sum += std::exp(double{l});
  Reference r;
  double top = 0;
  for (int j = 0; j < k; ++j) {
    r.experts.push_back(idx[static_cast<size_t>(j)]);
    r.weights.push_back(std::exp(double{logits[static_cast<size_t>(idx[static_cast<size_t>(j)])]}) / sum);
    top += r.weights.back();
  }
  if (norm) {
    for (double& w : r.weights) w /= top;
  }
  return r;
}

void expect_matches_reference(const std::vector<float>& logits, int k, bool norm) {
  const int e = static_cast<int>(logits.size());
  std::vector<int32_t> ids(static_cast<size_t>(k));
  std::vector<float> w(static_cast<size_t>(k));
  route_top_k(logits.data(), 1, {e, k, norm}, ids.data(), w.data());
  const Reference ref = reference_route(logits, k, norm);
  EXPECT_EQ(ids, ref.experts) << "E " << e << " k " << k;
  for (int j = 0; j < k; ++j) EXPECT_NEAR(w[static_cast<size_t>(j)], ref.weights[static_cast<size_t>(j)], kWeightTolerance);
}

TEST(MoeRouting, RandomRowsMatchTheFloat64Definition) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const int e : {1, 3, 8, 60, 128}) {
    for (const int k : {1, 2, 8}) {
      if (k > e) continue;
      for (const bool norm : {false, true}) {
        for (int trial = 0; trial < 20; ++trial) {
          std::vector<float> logits(static_cast<size_t>(e));
          for (float& l : logits) l = normal(rng);
          expect_matches_reference(logits, k, norm);
        }
      }
    }
  }
}

// Exact ties go to the lower expert index, at the top and at the k-th place.
TEST(MoeRouting, ExactTiesGoToTheLowerIndex) {
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  const std::vector<float> all_equal = {0.5f, 0.5f, 0.5f, 0.5f};
  route_top_k(all_equal.data(), 1, {4, 2, false}, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1}));
  EXPECT_FLOAT_EQ(w[0], 0.25f);
  const std::vector<float> tie_at_k = {-1.0f, 3.0f, 2.0f, 0.0f, 2.0f};  // 2 and 4 tie for second
  route_top_k(tie_at_k.data(), 1, {5, 2, true}, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));
  const std::vector<float> tie_at_top = {1.0f, 4.0f, 0.0f, 4.0f};
  route_top_k(tie_at_top.data(), 1, {4, 2, true}, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3}));
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  expect_matches_reference(tie_at_k, 3, false);
}

// norm_topk_prob: the chosen weights sum to 1; without it they sum to their share of the softmax.
TEST(MoeRouting, NormTopkProb) {
  const std::vector<float> logits = {0.1f, 1.7f, -0.4f, 1.2f, 0.0f, 0.9f};
  std::vector<int32_t> ids(2);
  std::vector<float> plain(2), norm(2);
  route_top_k(logits.data(), 1, {6, 2, false}, ids.data(), plain.data());
  route_top_k(logits.data(), 1, {6, 2, true}, ids.data(), norm.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3}));
  EXPECT_LT(plain[0] + plain[1], 0.9f);
  EXPECT_NEAR(norm[0] + norm[1], 1.0f, 1e-6);
  EXPECT_NEAR(norm[0] / norm[1], plain[0] / plain[1], 1e-6);
}

// Mixtral: a softmax over the top-k logits alone (float64) equals the renormalized top-k.
TEST(MoeRouting, MixtralTopKSoftmax) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(8);
    for (float& l : logits) l = normal(rng);
    std::vector<int32_t> ids(2);
    std::vector<float> w(2);
    route_top_k(logits.data(), 1, {8, 2, true}, ids.data(), w.data());
    const double a = logits[static_cast<size_t>(ids[0])], b = logits[static_cast<size_t>(ids[1])];
    const double m = std::max(a, b);
    const double wa = std::exp(a - m) / (std::exp(a - m) + std::exp(b - m));
    EXPECT_NEAR(w[0], wa, kWeightTolerance);
    EXPECT_NEAR(w[1], 1 - wa, kWeightTolerance);
  }
}

// A NaN logit is never chosen over a number.
TEST(MoeRouting, NanIsNeverChosenOverANumber) {
  const std::vector<float> logits = {std::nanf(""), -3.0f, std::nanf(""), -5.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  route_top_k(logits.data(), 1, {4, 2, false}, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3}));
}

TEST(MoeRouting, BadParamsAreRejected) {
  const float logits[2] = {0, 0};
  int32_t ids[3];
  float w[3];
  EXPECT_THROW(route_top_k(logits, 1, {2, 3, false}, ids, w), Error);
  EXPECT_THROW(route_top_k(logits, 1, {2, 0, false}, ids, w), Error);
}

// Rows grouped by expert: each expert's choices in row order, positions the inverse of order.
TEST(MoeRouting, GroupByExpert) {
  const std::vector<int32_t> experts = {2, 0, 0, 3, 2, 3};  // 3 rows, k = 2, E = 5
  ExpertGroups g;
  group_by_expert(experts.data(), 3, {5, 2, false}, g);
  EXPECT_EQ(g.offsets, (std::vector<int64_t>{0, 2, 2, 4, 6, 6}));
  EXPECT_EQ(g.order, (std::vector<int64_t>{1, 2, 0, 4, 3, 5}));
  EXPECT_EQ(g.active, (std::vector<int32_t>{0, 2, 3}));
  for (size_t i = 0; i < experts.size(); ++i) EXPECT_EQ(g.order[static_cast<size_t>(g.position[i])], int64_t(i));
  EXPECT_EQ(g.count(1), 0);
  const std::vector<int32_t> bad = {0, 5};
  EXPECT_THROW(group_by_expert(bad.data(), 1, {5, 2, false}, g), Error);
}

}  // namespace
}  // namespace spindle::kernels::cpu
