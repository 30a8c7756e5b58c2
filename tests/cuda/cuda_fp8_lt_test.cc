// The cuBLASLt FP8 product (kernels/cuda/fp8_lt_linear.h) and the activation quantizer
// (kernels/cuda/fp8_activation.h) against float64 references written from the definitions:
// random e4m3 weight codes (no NaN) with random f32 scales per tensor, per channel and per
// 128x128 block (a partial last row block included), random activations with row magnitudes over
// 2^-4..2^4, rows 17..300.
//
// The quantizer (per token; per token and 128 columns for block weights): scale = f32(amax / 448)
// over its group (1 for an all-zero group) and every code ==
// util/fp8.h's float_to_fp8_e4m3(f32(x / scale)): exact equality (both are correctly rounded).
//
// The product, per output element, against ref = sum_i xd[r, i] wd[o, i] (+ bias) in float64 over the
// SAME dequantized operands (xd = e4m3(code) * its scale, wd likewise), with
// S = sum_i |xd wd| + |bias|: each e4m3 x e4m3 product is exact; the error is the accumulation.
// Hopper's FP8 MMA keeps about 14 mantissa bits in its accumulator (DeepSeek-V3 report, section
// 3.3.2), one rounding per k = 32 MMA step, each <= 2^-13 of the partial sum (<= S):
//   fast accumulation off: cuBLASLt promotes to f32 at least every 4 MMA steps (128 of k), so the
//     error is <= 4 * 2^-13 * S per interval summed over the intervals <= 2^-11 S, plus f32's
//     (k / 128 + 3) 2^-24 S and the scales' two f32 products:      kTolerance = 2^-10 (2x margin)
//   fast accumulation on: the whole k in the accumulator: (k / 32) 2^-13 S: kFastTolerance(k).
// End to end, against the unquantized x (W8A8's error): each activation rounds by <= 2^-4 relative
// (e4m3 has 3 mantissa bits) or, below 2^-6 * scale (subnormal), by <= 2^-10 * scale absolute:
// |y - ref_x| <= 2^-4 S' + 2^-10 sum_i scale_i |wd_i| + the accumulation bound above (S' the
// magnitude over the unquantized x); checked as a ratio to that bound (<= 1).
// A test that must fail: the same product with the weight's block scales read transposed misses
// kTolerance (so a layout mistake cannot pass).
// Skips without an SM 9.0 device and cuBLASLt >= 12.9 (the reasons printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_skip.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_activation.h"
#include "kernels/cuda/fp8_lt_linear.h"
#include "platform/cuda_info.h"
#include "support/fp8_reference.h"
#include "util/fp8.h"

namespace spindle {
namespace {

namespace kcu = kernels::cuda;
using testing::e4m3_definition;

constexpr double kTolerance = 0x1p-10;
double fast_tolerance(int64_t in) { return 2.0 * double((in + 31) / 32) * 0x1p-13; }
constexpr double kActivationRounding = 0x1p-4;

template <typename T>
kcu::DeviceBuffer to_device(const std::vector<T>& host) {
  kcu::DeviceBuffer b(std::max<size_t>(host.size(), 1) * sizeof(T));
  kcu::copy_to_device(b.data(), host.data(), host.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> to_host(const kcu::DeviceBuffer& b, size_t n) {
  std::vector<T> host(n);
  kcu::copy_to_host(host.data(), b.data(), n * sizeof(T));
  return host;
}

// The reason the cuBLASLt FP8 product cannot run here ("" when it can).
std::string lt_skip_reason(kcu::Fp8Scale mode, int64_t out, int64_t in) {
  if (!testing::no_cuda_device_reason().empty()) return "no CUDA device: " + testing::no_cuda_device_reason();
  const auto& d = probe_cuda_devices().devices.front();
  std::string why;
  for (const auto& r : kcu::fp8_lt_unsupported_reasons(d.cc_major, d.cc_minor, mode, out, in)) why += r + "; ";
  return why;
}

struct Problem {
  int64_t out = 0, in = 0, rows = 0;
  kcu::Fp8Scale mode = kcu::Fp8Scale::kPerTensor;
  std::vector<uint8_t> w;     // [out, in]
  std::vector<float> wscale;  // fp8_scale_count
  std::vector<float> x;       // [rows, in]
  std::vector<float> bias;    // [out]
};

Problem make_problem(int64_t out, int64_t in, int64_t rows, kcu::Fp8Scale mode, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Problem p{out, in, rows, mode, {}, {}, {}, {}};
  std::uniform_int_distribution<int> code(0, 255);
  p.w.resize(static_cast<size_t>(out * in));
  for (auto& c : p.w) {
    int v = code(rng);
    while ((v & 0x7F) == 0x7F) v = code(rng);
    c = static_cast<uint8_t>(v);
  }
  std::uniform_real_distribution<float> scale(1e-3f, 4e-3f);
  p.wscale.resize(static_cast<size_t>(kcu::fp8_scale_count(mode, out, in)));
  for (float& s : p.wscale) s = scale(rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> magnitude(-4, 4);
  p.x.resize(static_cast<size_t>(rows * in));
  for (int64_t r = 0; r < rows; ++r) {
    const float m = std::ldexp(1.0f, magnitude(rng));
    for (int64_t i = 0; i < in; ++i) p.x[static_cast<size_t>(r * in + i)] = m * normal(rng);
  }
  if (rows > 2) std::fill_n(p.x.begin() + in, in, 0.0f);  // an all-zero row: scale 1, codes 0
  p.bias.resize(static_cast<size_t>(out));
  for (float& b : p.bias) b = 0.1f * normal(rng);
  return p;
}

double weight_scale(const Problem& p, int64_t o, int64_t i, bool transposed_blocks = false) {
  switch (p.mode) {
    case kcu::Fp8Scale::kPerTensor: return p.wscale[0];
    case kcu::Fp8Scale::kPerChannel: return p.wscale[static_cast<size_t>(o)];
    case kcu::Fp8Scale::kBlock128: {
      const int64_t row_blocks = (p.out + 127) / 128, col_blocks = (p.in + 127) / 128;
      const int64_t ob = o / 128, ib = i / 128;
      if (transposed_blocks) return p.wscale[static_cast<size_t>(((ib * row_blocks + ob) % (row_blocks * col_blocks)))];
      return p.wscale[static_cast<size_t>(ob * col_blocks + ib)];
    }
  }
  return 0;
}

// The activations' scale of x[r, i] in the layout of mode.
double act_scale(const std::vector<float>& scales, kcu::Fp8ActScale mode, int64_t rows, int64_t r, int64_t i) {
  switch (mode) {
    case kcu::Fp8ActScale::kPerToken: return scales[static_cast<size_t>(r)];
    case kcu::Fp8ActScale::kPerToken128: return scales[static_cast<size_t>((i / 128) * rows + r)];
  }
  return 0;
}

// The quantizer's outputs against the definition: exact.
void check_quantized(const Problem& p, kcu::Fp8ActScale mode, const std::vector<uint8_t>& codes,
                     const std::vector<float>& scales) {
  const int64_t group = mode == kcu::Fp8ActScale::kPerToken128 ? 128 : p.in;
  int64_t bad = 0;
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t i0 = 0; i0 < p.in; i0 += group) {
      float amax = 0;
      for (int64_t i = i0; i < i0 + group; ++i) amax = std::max(amax, std::fabs(p.x[static_cast<size_t>(r * p.in + i)]));
      const float s = amax > 0 ? amax / kFp8E4m3Max : 1.0f;
      ASSERT_EQ(static_cast<float>(act_scale(scales, mode, p.rows, r, i0)), s) << "row " << r << " column " << i0;
      for (int64_t i = i0; i < i0 + group; ++i) {
        const size_t at = static_cast<size_t>(r * p.in + i);
        if (codes[at] != float_to_fp8_e4m3(p.x[at] / s) && ++bad <= 5) {
          ADD_FAILURE() << "code of x[" << r << ", " << i << "] = " << p.x[at] << ": " << int(codes[at]) << ", want "
                        << int(float_to_fp8_e4m3(p.x[at] / s));
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

struct Errors {
  double quantized = 0;   // vs the float64 product of the same quantized operands, / S
  double end_to_end = 0;  // vs the unquantized x, / S'
  double end_to_end_bound = 0;  // vs the unquantized x, / its bound (see the top)
  double transposed = 0;  // vs the reference with the block scales transposed (negative control)
};

Errors compare(const Problem& p, kcu::Fp8ActScale mode, const std::vector<uint8_t>& codes,
               const std::vector<float>& scales, const std::vector<float>& y, int64_t column_stride, double tol) {
  Errors e;
  std::vector<int64_t> columns;  // every column_stride-th and the last
  for (int64_t o = 0; o < p.out; o += column_stride) columns.push_back(o);
  if (columns.back() != p.out - 1) columns.push_back(p.out - 1);
  for (int64_t r = 0; r < p.rows; ++r) {
    for (const int64_t o : columns) {
      double ref = p.bias[static_cast<size_t>(o)], mag = std::fabs(ref), ref_x = ref, mag_x = mag, ref_t = ref;
      double subnormal = 0;  // sum_i scale_i |wd_i|
      for (int64_t i = 0; i < p.in; ++i) {
        const size_t at = static_cast<size_t>(r * p.in + i);
        const double wc = e4m3_definition(p.w[static_cast<size_t>(o * p.in + i)]);
        const double wd = wc * weight_scale(p, o, i);
        const double xs = act_scale(scales, mode, p.rows, r, i);
        const double xd = e4m3_definition(codes[at]) * xs;
        subnormal += xs * std::fabs(wd);
        ref += xd * wd;
        mag += std::fabs(xd * wd);
        ref_x += double(p.x[at]) * wd;
        mag_x += std::fabs(double(p.x[at]) * wd);
        ref_t += xd * wc * weight_scale(p, o, i, true);
      }
      const double got = y[static_cast<size_t>(r * p.out + o)];
      if (mag > 0) {
        e.quantized = std::max(e.quantized, std::fabs(got - ref) / mag);
        e.transposed = std::max(e.transposed, std::fabs(got - ref_t) / mag);
      }
      if (mag_x > 0) e.end_to_end = std::max(e.end_to_end, std::fabs(got - ref_x) / mag_x);
      const double bound = kActivationRounding * mag_x + 0x1p-10 * subnormal + tol * mag;
      if (bound > 0) e.end_to_end_bound = std::max(e.end_to_end_bound, std::fabs(got - ref_x) / bound);
    }
  }
  return e;
}

struct LtCase {
  int64_t out, in, rows;
  kcu::Fp8Scale mode;
  bool fast_accum;
  int64_t column_stride;
  const char* name;
};

class CudaFp8LtTest : public ::testing::TestWithParam<LtCase> {};

TEST_P(CudaFp8LtTest, MatchesTheFloat64ProductOfTheQuantizedOperands) {
  const LtCase& c = GetParam();
  if (const std::string why = lt_skip_reason(c.mode, c.out, c.in); !why.empty()) GTEST_SKIP() << why;
  const Problem p = make_problem(c.out, c.in, c.rows, c.mode, 1000 + c.out + c.in + c.rows);
  const kcu::Fp8ActScale act = kcu::fp8_lt_activation_scale(c.mode);
  auto dw = to_device(p.w);
  auto dws = to_device(p.wscale);
  auto dx = to_device(p.x);
  auto db = to_device(p.bias);
  kcu::DeviceBuffer dcodes(static_cast<size_t>(c.rows * c.in));
  kcu::DeviceBuffer dscales(static_cast<size_t>(kcu::fp8_activation_scale_count(act, c.rows, c.in)) * sizeof(float));
  kcu::DeviceBuffer dy(static_cast<size_t>(c.rows * c.out) * sizeof(float));
  kcu::DeviceBuffer dy2(static_cast<size_t>(c.rows * c.out) * sizeof(float));
  kcu::launch_quantize_fp8_activations(dx.as<float>(), c.rows, c.in, act, dcodes.as<uint8_t>(), dscales.as<float>(),
                                       nullptr);
  const auto codes = to_host<uint8_t>(dcodes, static_cast<size_t>(c.rows * c.in));
  const auto scales = to_host<float>(dscales, static_cast<size_t>(kcu::fp8_activation_scale_count(act, c.rows, c.in)));
  check_quantized(p, act, codes, scales);

  kcu::DeviceFp8Weight w{dw.as<uint8_t>(), dws.as<float>(), c.mode, c.out, c.in};
  kcu::Fp8LtLinear lt(nullptr, c.fast_accum);
  lt.reserve(c.rows, c.in, c.out);
  // Block scales at a row count cuBLASLt cannot read (not a multiple of kBlockRowAlign): forward()
  // runs the aligned head and a zero-padded tail as two products; forward_quantized cannot.
  const int64_t align = kcu::Fp8LtLinear::kBlockRowAlign;
  const bool split = c.mode == kcu::Fp8Scale::kBlock128 && c.rows % align != 0;
  const int64_t planned = split ? std::max(c.rows / align * align, align) : c.rows;
  // Fast accumulation is an option of cuBLASLt's: where it has no algorithm with it, the entry is
  // unavailable (the registry says so), not wrong. Without it, every mode must have one.
  if (const std::string why = lt.why_unsupported(c.mode, c.out, c.in, planned); !why.empty()) {
    if (c.fast_accum) GTEST_SKIP() << why;
    FAIL() << why;
  }
  if (!split) {
    lt.forward_quantized(w, dcodes.as<uint8_t>(), dscales.as<float>(), c.rows, dy.as<float>(), db.as<float>());
  }
  lt.forward(w, dx.as<float>(), c.rows, dy2.as<float>(), db.as<float>());  // quantizes x itself
  const auto y2 = to_host<float>(dy2, static_cast<size_t>(c.rows * c.out));
  // Each row's codes depend on that row alone, so the split's products see the same operands.
  const auto y = split ? y2 : to_host<float>(dy, static_cast<size_t>(c.rows * c.out));
  EXPECT_EQ(y, y2) << "forward() differs from forward_quantized() over the same quantization";

  // A bf16 output (cuBLASLt without an f32-output algorithm here) rounds once more: <= 2^-9 |y| <= 2^-9 S.
  const bool bf16_out = lt.output_bf16(c.mode, c.out, c.in, planned);
  const double tol = (c.fast_accum ? fast_tolerance(c.in) : kTolerance) + (bf16_out ? 0x1p-9 : 0.0);
  const Errors e = compare(p, act, codes, scales, y, c.column_stride, tol);
  std::printf("%s (%s%s): max |y - ref| / S = %.3g (tolerance %.3g); vs unquantized x %.3g (%.3g of its bound); "
              "block scales transposed %.3g\n",
              c.name, lt.name(), bf16_out ? ", bf16 output" : "", e.quantized, tol, e.end_to_end, e.end_to_end_bound,
              e.transposed);
  EXPECT_LE(e.quantized, tol);
  EXPECT_LE(e.end_to_end_bound, 1.0);
  if (c.mode == kcu::Fp8Scale::kBlock128) {
    EXPECT_GT(e.transposed, tol) << "the negative control passed";
  }
}

std::vector<LtCase> cases() {
  using M = kcu::Fp8Scale;
  std::vector<LtCase> out;
  for (bool fast : {false, true}) {
    out.push_back({256, 512, 17, M::kPerTensor, fast, 1, fast ? "per_tensor_fast" : "per_tensor"});
    out.push_back({384, 1024, 77, M::kPerChannel, fast, 1, fast ? "per_channel_fast" : "per_channel"});
    out.push_back({272, 512, 129, M::kBlock128, fast, 1, fast ? "block128_partial_fast" : "block128_partial"});
    out.push_back({256, 512, 3, M::kBlock128, fast, 1, fast ? "block128_tail_only_fast" : "block128_tail_only"});
    out.push_back({640, 1536, 300, M::kBlock128, fast, 3, fast ? "block128_fast" : "block128"});
    out.push_back({4096, 4096, 64, M::kBlock128, fast, 37, fast ? "block128_4096_fast" : "block128_4096"});
    out.push_back({4096, 4096, 64, M::kPerChannel, fast, 37, fast ? "per_channel_4096_fast" : "per_channel_4096"});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaFp8LtTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// The reasons need no device: a device other than SM 9.0 and block scales cuBLASLt cannot read in place.
TEST(CudaFp8LtReasons, NamesTheDeviceAndTheBlockAlignment) {
  const auto ampere = kcu::fp8_lt_unsupported_reasons(8, 0, kcu::Fp8Scale::kPerChannel, 4096, 4096);
  ASSERT_FALSE(ampere.empty());
  EXPECT_NE(ampere.front().find("compute capability 8.0"), std::string::npos) << ampere.front();
  const auto blocks = kcu::fp8_lt_unsupported_reasons(9, 0, kcu::Fp8Scale::kBlock128, 4096, 384);  // 3 column blocks
  bool named = false;
  for (const auto& r : blocks) named = named || r.find("3 column blocks") != std::string::npos;
  EXPECT_TRUE(named);
  const auto odd = kcu::fp8_lt_unsupported_reasons(9, 0, kcu::Fp8Scale::kPerTensor, 4096, 4100);
  bool sixteen = false;
  for (const auto& r : odd) sixteen = sixteen || r.find("multiples of 16") != std::string::npos;
  EXPECT_TRUE(sixteen);
}

}  // namespace
}  // namespace spindle
