// The FP8 W8A16 linear kernel (kernels/cpu/fp8_linear.h) against a float64 product written from
// the definitions: e4m3 decoded by tests/support/fp8_reference.h, dequant(W)[o, i] = code * s with
// s per tensor, per output row or per 128x128 block (index (o / 128) * ceil(in / 128) + i / 128).
//
// Tolerance per output y[r, o], relative to the magnitude of its terms S = sum_i |x[r, i] *
// dequant(W)[o, i]| + |bias[o]|: |y - ref| <= 1e-5 * S (f32 products and sums; the dequantized
// weight is one f32 rounding of code * s). Negative control: the block layout read as per-tensor
// (scale[0] everywhere) must miss it (the scales differ by up to 10x between blocks).
// Shapes: out in {1, 15, 130, 300} (partial 16-row tiles and 128-row blocks), in in {1, 13, 128,
// 200, 384}, m in {1, 3, 17}; with and without bias; serially and over a ThreadPool.
#include "kernels/cpu/fp8_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "support/fp8_reference.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {
namespace {

constexpr double kTolerance = 1e-5;

struct Problem {
  int64_t out, in;
  Fp8ScaleLayout layout;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

int64_t scale_count(Fp8ScaleLayout l, int64_t out, int64_t in) {
  if (l == Fp8ScaleLayout::kPerTensor) return 1;
  if (l == Fp8ScaleLayout::kPerChannel) return out;
  return ((out + 127) / 128) * ((in + 127) / 128);
}

Problem make_problem(int64_t out, int64_t in, Fp8ScaleLayout layout, std::mt19937& rng) {
  Problem p{out, in, layout, std::vector<uint8_t>(static_cast<size_t>(out * in)), {}};
  std::uniform_int_distribution<int> code(0, 255);
  for (auto& c : p.codes) {
    do c = static_cast<uint8_t>(code(rng));
    while ((c & 0x7F) == 0x7F);  // no NaN codes
  }
  std::uniform_real_distribution<float> scale(0.01f, 0.1f);
  p.scales.resize(static_cast<size_t>(scale_count(layout, out, in)));
  for (auto& s : p.scales) s = scale(rng);
  return p;
}

double dequant(const Problem& p, int64_t o, int64_t i, bool as_per_tensor = false) {
  int64_t s = 0;
  if (!as_per_tensor && p.layout == Fp8ScaleLayout::kPerChannel) s = o;
  if (!as_per_tensor && p.layout == Fp8ScaleLayout::kBlock128) s = (o / 128) * ((p.in + 127) / 128) + i / 128;
  return testing::e4m3_definition(p.codes[static_cast<size_t>(o * p.in + i)]) * double{p.scales[static_cast<size_t>(s)]};
}

// The worst |y - ref| / S over all outputs.
double worst_error(const Problem& p, const std::vector<float>& x, int64_t m, const std::vector<float>& y,
                   const float* bias, bool ref_as_per_tensor) {
  double worst = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t o = 0; o < p.out; ++o) {
      double ref = bias ? bias[o] : 0, mag = bias ? std::abs(bias[o]) : 0;
      for (int64_t i = 0; i < p.in; ++i) {
        const double t = x[static_cast<size_t>(r * p.in + i)] * dequant(p, o, i, ref_as_per_tensor);
        ref += t, mag += std::abs(t);
      }
      const double err = std::abs(y[static_cast<size_t>(r * p.out + o)] - ref) / (mag + 1e-30);
      worst = std::isfinite(err) ? std::max(worst, err) : INFINITY;
    }
  return worst;
}

TEST(Fp8Linear, MatchesFloat64ProductOfDequantizedWeights) {
  std::mt19937 rng(47);
  ThreadPool pool(3);
  std::normal_distribution<float> normal;
  for (const auto layout : {Fp8ScaleLayout::kPerTensor, Fp8ScaleLayout::kPerChannel, Fp8ScaleLayout::kBlock128})
    for (const int64_t out : {1, 15, 130, 300})
      for (const int64_t in : {1, 13, 128, 200, 384}) {
        const Problem p = make_problem(out, in, layout, rng);
        const auto kernel = make_fp8_linear_kernel({p.codes.data(), out, in, layout, p.scales.data()});
        EXPECT_STREQ(kernel->name(), "fp8_reference");
        for (const int64_t m : {1, 3, 17})
          for (const bool with_bias : {false, true}) {
            std::vector<float> x(static_cast<size_t>(m * in)), bias(static_cast<size_t>(out));
            for (auto& v : x) v = normal(rng);
            for (auto& v : bias) v = normal(rng);
            std::vector<float> y(static_cast<size_t>(m * out), NAN);
            kernel->forward(x.data(), m, y.data(), (m + out) % 2 ? &pool : nullptr, with_bias ? bias.data() : nullptr);
            EXPECT_LE(worst_error(p, x, m, y, with_bias ? bias.data() : nullptr, false), kTolerance)
                << "layout " << static_cast<int>(layout) << " out " << out << " in " << in << " m " << m;
          }
      }
}

TEST(Fp8Linear, NegativeControlBlockScalesReadPerTensorMissTheTolerance) {
  std::mt19937 rng(7);
  Problem p = make_problem(300, 384, Fp8ScaleLayout::kBlock128, rng);
  for (size_t i = 0; i < p.scales.size(); ++i) p.scales[i] = i % 2 ? 0.01f : 0.1f;
  const auto kernel = make_fp8_linear_kernel({p.codes.data(), p.out, p.in, p.layout, p.scales.data()});
  std::vector<float> x(static_cast<size_t>(2 * p.in), 0.5f), y(static_cast<size_t>(2 * p.out));
  kernel->forward(x.data(), 2, y.data(), nullptr, nullptr);
  EXPECT_LE(worst_error(p, x, 2, y, nullptr, false), kTolerance);
  EXPECT_GT(worst_error(p, x, 2, y, nullptr, true), 1e-2);
}

TEST(Fp8Linear, RefusesNullData) {
  EXPECT_THROW(make_fp8_linear_kernel({nullptr, 4, 4, Fp8ScaleLayout::kPerTensor, nullptr}), Error);
}

}  // namespace
}  // namespace spindle::kernels::cpu
