// Linear kernels (kernels/cpu/linear.h) against the float64 reference.
//
// Tolerances, per output element y[i, j], relative to the magnitude of its terms
// S = sum_t |x[i, t] * w[j, t]| + |bias[j]|:
//   f32 accumulation (avx2, avx512, amx, onednn_f32, the priority choice by default): |y - ref| <= 1e-5 * S + 1e-30
//   bf16 activations (onednn_bf16, x rounded to bf16 = relative 2^-9 per term): |y - ref| <= 1e-2 * S
//   amx_bf16 (x rounded to bf16, f32 accumulation) against the reference of bf16-rounded x: the
//   f32 tolerance (1e-5 * S), which x left unrounded (errors ~2^-9 * S) would fail.
// Shapes: m in 1..17 (every row-group split of the direct kernels: avx2 and avx512 run ceil(m / 4) passes of
// 1-4 rows, 5 = 3 + 2, 9 = 3 + 3 + 3, ...), 64 and 129 (both sides of the AMX kernel's 64-row group),
// in in {1, 13, 64, 80, 136, 2048} (13 and 1 exercise the non-vector k tail), out in {1, 15, 96, 257};
// bf16 and f32 weights, with and without bias; y is poisoned with NaN before every call.
// Variants whose ISA this CPU lacks are skipped with the reason.
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "util/error.h"
#include "util/half.h"
#include "util/switches.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {
namespace {

constexpr double kF32Tolerance = 1e-5;
constexpr double kBf16ActivationTolerance = 1e-2;
constexpr int64_t kMs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 64, 129};
constexpr int64_t kIns[] = {1, 13, 64, 80, 136, 2048};
constexpr int64_t kOuts[] = {1, 15, 96, 257};

struct Case {
  int64_t m, in, out;
  DType dtype;
  bool with_bias;
};

struct Data {
  std::vector<float> x, bias, w32, expected, scale;
  std::vector<uint16_t> w16;
  LinearWeight weight;
};

// reference_of_bf16_x: the expected values (and scales) are those of x rounded to bf16; the kernel
// still gets the f32 x.
Data make_data(const Case& c, std::mt19937& rng, bool reference_of_bf16_x = false) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  Data d;
  d.x.resize(c.m * c.in);
  for (auto& v : d.x) v = uni(rng);
  std::vector<float> x_ref = d.x;
  if (reference_of_bf16_x)
    for (auto& v : x_ref) v = bf16_bits_to_float(float_to_bf16_bits(v));
  d.weight = {nullptr, c.dtype, c.out, c.in};
  if (c.dtype == DType::kBF16) {
    d.w16.resize(c.out * c.in);
    for (auto& v : d.w16) v = float_to_bf16_bits(uni(rng));
    d.weight.data = d.w16.data();
  } else {
    d.w32.resize(c.out * c.in);
    for (auto& v : d.w32) v = uni(rng);
    d.weight.data = d.w32.data();
  }
  if (c.with_bias) {
    d.bias.resize(c.out);
    for (auto& v : d.bias) v = uni(rng);
  }
  d.expected.assign(c.m * c.out, 0.0f);
  make_reference_linear_kernel(d.weight)->forward(x_ref.data(), c.m, d.expected.data(), nullptr,
                                                  c.with_bias ? d.bias.data() : nullptr);
  d.scale.resize(c.m * c.out);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.out; ++j) {
      double s = c.with_bias ? std::fabs(d.bias[j]) : 0.0;
      for (int64_t t = 0; t < c.in; ++t) {
        const double w = c.dtype == DType::kBF16 ? bf16_bits_to_float(d.w16[j * c.in + t]) : d.w32[j * c.in + t];
        s += std::fabs(x_ref[i * c.in + t] * w);
      }
      d.scale[i * c.out + j] = static_cast<float>(s);
    }
  }
  return d;
}

// "auto": make_linear_kernel's priority choice; else the named kernel.
std::string reason_of(const std::string& name, const LinearWeight& w, const LinearOptions& options) {
  return name == "auto" ? "" : linear_kernel_unsupported_reason(name, w, options);
}
std::unique_ptr<LinearKernel> make_variant(const std::string& name, const LinearWeight& w, const LinearOptions& options) {
  return name == "auto" ? make_linear_kernel(w, options) : make_named_linear_kernel(name, w, options);
}

// Runs `name` over every shape and weight dtype it serves; failures are reported per element.
void check_variant(const std::string& name, double tolerance, const LinearOptions& options = {},
                   bool reference_of_bf16_x = false) {
  std::vector<uint16_t> probe(64 * 64);
  const std::string reason = reason_of(name, {probe.data(), DType::kBF16, 64, 64}, options);
  if (!reason.empty()) GTEST_SKIP() << name << ": " << reason;
  ThreadPool pool(3);  // more threads than this VM's cores: exercises the split, not the speed
  std::mt19937 rng(42);
  int checked = 0;
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (int64_t in : kIns) {
      for (int64_t out : kOuts) {
        for (int64_t m : kMs) {
          const Case c{m, in, out, dtype, (m + in + out) % 2 == 0};
          const Data d = make_data(c, rng, reference_of_bf16_x);
          // Variants that serve only one weight dtype (onednn_bf16) skip the other one.
          if (!reason_of(name, d.weight, options).empty()) continue;
          auto kernel = make_variant(name, d.weight, options);
          std::vector<float> y(m * out, std::numeric_limits<float>::quiet_NaN());
          kernel->forward(d.x.data(), m, y.data(), &pool, c.with_bias ? d.bias.data() : nullptr);
          int bad = 0;
          for (int64_t e = 0; e < m * out && bad < 3; ++e) {
            const double err = std::fabs(double{y[e]} - d.expected[e]);
            if (!(err <= tolerance * d.scale[e] + 1e-30)) {
              ++bad;
              ADD_FAILURE() << kernel->name() << " " << dtype_name(dtype) << " m=" << m << " in=" << in
                            << " out=" << out << " bias=" << c.with_bias << " y[" << e / out << "," << e % out
                            << "] = " << y[e] << ", reference " << d.expected[e] << ", scale " << d.scale[e];
            }
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GE(checked, std::size(kIns) * std::size(kOuts) * std::size(kMs));
}

TEST(LinearTest, Avx2MatchesReference) { check_variant("avx2", kF32Tolerance); }
TEST(LinearTest, Avx512MatchesReference) { check_variant("avx512", kF32Tolerance); }
// AMX splits x into three bf16 parts (exact to 2^-27 relative), so it meets the f32 tolerance;
// bf16 weights only (f32 cases are skipped by its unsupported reason).
TEST(LinearTest, Avx512Bf16IsTheProductOfBf16RoundedX) {
  check_variant("avx512_bf16", kF32Tolerance, {}, /*reference_of_bf16_x=*/true);
}
TEST(LinearTest, Avx512Bf16MatchesReferenceLoosely) { check_variant("avx512_bf16", kBf16ActivationTolerance); }
TEST(LinearTest, AmxMatchesReference) { check_variant("amx", kF32Tolerance); }
TEST(LinearTest, AmxBf16IsTheProductOfBf16RoundedX) {
  check_variant("amx_bf16", kF32Tolerance, {}, /*reference_of_bf16_x=*/true);
}
TEST(LinearTest, AmxBf16MatchesReferenceLoosely) { check_variant("amx_bf16", kBf16ActivationTolerance); }
TEST(LinearTest, OneDnnF32MatchesReference) { check_variant("onednn_f32", kF32Tolerance); }
TEST(LinearTest, OneDnnBf16MatchesReferenceLoosely) { check_variant("onednn_bf16", kBf16ActivationTolerance); }
TEST(LinearTest, AutoMatchesReference) { check_variant("auto", kF32Tolerance); }
TEST(LinearTest, AutoWithBf16ActivationsMatchesReferenceLoosely) {
  check_variant("auto", kBf16ActivationTolerance, LinearOptions{.allow_bf16_activations = true});
}

// The direct kernels compute every output element with the same sum in the same order whatever
// the number of rows in the call (linear_avx2.cc, linear_avx512.cc), so a row's outputs are
// bit-identical to those of a 1-row call: a speculative verify over k + 1 rows gives the logits a
// plain decode step would (greedy output identical to non-speculative decoding).
void check_rows_independent(const std::string& name) {
  std::vector<uint16_t> probe(64 * 64);
  const std::string reason = linear_kernel_unsupported_reason(name, {probe.data(), DType::kBF16, 64, 64});
  if (!reason.empty()) GTEST_SKIP() << name << ": " << reason;
  ThreadPool pool(3);
  std::mt19937 rng(7);
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (const auto [in, out] : {std::pair<int64_t, int64_t>{384, 640}, {136, 257}, {13, 15}, {2048, 96}}) {
      const Case c{17, in, out, dtype, true};
      const Data d = make_data(c, rng);
      if (!linear_kernel_unsupported_reason(name, d.weight).empty()) continue;  // amx_bf16: bf16 weights only
      auto kernel = make_named_linear_kernel(name, d.weight);
      std::vector<std::vector<float>> single(c.m, std::vector<float>(out));
      for (int64_t i = 0; i < c.m; ++i) kernel->forward(d.x.data() + i * in, 1, single[i].data(), &pool, d.bias.data());
      for (int64_t m = 2; m <= c.m; ++m) {
        std::vector<float> y(m * out, std::numeric_limits<float>::quiet_NaN());
        kernel->forward(d.x.data(), m, y.data(), &pool, d.bias.data());
        int bad = 0;
        for (int64_t e = 0; e < m * out && bad < 3; ++e) {
          if (std::memcmp(&y[e], &single[e / out][e % out], sizeof(float)) != 0) {
            ++bad;
            ADD_FAILURE() << name << " " << dtype_name(dtype) << " m=" << m << " in=" << in << " out=" << out << " y["
                          << e / out << "," << e % out << "] = " << y[e] << " but the 1-row call gave "
                          << single[e / out][e % out];
          }
        }
      }
    }
  }
}

// The avx512 kernel's sum, spelled out in scalar code: 16 f32 lanes, lane l accumulating
// fma(x[t], w[t], acc) for t = l, l + 16, ... in order (the k tail as zeros), then GCC's
// _mm512_reduce_add_ps tree (lanes i + (i + 8), + (i + 4), + (i + 2), + (i + 1)), then + bias.
// The kernel must give exactly this for every m, whatever its tiling, row groups, widening or
// reduction code: its outputs stay those of the kernel before those were changed.
float avx512_sum_order(const float* x, const Data& d, int64_t j, int64_t k, const float* bias) {
  float lane[16] = {};
  for (int64_t t0 = 0; t0 < k; t0 += 16) {
    for (int l = 0; l < 16; ++l) {
      const int64_t t = t0 + l;
      const float w =
          t >= k ? 0.0f : (d.weight.dtype == DType::kBF16 ? bf16_bits_to_float(d.w16[j * k + t]) : d.w32[j * k + t]);
      lane[l] = std::fma(t >= k ? 0.0f : x[t], w, lane[l]);
    }
  }
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = lane[i + 8] + lane[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[i + 4] + t3[i];
  const float s = (t6[0] + t6[2]) + (t6[1] + t6[3]);
  return bias ? s + bias[j] : s;
}

TEST(LinearTest, Avx512IsTheSumInItsStatedOrder) {
  std::vector<uint16_t> probe(64 * 64);
  const std::string reason = linear_kernel_unsupported_reason("avx512", {probe.data(), DType::kBF16, 64, 64});
  if (!reason.empty()) GTEST_SKIP() << "avx512: " << reason;
  ThreadPool pool(3);
  std::mt19937 rng(11);
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (const auto [in, out] : {std::pair<int64_t, int64_t>{384, 640}, {136, 257}, {13, 15}, {1024, 131}}) {
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 9, 11, 17}) {
        const Case c{m, in, out, dtype, m % 2 == 1};
        const Data d = make_data(c, rng);
        auto kernel = make_named_linear_kernel("avx512", d.weight);
        std::vector<float> y(m * out, std::numeric_limits<float>::quiet_NaN());
        const float* bias = c.with_bias ? d.bias.data() : nullptr;
        kernel->forward(d.x.data(), m, y.data(), &pool, bias);
        int bad = 0;
        for (int64_t e = 0; e < m * out && bad < 3; ++e) {
          const float want = avx512_sum_order(d.x.data() + (e / out) * in, d, e % out, in, bias);
          if (std::memcmp(&y[e], &want, sizeof(float)) != 0) {
            ++bad;
            ADD_FAILURE() << dtype_name(dtype) << " m=" << m << " in=" << in << " out=" << out << " y[" << e / out
                          << "," << e % out << "] = " << y[e] << ", the stated order gives " << want;
          }
        }
      }
    }
  }
}

TEST(LinearTest, Avx2RowsMatchOneRowCallsBitwise) { check_rows_independent("avx2"); }
TEST(LinearTest, Avx512RowsMatchOneRowCallsBitwise) { check_rows_independent("avx512"); }
// amx_bf16 too: each output is one tile row's accumulation over K in a fixed order (and the n % 16
// tail columns the avx512 kernel's), whatever the other rows of the call.
TEST(LinearTest, AmxBf16RowsMatchOneRowCallsBitwise) { check_rows_independent("amx_bf16"); }
TEST(LinearTest, AmxRowsMatchOneRowCallsBitwise) { check_rows_independent("amx"); }
TEST(LinearTest, Avx512Bf16RowsMatchOneRowCallsBitwise) { check_rows_independent("avx512_bf16"); }

// A row table (make_row_table_linear, what the measured selection builds) called for m rows but
// choosing its kernel for fewer (LinearKernel::forward_choosing_for, a speculative verify of B
// sequences choosing for B): the rows get the decode kernel's bits, while a plain call of as many
// rows takes the prefill kernel. Fails if the choice is ignored.
TEST(LinearTest, RowTableChoosingForFewerRowsGivesTheDecodeKernelsBits) {
  std::vector<uint16_t> probe(64 * 64);
  const std::string reason = linear_kernel_unsupported_reason("avx2", {probe.data(), DType::kBF16, 64, 64});
  if (!reason.empty()) GTEST_SKIP() << "avx2: " << reason;
  ThreadPool pool(3);
  std::mt19937 rng(11);
  const Case c{20, 384, 640, DType::kBF16, true};
  const Data d = make_data(c, rng);
  auto table = make_row_table_linear(d.weight, {{1, "avx2"}, {9, "onednn_f32"}});
  EXPECT_EQ(std::string(table->name()), "avx2:1,onednn_f32:9");
  auto avx2 = make_named_linear_kernel("avx2", d.weight);
  auto onednn = make_named_linear_kernel("onednn_f32", d.weight);
  std::vector<float> chosen(c.m * c.out), want(c.m * c.out), plain(c.m * c.out);
  table->forward_choosing_for(d.x.data(), c.m, 2, chosen.data(), &pool, d.bias.data());
  avx2->forward(d.x.data(), c.m, want.data(), &pool, d.bias.data());
  EXPECT_EQ(0, std::memcmp(chosen.data(), want.data(), sizeof(float) * chosen.size()));
  table->forward(d.x.data(), c.m, plain.data(), &pool, d.bias.data());
  onednn->forward(d.x.data(), c.m, want.data(), &pool, d.bias.data());
  EXPECT_EQ(0, std::memcmp(plain.data(), want.data(), sizeof(float) * plain.size()));
  EXPECT_THROW(make_row_table_linear(d.weight, {{2, "avx2"}}), Error);
  EXPECT_THROW(make_row_table_linear(d.weight, {{1, "avx2"}, {1, "onednn_f32"}}), Error);
}

TEST(LinearTest, BothBiasCasesAreCovered) {
  // check_variant picks the bias from the parity of m + in + out: make sure both occur for every dtype.
  int with = 0, without = 0;
  for (int64_t in : kIns)
    for (int64_t out : kOuts)
      for (int64_t m : kMs) ((m + in + out) % 2 == 0 ? with : without)++;
  EXPECT_GT(with, 50);
  EXPECT_GT(without, 50);
}

// make_linear_kernel (unmeasured: the registry's priorities) keeps f32 activations unless allowed,
// and never serves decode rows with a kernel whose rows depend on m (oneDNN).
TEST(LinearTest, PriorityChoiceIsExactByDefault) {
  std::vector<uint16_t> w(64 * 64);
  const LinearWeight weight{w.data(), DType::kBF16, 64, 64};
  const std::string name = make_linear_kernel(weight)->name();
  EXPECT_EQ(name.find("bf16"), std::string::npos) << name;
  EXPECT_EQ(name.rfind("onednn", 0), std::string::npos) << name << ": oneDNN serving decode rows";
}

TEST(LinearTest, PriorityChoiceWithBf16ActivationsUsesABf16Kernel) {
  std::vector<uint16_t> w(64 * 64);
  const LinearWeight weight{w.data(), DType::kBF16, 64, 64};
  const std::string reason = linear_kernel_unsupported_reason("avx512_bf16", weight);
  if (!reason.empty()) GTEST_SKIP() << "avx512_bf16: " << reason;
  const std::string name = make_linear_kernel(weight, LinearOptions{.allow_bf16_activations = true})->name();
  EXPECT_NE(name.find("bf16"), std::string::npos) << name;
}

TEST(LinearTest, RejectsBadWeightsAndNames) {
  std::vector<uint16_t> w(16);
  EXPECT_THROW(make_linear_kernel({w.data(), DType::kF16, 4, 4}), Error);
  EXPECT_THROW(make_linear_kernel({w.data(), DType::kBF16, 0, 4}), Error);
  EXPECT_THROW(make_linear_kernel({nullptr, DType::kBF16, 4, 4}), Error);
  const LinearWeight ok{w.data(), DType::kBF16, 4, 4};
  EXPECT_NE(linear_kernel_unsupported_reason("nope", ok).find("known: reference"), std::string::npos);
  EXPECT_THROW(make_named_linear_kernel("nope", ok), Error);
  EXPECT_EQ(linear_kernel_names().front(), "reference");
}

TEST(LinearTest, ZeroRowsWritesNothing) {
  std::vector<float> w(8 * 8, 1.0f);
  auto kernel = make_linear_kernel({w.data(), DType::kF32, 8, 8});
  float y = 7.0f;
  kernel->forward(nullptr, 0, &y, nullptr);
  EXPECT_EQ(y, 7.0f);
}

}  // namespace
}  // namespace spindle::kernels::cpu
