// The small CUDA ops of kernels/cuda/model_ops.h against the CPU kernels they mirror
// (kernels/cpu/ops.h, f32 with the RMSNorm sum of squares in f64) at widths that take each of
// their code paths: one warp per row (<= 256 columns), the register-resident row (multiples of 4
// up to 16384) and the plain block loop (other widths, longer rows).
//   - f32 outputs: within 2e-6 relative of the CPU's (the f64 sums run in another order, expf is
//     the device's), the residual sum of add_rms_norm bit for bit (one f32 add each);
//   - the 16-bit copies (Out16): bit for bit util/half.h's rounding of the op's own f32 output;
//   - launch_gemv16 (1-8 rows, 1, 2 and 4 outputs per warp, bf16 and f16): the f64 sum of the same
//     products, within 1e-5 of the sum of their magnitudes (f32 accumulation over ~1000 terms in
//     another order), bias included, and each output the one-row launch's bits;
//   - launch_split_qkv_norm_rope with KvPagesOut: the pages hold exactly its own k/v outputs rounded
//     to the KV type (bf16, f16, f32) at each token's slot, nothing at the others, q/k/v unchanged;
//   - launch_gemv16_qkv_rope: bit for bit launch_gemv16 then launch_split_qkv_norm_rope;
//   - launch_gemv16_swiglu: bit for bit launch_gemv16 then launch_silu_mul (f32 and the 16-bit
//     copy), and within 1e-5 (of the products' magnitudes) of SwiGLU over the f64 sums.
// Skips when no CUDA device with cc >= 8.0 is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_skip.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemv16.h"
#include "kernels/cuda/model_ops.h"
#include "util/error.h"
#include "util/half.h"

namespace spindle {
namespace {

namespace kc = kernels::cpu;
namespace kcu = kernels::cuda;

constexpr float kEps = 1e-5f;
constexpr double kRelTolerance = 2e-6;

std::vector<float> random_values(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

template <typename T>
kcu::DeviceBuffer to_device(const std::vector<T>& host) {
  kcu::DeviceBuffer b(host.size() * sizeof(T));
  kcu::copy_to_device(b.data(), host.data(), host.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> to_host(const kcu::DeviceBuffer& b, size_t n) {
  std::vector<T> host(n);
  kcu::copy_to_host(host.data(), b.data(), n * sizeof(T));
  return host;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double tol = kRelTolerance * std::max(1.0, std::fabs(static_cast<double>(want[i])));
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol)) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the CPU's " << want[i];
      ++bad;
    }
  }
}

void expect_bf16_copy(const std::vector<uint16_t>& copy, const std::vector<float>& f32, const std::string& what) {
  ASSERT_EQ(copy.size(), f32.size());
  int bad = 0;
  for (size_t i = 0; i < f32.size() && bad < 5; ++i) {
    if (copy[i] != float_to_bf16_bits(f32[i])) {
      ADD_FAILURE() << what << ": 16-bit copy of element " << i << " (" << f32[i] << ") is " << copy[i] << ", not "
                    << float_to_bf16_bits(f32[i]);
      ++bad;
    }
  }
}

// bf16 weights (as the checkpoints store them), values around 1.
std::vector<uint16_t> norm_weight(int64_t cols, uint64_t seed) {
  std::vector<float> w = random_values(static_cast<size_t>(cols), seed, 0.2f);
  std::vector<uint16_t> bits(w.size());
  for (size_t i = 0; i < w.size(); ++i) bits[i] = float_to_bf16_bits(1.0f + w[i]);
  return bits;
}

const int64_t kWidths[] = {128, 256, 384, 4096, 4098, 16384, 16392};

TEST(CudaOpsTest, RmsNormOfGatheredRowsMatchesTheCpuKernelAndItsCopy) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const int64_t cols : kWidths) {
    const int64_t src_rows = 5, rows = 3;
    const std::vector<float> x = random_values(static_cast<size_t>(src_rows * cols), 1 + cols, 1.5f);
    const std::vector<int64_t> index = {4, 0, 2};
    const std::vector<uint16_t> w = norm_weight(cols, 2 + cols);
    std::vector<float> want(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      kc::rms_norm(x.data() + index[static_cast<size_t>(r)] * cols, cols, want.data() + r * cols, cols, 1, cols,
                   {w.data(), DType::kBF16}, kEps);
    }
    const auto dx = to_device(x), dw = to_device(w), di = to_device(index);
    kcu::DeviceBuffer out(want.size() * sizeof(float)), copy(want.size() * sizeof(uint16_t));
    kcu::launch_rms_norm(dx.as<float>(), cols, di.as<int64_t>(), out.as<float>(), cols, rows, cols, dw.data(),
                         kcu::WeightType::kBF16, kEps, nullptr, {copy.data(), true});
    const std::vector<float> got = to_host<float>(out, want.size());
    const std::string what = "rms_norm over " + std::to_string(cols) + " columns";
    expect_close(got, want, what);
    expect_bf16_copy(to_host<uint16_t>(copy, want.size()), got, what);
  }
}

TEST(CudaOpsTest, AddRmsNormMatchesAddThenTheCpuKernelAndItsCopy) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const int64_t cols : kWidths) {
    const int64_t rows = 4;
    const size_t n = static_cast<size_t>(rows * cols);
    std::vector<float> hidden = random_values(n, 3 + cols, 2.0f);
    const std::vector<float> delta = random_values(n, 4 + cols, 0.5f);
    const std::vector<uint16_t> w = norm_weight(cols, 5 + cols);
    auto dh = to_device(hidden);
    const auto dd = to_device(delta), dw = to_device(w);
    kcu::DeviceBuffer out(n * sizeof(float)), copy(n * sizeof(uint16_t));
    kcu::launch_add_rms_norm(dh.as<float>(), dd.as<float>(), out.as<float>(), rows, cols, dw.data(),
                             kcu::WeightType::kBF16, kEps, nullptr, {copy.data(), true});
    kc::add_inplace(hidden.data(), delta.data(), static_cast<int64_t>(n));
    std::vector<float> want(n);
    kc::rms_norm(hidden.data(), cols, want.data(), cols, rows, cols, {w.data(), DType::kBF16}, kEps);
    const std::string what = "add_rms_norm over " + std::to_string(cols) + " columns";
    EXPECT_EQ(to_host<float>(dh, n), hidden) << what << ": the residual sum";
    const std::vector<float> got = to_host<float>(out, n);
    expect_close(got, want, what);
    expect_bf16_copy(to_host<uint16_t>(copy, n), got, what);
  }
}

// 1000 columns take the float4 kernel, 1002 (not a multiple of 4) the scalar one; the float4
// kernel must also give the scalar kernel's bits (a gate/up stride not a multiple of 4 sends the
// same columns to the scalar kernel).
TEST(CudaOpsTest, SiluMulMatchesTheCpuKernelAndItsCopy) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const int64_t cols : {int64_t{1000}, int64_t{1002}}) {
    const int64_t rows = 3;
    const std::vector<float> gate_up = random_values(static_cast<size_t>(rows * 2 * cols), 6, 2.0f);
    std::vector<float> want(static_cast<size_t>(rows * cols));
    kc::silu_mul(gate_up.data(), gate_up.data() + cols, 2 * cols, want.data(), rows, cols);
    const auto d = to_device(gate_up);
    kcu::DeviceBuffer out(want.size() * sizeof(float)), copy(want.size() * sizeof(uint16_t));
    kcu::launch_silu_mul(d.as<float>(), d.as<float>() + cols, 2 * cols, out.as<float>(), rows, cols, nullptr,
                         {copy.data(), true});
    const std::vector<float> got = to_host<float>(out, want.size());
    const std::string what = "silu_mul over " + std::to_string(cols) + " columns";
    expect_close(got, want, what);
    expect_bf16_copy(to_host<uint16_t>(copy, want.size()), got, what);
    if (cols % 4 == 0) {  // the same rows at stride 2 cols + 1: the scalar kernel
      std::vector<float> padded(static_cast<size_t>(rows * (2 * cols + 1)), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(gate_up.data() + r * 2 * cols, 2 * cols, padded.data() + r * (2 * cols + 1));
      }
      const auto dp = to_device(padded);
      kcu::DeviceBuffer out2(want.size() * sizeof(float));
      kcu::launch_silu_mul(dp.as<float>(), dp.as<float>() + cols, 2 * cols + 1, out2.as<float>(), rows, cols, nullptr);
      EXPECT_EQ(to_host<float>(out2, want.size()), got)
          << what << ": the float4 kernel's bits are not the scalar one's";
    }
  }
}

// launch_gemv16 over rows 1..kGemv16MaxRows with 1, 2 and 4 output rows per warp, bf16 and f16:
// the f64 sum of the same 16-bit products (bias included) within 1e-5 of the sum of their
// magnitudes, and every output bit for bit the one-row, one-output-per-warp launch of its x row
// (the contract that lets a verify row and a decode row of the same token agree).
void check_gemv16(bool bf16, uint64_t seed) {
  const auto to16 = [bf16](float v) { return bf16 ? float_to_bf16_bits(v) : float_to_fp16_bits(v); };
  const auto from16 = [bf16](uint16_t v) { return bf16 ? bf16_bits_to_float(v) : fp16_bits_to_float(v); };
  // out not a multiple of a block's outputs (4, 8 or 16); in = 129 vectors: every unroll ends in a tail.
  const int64_t in = 1032, out = 37;
  const std::vector<float> wf = random_values(static_cast<size_t>(out * in), seed, 0.05f);
  const std::vector<float> bias = random_values(static_cast<size_t>(out), seed + 1, 1.0f);
  std::vector<uint16_t> w(wf.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = to16(wf[i]);
  const auto dw = to_device(w), db = to_device(bias);
  for (int64_t rows = 1; rows <= kcu::kGemv16MaxRows; ++rows) {
    const std::vector<float> xf = random_values(static_cast<size_t>(rows * in), seed + 2 + rows, 1.0f);
    std::vector<uint16_t> x(xf.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = to16(xf[i]);
    const auto dx = to_device(x);
    ASSERT_TRUE(kcu::gemv16_supports(rows, in, dw.data(), dx.data()));
    // Each x row alone, one output per warp: the bits every other launch must give.
    std::vector<float> single(static_cast<size_t>(rows * out));
    for (int64_t r = 0; r < rows; ++r) {
      kcu::DeviceBuffer dy1(static_cast<size_t>(out) * sizeof(float));
      kcu::launch_gemv16(dw.data(), dx.as<uint16_t>() + r * in, 1, in, out, bf16, db.as<float>(), dy1.as<float>(),
                         nullptr, 1);
      const std::vector<float> y1 = to_host<float>(dy1, static_cast<size_t>(out));
      std::copy(y1.begin(), y1.end(), single.begin() + r * out);
    }
    for (const int outs : {0, 1, 2, 4}) {
      kcu::DeviceBuffer dy(static_cast<size_t>(rows * out) * sizeof(float));
      kcu::launch_gemv16(dw.data(), dx.data(), rows, in, out, bf16, db.as<float>(), dy.as<float>(), nullptr, outs);
      const std::vector<float> y = to_host<float>(dy, static_cast<size_t>(rows * out));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < out; ++o) {
          const size_t at = static_cast<size_t>(r * out + o);
          double want = bias[static_cast<size_t>(o)], magnitude = std::fabs(want);
          for (int64_t i = 0; i < in; ++i) {
            const double p = static_cast<double>(from16(w[static_cast<size_t>(o * in + i)])) *
                             from16(x[static_cast<size_t>(r * in + i)]);
            want += p;
            magnitude += std::fabs(p);
          }
          const std::string where = std::string(bf16 ? "bf16, " : "f16, ") + std::to_string(rows) + " rows, " +
                                    std::to_string(outs) + " outputs per warp, row " + std::to_string(r) + ", output " +
                                    std::to_string(o);
          ASSERT_NEAR(y[at], want, 1e-5 * magnitude) << where;
          uint32_t got_bits = 0, want_bits = 0;
          std::memcpy(&got_bits, &y[at], sizeof(float));
          std::memcpy(&want_bits, &single[at], sizeof(float));
          ASSERT_EQ(got_bits, want_bits) << where << ": not the one-row launch's bits";
        }
      }
    }
  }
}

TEST(CudaOpsTest, Gemv16MatchesTheF64SumOfTheSameProducts) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const kcu::DeviceBuffer probe(64);
  EXPECT_FALSE(kcu::gemv16_supports(1, 1030, probe.data(), probe.data())) << "in % 8 != 0";
  EXPECT_FALSE(kcu::gemv16_supports(kcu::kGemv16MaxRows + 1, 1032, probe.data(), probe.data()));
  EXPECT_THROW(kcu::launch_gemv16(probe.data(), probe.data(), 1, 8, 1, true, nullptr, probe.as<float>(), nullptr, 3),
               Error)
      << "3 outputs per warp";
  check_gemv16(true, 21);
  check_gemv16(false, 121);
}

TEST(CudaOpsTest, Gemv16SwigluIsGemv16ThenSiluMulBitForBit) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t in = 1032, im = 45;  // im not a multiple of the block's warps
  const std::vector<float> wf = random_values(static_cast<size_t>(2 * im * in), 31, 0.05f);
  std::vector<uint16_t> w(wf.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = float_to_bf16_bits(wf[i]);
  const auto dw = to_device(w);
  EXPECT_FALSE(kcu::gemv16_swiglu_supports(kcu::kGemv16SwigluMaxRows + 1, in, dw.data(), dw.data()));
  for (int64_t rows = 1; rows <= kcu::kGemv16SwigluMaxRows; ++rows) {
    const std::vector<float> xf = random_values(static_cast<size_t>(rows * in), 33 + rows, 1.0f);
    std::vector<uint16_t> x(xf.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = float_to_bf16_bits(xf[i]);
    const auto dx = to_device(x);
    const size_t n = static_cast<size_t>(rows * im);
    // Unfused: the [rows, 2 im] product, then SwiGLU over its halves with the 16-bit copy.
    kcu::DeviceBuffer gate_up(2 * n * sizeof(float)), want(n * sizeof(float)), want16(n * sizeof(uint16_t));
    kcu::launch_gemv16(dw.data(), dx.data(), rows, in, 2 * im, true, nullptr, gate_up.as<float>(), nullptr);
    kcu::launch_silu_mul(gate_up.as<float>(), gate_up.as<float>() + im, 2 * im, want.as<float>(), rows, im, nullptr,
                         {want16.data(), true});
    kcu::DeviceBuffer got(n * sizeof(float)), got16(n * sizeof(uint16_t));
    ASSERT_TRUE(kcu::gemv16_swiglu_supports(rows, in, dw.data(), dx.data()));
    kcu::launch_gemv16_swiglu(dw.data(), dx.data(), rows, in, im, true, got.as<float>(), got16.data(), true, nullptr);
    const std::vector<float> a = to_host<float>(got, n), b = to_host<float>(want, n);
    const std::vector<uint16_t> a16 = to_host<uint16_t>(got16, n), b16 = to_host<uint16_t>(want16, n);
    for (size_t e = 0; e < n; ++e) {
      ASSERT_EQ(a[e], b[e]) << rows << " rows, element " << e;
      ASSERT_EQ(a16[e], b16[e]) << rows << " rows, element " << e;
    }
    for (int64_t r = 0; r < rows; ++r) {  // and what it computes, against f64 sums
      for (int64_t j = 0; j < im; ++j) {
        double g = 0, u = 0, magnitude = 0;
        for (int64_t i = 0; i < in; ++i) {
          const double xi = bf16_bits_to_float(x[static_cast<size_t>(r * in + i)]);
          const double pg = bf16_bits_to_float(w[static_cast<size_t>(j * in + i)]) * xi;
          const double pu = bf16_bits_to_float(w[static_cast<size_t>((im + j) * in + i)]) * xi;
          g += pg;
          u += pu;
          magnitude += std::fabs(pg) + std::fabs(pu);
        }
        const double swiglu = g / (1.0 + std::exp(-g)) * u;
        ASSERT_NEAR(a[static_cast<size_t>(r * im + j)], swiglu, 1e-5 * magnitude * (1.0 + std::fabs(u) + std::fabs(g)))
            << rows << " rows, row " << r << ", output " << j;
      }
    }
  }
}

TEST(CudaOpsTest, SplitQkvRopeWritesItsKAndVIntoThePagesAsTheKvWriteDoes) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int tokens = 3, heads = 4, kv_heads = 2, d = 64;
  const int64_t width = (heads + 2 * kv_heads) * d, kv_cols = kv_heads * d, num_slots = 8;
  const std::vector<float> qkv = random_values(static_cast<size_t>(tokens * width), 41, 1.0f);
  const std::vector<int64_t> positions = {7, 8, 30};
  const std::vector<int64_t> slots = {5, -1, 2};  // the second token is a padding row
  std::vector<float> inv_freq(d / 2);
  for (int i = 0; i < d / 2; ++i) inv_freq[static_cast<size_t>(i)] = std::pow(10000.0f, -2.0f * i / d);
  const auto dqkv = to_device(qkv), dpos = to_device(positions), dslots = to_device(slots), dfreq = to_device(inv_freq);
  for (const auto type : {kcu::KvPagesOut::kBF16, kcu::KvPagesOut::kF16, kcu::KvPagesOut::kF32}) {
    const size_t elem = type == kcu::KvPagesOut::kF32 ? 4 : 2;
    kcu::DeviceBuffer q(tokens * heads * d * sizeof(float)), k(tokens * kv_cols * sizeof(float)),
        v(tokens * kv_cols * sizeof(float)), q2(q.size()), k2(k.size()), v2(v.size());
    const std::vector<uint8_t> sentinel(static_cast<size_t>(num_slots * kv_cols) * elem, 0xab);
    auto kp = to_device(sentinel), vp = to_device(sentinel);
    // Positions past the (empty) table are computed from inv_freq, as RopeTable does.
    kcu::launch_split_qkv_norm_rope(dqkv.as<float>(), q.as<float>(), k.as<float>(), v.as<float>(), tokens, heads,
                                    kv_heads, d, nullptr, nullptr, kcu::WeightType::kF32, kEps, dpos.as<int64_t>(),
                                    nullptr, 0, dfreq.as<float>(), nullptr,
                                    {kp.data(), vp.data(), type, dslots.as<int64_t>()});
    kcu::launch_split_qkv_norm_rope(dqkv.as<float>(), q2.as<float>(), k2.as<float>(), v2.as<float>(), tokens, heads,
                                    kv_heads, d, nullptr, nullptr, kcu::WeightType::kF32, kEps, dpos.as<int64_t>(),
                                    nullptr, 0, dfreq.as<float>(), nullptr);
    const size_t kv_n = static_cast<size_t>(tokens * kv_cols);
    EXPECT_EQ(to_host<float>(q, static_cast<size_t>(tokens * heads * d)),
              to_host<float>(q2, static_cast<size_t>(tokens * heads * d)));
    const std::vector<float> kh = to_host<float>(k, kv_n), vh = to_host<float>(v, kv_n);
    EXPECT_EQ(kh, to_host<float>(k2, kv_n));
    EXPECT_EQ(vh, to_host<float>(v2, kv_n));
    const std::vector<uint8_t> kpages = to_host<uint8_t>(kp, sentinel.size()),
                               vpages = to_host<uint8_t>(vp, sentinel.size());
    for (int64_t slot = 0; slot < num_slots; ++slot) {
      int token = -1;
      for (int t = 0; t < tokens; ++t)
        if (slots[static_cast<size_t>(t)] == slot) token = t;
      for (int64_t e = 0; e < kv_cols; ++e) {
        for (int which = 0; which < 2; ++which) {
          const std::vector<uint8_t>& pages = which == 0 ? kpages : vpages;
          const uint8_t* at = pages.data() + static_cast<size_t>(slot * kv_cols + e) * elem;
          std::vector<uint8_t> want(elem, 0xab);
          if (token >= 0) {
            const float x = (which == 0 ? kh : vh)[static_cast<size_t>(token * kv_cols + e)];
            if (type == kcu::KvPagesOut::kBF16) {
              const uint16_t b = float_to_bf16_bits(x);
              std::memcpy(want.data(), &b, 2);
            } else if (type == kcu::KvPagesOut::kF16) {
              const uint16_t h = float_to_fp16_bits(x);
              std::memcpy(want.data(), &h, 2);
            } else {
              std::memcpy(want.data(), &x, 4);
            }
          }
          ASSERT_EQ(std::vector<uint8_t>(at, at + elem), want)
              << "type " << type << (which == 0 ? " k" : " v") << " slot " << slot << " element " << e;
        }
      }
    }
  }
}

// launch_gemv16_qkv_rope must give the bits of launch_gemv16 then launch_split_qkv_norm_rope (the
// served decode step takes the first, prefill and the CPU the second): q, k, v and both pages,
// for 1 and 2 tokens, bf16 and f16 weights, with and without a bias, each KV type, a position
// inside the RoPE table and one past it, and a padding row (slot -1) that writes no page.
TEST(CudaOpsTest, Gemv16QkvRopeIsGemv16ThenTheSplitBitForBit) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int heads = 4, kv_heads = 2, d = 64;
  const int64_t in = 1032, width = (heads + 2 * kv_heads) * d, kv_cols = kv_heads * d, num_slots = 12;
  const int64_t table_positions = 16;
  std::vector<float> inv_freq(d / 2), table(static_cast<size_t>(table_positions * d));
  for (int i = 0; i < d / 2; ++i) inv_freq[static_cast<size_t>(i)] = std::pow(10000.0f, -2.0f * i / d);
  for (int64_t p = 0; p < table_positions; ++p) {
    for (int i = 0; i < d / 2; ++i) {
      const double angle = static_cast<double>(inv_freq[static_cast<size_t>(i)] * static_cast<float>(p));
      table[static_cast<size_t>(p * d + i)] = static_cast<float>(std::cos(angle));
      table[static_cast<size_t>(p * d + d / 2 + i)] = static_cast<float>(std::sin(angle));
    }
  }
  // One per token up to kGemv16QkvRopeMaxRows: in the table, past it; slots written and not (-1).
  const std::vector<int64_t> positions = {7, 30, 0, 15, 16, 3, 100, 9};
  const std::vector<int64_t> slots = {4, -1, 0, 7, 11, -1, 2, 9};
  ASSERT_GE(static_cast<int64_t>(positions.size()), kcu::kGemv16QkvRopeMaxRows);
  const std::vector<float> bias = random_values(static_cast<size_t>(width), 52, 0.5f);
  const auto dpos = to_device(positions), dslots = to_device(slots), dfreq = to_device(inv_freq),
             dtable = to_device(table), dbias = to_device(bias);
  for (const bool bf16 : {true, false}) {
    const std::vector<float> wf = random_values(static_cast<size_t>(width * in), 51, 0.05f);
    std::vector<uint16_t> w(wf.size());
    for (size_t i = 0; i < w.size(); ++i) w[i] = bf16 ? float_to_bf16_bits(wf[i]) : float_to_fp16_bits(wf[i]);
    const auto dw = to_device(w);
    for (int64_t rows = 1; rows <= kcu::kGemv16QkvRopeMaxRows; ++rows) {
      const std::vector<float> xf = random_values(static_cast<size_t>(rows * in), 53 + rows, 1.0f);
      std::vector<uint16_t> x(xf.size());
      for (size_t i = 0; i < x.size(); ++i) x[i] = bf16 ? float_to_bf16_bits(xf[i]) : float_to_fp16_bits(xf[i]);
      const auto dx = to_device(x);
      for (const bool with_bias : {false, true}) {
        for (const auto type : {kcu::KvPagesOut::kBF16, kcu::KvPagesOut::kF16, kcu::KvPagesOut::kF32}) {
          const size_t elem = type == kcu::KvPagesOut::kF32 ? 4 : 2;
          const std::vector<uint8_t> sentinel(static_cast<size_t>(num_slots * kv_cols) * elem, 0xab);
          const size_t qn = static_cast<size_t>(rows * heads * d), kn = static_cast<size_t>(rows * kv_cols);
          // Two launches.
          kcu::DeviceBuffer qkv(static_cast<size_t>(rows * width) * sizeof(float)), q1(qn * 4), k1(kn * 4), v1(kn * 4);
          auto kp1 = to_device(sentinel), vp1 = to_device(sentinel);
          const float* b = with_bias ? dbias.as<float>() : nullptr;
          kcu::launch_gemv16(dw.data(), dx.data(), rows, in, width, bf16, b, qkv.as<float>(), nullptr);
          kcu::launch_split_qkv_norm_rope(qkv.as<float>(), q1.as<float>(), k1.as<float>(), v1.as<float>(), rows, heads,
                                          kv_heads, d, nullptr, nullptr, kcu::WeightType::kF32, kEps,
                                          dpos.as<int64_t>(), dtable.as<float>(), table_positions, dfreq.as<float>(),
                                          nullptr, {kp1.data(), vp1.data(), type, dslots.as<int64_t>()});
          // One.
          kcu::DeviceBuffer q2(qn * 4), k2(kn * 4), v2(kn * 4);
          auto kp2 = to_device(sentinel), vp2 = to_device(sentinel);
          kcu::QkvRopeParams p;
          p.q = q2.as<float>();
          p.k = k2.as<float>();
          p.v = v2.as<float>();
          p.num_heads = heads;
          p.num_kv_heads = kv_heads;
          p.head_dim = d;
          p.positions = dpos.as<int64_t>();
          p.table = dtable.as<float>();
          p.table_positions = table_positions;
          p.inv_freq = dfreq.as<float>();
          p.kv = {kp2.data(), vp2.data(), type, dslots.as<int64_t>()};
          ASSERT_TRUE(kcu::gemv16_qkv_rope_supports(rows, in, dw.data(), dx.data(), d));
          kcu::launch_gemv16_qkv_rope(dw.data(), dx.data(), rows, in, bf16, b, p, nullptr);
          const std::string what = std::string(bf16 ? "bf16" : "f16") + ", " + std::to_string(rows) + " rows" +
                                   (with_bias ? ", bias" : "") + ", kv type " + std::to_string(type);
          const auto bits = [](const kcu::DeviceBuffer& buf, size_t bytes) { return to_host<uint8_t>(buf, bytes); };
          EXPECT_EQ(bits(q2, qn * 4), bits(q1, qn * 4)) << what << ": q";
          EXPECT_EQ(bits(k2, kn * 4), bits(k1, kn * 4)) << what << ": k";
          EXPECT_EQ(bits(v2, kn * 4), bits(v1, kn * 4)) << what << ": v";
          EXPECT_EQ(bits(kp2, sentinel.size()), bits(kp1, sentinel.size())) << what << ": k pages";
          EXPECT_EQ(bits(vp2, sentinel.size()), bits(vp1, sentinel.size())) << what << ": v pages";
          EXPECT_NE(bits(kp2, sentinel.size()), sentinel) << what << ": no k page written";
        }
      }
    }
  }
  EXPECT_FALSE(kcu::gemv16_qkv_rope_supports(kcu::kGemv16QkvRopeMaxRows + 1, in, nullptr, nullptr, d));
}

}  // namespace
}  // namespace spindle
