// The small CPU ops of the forward pass (kernels/cpu/ops.h) against float64 formulas.
//
// Tolerances: kRel = 2e-6 relative (one or two f32 roundings of O(1) values, or of the inverse
// frequencies, which are computed in f32 as transformers does). The llama3 inverse frequencies
// were computed independently in float64 from transformers' _compute_llama3_parameters (theta
// 500000, factor 32, low 1, high 4, original 8192, head_dim 64: Llama-3.2-1B).
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "util/error.h"
#include "util/half.h"

namespace spindle::kernels::cpu {
namespace {

constexpr double kRel = 2e-6;

TEST(RopeTableTest, Llama3InverseFrequenciesMatchTransformers) {
  RopeParams p;
  p.head_dim = 64;
  p.theta = 500000.0;
  p.scaling = RopeParams::kLlama3;
  p.factor = 32.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 8192;
  const RopeTable rope(p, 16);
  // {index, value}: 0-15 kept (high frequency), 16-17 smoothed, 18-31 divided by the factor.
  const std::vector<std::pair<int, double>> expected = {
      {0, 1.0}, {10, 0.016560440080994446}, {15, 0.001290547928209264}, {16, 0.00042955679655936815},
      {17, 9.70828780262767e-05}, {18, 1.9461638184831125e-05}, {20, 8.570255489881478e-06},
      {25, 1.102883668639601e-06}, {31, 9.418306725434909e-08}};
  for (const auto& [i, value] : expected) {
    EXPECT_NEAR(rope.inv_freq()[i], value, value * kRel) << "index " << i;
  }
}

// Linear scaling divides the inverse frequencies (= positions) by the factor.
TEST(RopeTableTest, LinearScalingDividesFrequencies) {
  RopeParams p;
  p.head_dim = 16;
  const RopeTable plain(p, 0);
  p.scaling = RopeParams::kLinear;
  p.factor = 4.0;
  const RopeTable linear(p, 0);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(linear.inv_freq()[i], plain.inv_freq()[i] / 4.0, plain.inv_freq()[i] * kRel);
}

// rotate_half pairs (i, i + d/2); positions past the table give the same result as inside it.
TEST(RopeTableTest, RotateHalfConventionAndPositionsPastTheTable) {
  RopeParams p;
  p.head_dim = 8;
  p.theta = 10000.0;
  const RopeTable small(p, 4), large(p, 4096);
  std::vector<float> x(3 * 8);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : x) v = u(rng);
  for (const int64_t pos : {0, 3, 1000, 4095}) {
    std::vector<float> a = x, b = x;
    small.apply(a.data(), 3, pos);
    large.apply(b.data(), 3, pos);
    EXPECT_EQ(a, b);
    for (int h = 0; h < 3; ++h) {
      for (int i = 0; i < 4; ++i) {
        const double f = 1.0 / std::pow(10000.0, 2.0 * i / 8.0);
        const double c = std::cos(pos * f), s = std::sin(pos * f);
        const double x1 = x[h * 8 + i], x2 = x[h * 8 + i + 4];
        // The angle is an f32 product (as transformers computes it): allow its rounding.
        const double tol = 1e-6 + std::abs(pos * f) * 1.2e-7 * 2;
        EXPECT_NEAR(a[h * 8 + i], x1 * c - x2 * s, tol) << pos;
        EXPECT_NEAR(a[h * 8 + i + 4], x2 * c + x1 * s, tol) << pos;
      }
    }
  }
  EXPECT_THROW(small.apply(x.data(), 1, -1), Error);
}

TEST(RmsNormTest, MatchesFloat64WithEveryWeightDtypeAndStride) {
  const int rows = 3, cols = 37;
  std::vector<float> x(rows * 40), w(cols);
  std::vector<uint16_t> w_bf16(cols), w_f16(cols);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2, 2);
  for (float& v : x) v = u(rng);
  for (int i = 0; i < cols; ++i) {
    w_bf16[i] = float_to_bf16_bits(u(rng));
    w[i] = bf16_bits_to_float(w_bf16[i]);  // exactly representable in all three dtypes
    w_f16[i] = float_to_fp16_bits(w[i]);
  }
  for (const TypedWeight tw : {TypedWeight{w.data(), DType::kF32}, TypedWeight{w_bf16.data(), DType::kBF16},
                               TypedWeight{w_f16.data(), DType::kF16}}) {
    std::vector<float> out(rows * cols);
    rms_norm(x.data(), 40, out.data(), cols, rows, cols, tw, 1e-5f);
    for (int r = 0; r < rows; ++r) {
      double ss = 0;
      for (int i = 0; i < cols; ++i) ss += double{x[r * 40 + i]} * x[r * 40 + i];
      const double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
      for (int i = 0; i < cols; ++i) {
        const double ref = x[r * 40 + i] * inv * w[i];
        EXPECT_NEAR(out[r * cols + i], ref, 4 * kRel * std::max(1.0, std::abs(ref)));
      }
    }
  }
}

TEST(OpsTest, EmbeddingGatherSiluMulAndAdd) {
  std::vector<uint16_t> table(5 * 3);
  for (int i = 0; i < 15; ++i) table[i] = float_to_bf16_bits(0.5f * i);
  std::vector<int32_t> ids = {4, 0, 4};
  std::vector<float> out(9);
  embedding_gather({table.data(), DType::kBF16}, 5, 3, ids, out.data());
  EXPECT_EQ(out, (std::vector<float>{6, 6.5, 7, 0, 0.5, 1, 6, 6.5, 7}));
  ids[1] = 5;
  EXPECT_THROW(embedding_gather({table.data(), DType::kBF16}, 5, 3, ids, out.data()), Error);

  // gate/up interleaved per row (stride 4), 2 rows of 2.
  const std::vector<float> gu = {-3, 0.5f, 2, -1, 10, -10, 0.25f, 4};
  std::vector<float> act(4);
  silu_mul(gu.data(), gu.data() + 2, 4, act.data(), 2, 2);
  auto silu = [](double g) { return g / (1 + std::exp(-g)); };
  const double expect[] = {silu(-3) * 2, silu(0.5) * -1, silu(10) * 0.25, silu(-10) * 4};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(act[i], expect[i], kRel * std::max(1.0, std::abs(expect[i])));

  std::vector<float> y = {1, 2, 3};
  add_inplace(y.data(), std::vector<float>{0.5f, -2, 1}.data(), 3);
  EXPECT_EQ(y, (std::vector<float>{1.5f, 0, 4}));
}

// silu_mul over many magnitudes, both signs and the saturated ends, in rows whose length is not a
// multiple of 8 (the vector path's masked tail), against the float64 formula. The dispatched path
// (AVX2 where the CPU has it) and the scalar path are both checked to kSiluRel = 2.5e-7 relative (or
// absolute below 1): a few f32 roundings (exp ~1 ulp, 1 + e, the division, the product; 1 ulp is
// 6e-8; measured worst 1.2e-7). Fails for a wrong polynomial coefficient (a 1e-5 change of the r^2
// term gives 3.2e-7), range reduction, overflow handling (g = -3e38) or tail mask.
TEST(OpsTest, SiluMulMatchesFloat64AtEveryMagnitude) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uni(-1, 1);
  const int64_t rows = 7, cols = 1003, stride = 2 * cols + 5;
  std::vector<float> gu(rows * stride);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; ++i) {
      // |g| from 1e-6 to ~120 (log-uniform), random sign; up in [-1, 1].
      const float mag = std::pow(10.0f, -6.0f + 8.1f * (0.5f + 0.5f * uni(rng)));
      gu[r * stride + i] = uni(rng) < 0 ? -mag : mag;
      gu[r * stride + cols + i] = uni(rng);
    }
  }
  const float edges[] = {0.0f,  -0.0f,  1e-30f, -1e-30f, 20.0f,  -20.0f,  87.0f, -87.0f,
                         88.5f, -88.5f, 89.0f,  -89.0f,  100.0f, -100.0f, 3e38f, -3e38f};
  for (size_t e = 0; e < std::size(edges); ++e) gu[(e % rows) * stride + (e * 61) % cols] = edges[e];
  std::vector<float> fast(rows * cols), scalar(rows * cols);
  silu_mul(gu.data(), gu.data() + cols, stride, fast.data(), rows, cols);
  silu_mul_scalar(gu.data(), gu.data() + cols, stride, scalar.data(), rows, cols);
  int bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; ++i) {
      const double g = gu[r * stride + i], u = gu[r * stride + cols + i];
      const double want = g / (1.0 + std::exp(-g)) * u;
      constexpr double kSiluRel = 2.5e-7;
      const double tol = kSiluRel * std::max(1.0, std::abs(want));
      const float got = fast[r * cols + i], ref = scalar[r * cols + i];
      if (!(std::abs(got - want) <= tol) || !(std::abs(ref - want) <= tol) || !(std::abs(got - ref) <= tol)) {
        if (++bad <= 5)
          ADD_FAILURE() << "g " << g << " u " << u << ": dispatched " << got << ", scalar " << ref << ", float64 "
                        << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i) {
      const double g = gu[r * stride + i], u = gu[r * stride + cols + i];
      const double want = g / (1.0 + std::exp(-g)) * u;
      worst = std::max(worst, std::abs(fast[r * cols + i] - want) / std::max(1.0, std::abs(want)));
    }
  std::printf("silu_mul (%s): worst error %.3g (relative, or absolute below 1)\n",
              silu_mul_uses_avx2() ? "avx2" : "scalar", worst);
  if (!silu_mul_uses_avx2()) GTEST_SKIP() << "CPU lacks AVX2+FMA: only the scalar path ran";
}

}  // namespace
}  // namespace spindle::kernels::cpu
