// launch_gemv_fp8 (kernels/cuda/gemv_fp8.h) against a float64 product over the weights decoded by
// the E4M3 definition (tests/support/fp8_reference.h) times their scales, and x as its bf16 values:
// for every scale mode (per tensor, per channel, 128x128 blocks with partial edge blocks), rows
// 1..8, with and without bias. Tolerance: 1e-5 of sum_i |x_i w_i| per output (f32 sums of ~1000-4000
// exact products in another order; the scale applied once, or per 16 weights for blocks). Also:
// each row of a multi-row launch equals the one-row launch's bits, and unsupported shapes throw.
//
// launch_gemv_fp8_mma (the tensor-core product of 1..32 rows) against the same float64 product:
// rows 1, 4, 5, 8, 9, 16, 17, 24, 31, 32, every scale mode, input widths with a partial last 128-column
// unit (336 = 2 x 128 + 80, 1040 = 8 x 128 + 16) and the 8B shapes' 4096 and 14336, output counts
// that are not multiples of 16 or 64 (200, 257: clamped rows in the last warp), with the automatic
// input splits and forced ones (1, 2, 3, the most), every weight load (Fp8MmaLoad). Tolerance:
// (in / 16 + 64) 2^-23 of sum |x w| (each bf16 x e4m3 product is exact in f32; an mma adds 16 of them to its f32 accumulator, at most
// in / 16 such additions per output, each within 2^-23 of the running sum even where the tensor
// cores truncate; the split sums, block scales and the final scale add a few more: 64). Also: a
// repeated launch gives the same bits (the split sums are added in a fixed order), all-subnormal
// weights are not flushed to zero, and unsupported shapes throw.
// Skips when no CUDA device with cc >= 8.0 is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_skip.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemv_fp8.h"
#include "support/fp8_reference.h"
#include "util/error.h"
#include "util/half.h"

namespace spindle {
namespace {

namespace kcu = kernels::cuda;
using testing::e4m3_definition;

constexpr double kRelTolerance = 1e-5;

template <typename T>
kcu::DeviceBuffer to_device(const std::vector<T>& host) {
  kcu::DeviceBuffer b(host.size() * sizeof(T));
  kcu::copy_to_device(b.data(), host.data(), host.size() * sizeof(T));
  return b;
}

std::vector<float> to_host_floats(const kcu::DeviceBuffer& b, size_t n) {
  std::vector<float> host(n);
  kcu::copy_to_host(host.data(), b.data(), n * sizeof(float));
  return host;
}

struct Problem {
  int64_t out = 0, in = 0, rows = 0;
  kcu::Fp8Scale mode = kcu::Fp8Scale::kPerTensor;
  std::vector<uint8_t> w;       // [out, in] e4m3 codes, no NaN
  std::vector<float> scale;     // fp8_scale_count floats
  std::vector<uint16_t> x;      // [rows, in] bf16
  std::vector<float> bias;      // [out]
};

Problem make_problem(int64_t out, int64_t in, int64_t rows, kcu::Fp8Scale mode, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Problem p{out, in, rows, mode, {}, {}, {}, {}};
  std::uniform_int_distribution<int> code(0, 255);
  p.w.resize(static_cast<size_t>(out * in));
  for (auto& c : p.w) {
    int v = code(rng);
    while ((v & 0x7F) == 0x7F) v = code(rng);  // NaN codes are not weights
    c = static_cast<uint8_t>(v);
  }
  std::uniform_real_distribution<float> scale(1e-3f, 4e-3f);
  p.scale.resize(static_cast<size_t>(kcu::fp8_scale_count(mode, out, in)));
  for (float& s : p.scale) s = scale(rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.x.resize(static_cast<size_t>(rows * in));
  for (auto& v : p.x) v = float_to_bf16_bits(normal(rng));
  p.bias.resize(static_cast<size_t>(out));
  for (float& b : p.bias) b = 0.1f * normal(rng);
  return p;
}

double scale_of(const Problem& p, int64_t o, int64_t i) {
  switch (p.mode) {
    case kcu::Fp8Scale::kPerTensor:
      return p.scale[0];
    case kcu::Fp8Scale::kPerChannel:
      return p.scale[static_cast<size_t>(o)];
    case kcu::Fp8Scale::kBlock128: {
      const int64_t blocks_per_row = (p.in + 127) / 128;
      return p.scale[static_cast<size_t>((o / 128) * blocks_per_row + i / 128)];
    }
  }
  return 0;
}

// y [rows, out] in float64 and, per output, sum |x w| for the tolerance.
void reference(const Problem& p, bool with_bias, std::vector<double>& y, std::vector<double>& magnitude) {
  y.assign(static_cast<size_t>(p.rows * p.out), 0.0);
  magnitude.assign(y.size(), 0.0);
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t o = 0; o < p.out; ++o) {
      double sum = 0, mag = 0;
      for (int64_t i = 0; i < p.in; ++i) {
        const double w = e4m3_definition(p.w[static_cast<size_t>(o * p.in + i)]) * scale_of(p, o, i);
        const double x = bf16_bits_to_float(p.x[static_cast<size_t>(r * p.in + i)]);
        sum += w * x;
        mag += std::fabs(w * x);
      }
      const size_t at = static_cast<size_t>(r * p.out + o);
      y[at] = sum + (with_bias ? p.bias[static_cast<size_t>(o)] : 0.0);
      magnitude[at] = mag;
    }
  }
}

std::string mode_name(kcu::Fp8Scale mode) {
  switch (mode) {
    case kcu::Fp8Scale::kPerTensor:
      return "per-tensor";
    case kcu::Fp8Scale::kPerChannel:
      return "per-channel";
    case kcu::Fp8Scale::kBlock128:
      return "block128";
  }
  return "?";
}

void check(int64_t out, int64_t in, kcu::Fp8Scale mode, bool with_bias, uint64_t seed) {
  const int64_t max_rows = kcu::kGemvFp8MaxRows;
  const Problem p = make_problem(out, in, max_rows, mode, seed);
  std::vector<double> want, magnitude;
  reference(p, with_bias, want, magnitude);
  auto dw = to_device(p.w);
  auto ds = to_device(p.scale);
  auto dx = to_device(p.x);
  auto db = to_device(p.bias);
  const float* bias = with_bias ? db.as<float>() : nullptr;
  kcu::DeviceBuffer dy(static_cast<size_t>(max_rows * out) * sizeof(float));
  kcu::DeviceBuffer dy1(static_cast<size_t>(out) * sizeof(float));
  const std::string what = mode_name(mode) + " " + std::to_string(out) + "x" + std::to_string(in) +
                           (with_bias ? " +bias" : "");
  double worst = 0;
  for (int64_t rows = 1; rows <= max_rows; ++rows) {
    kcu::launch_gemv_fp8(dw.as<uint8_t>(), ds.as<float>(), mode, dx.as<uint16_t>(), rows, in, out, bias,
                         dy.as<float>(), nullptr);
    const std::vector<float> got = to_host_floats(dy, static_cast<size_t>(rows * out));
    for (int64_t r = 0; r < rows; ++r) {
      kcu::launch_gemv_fp8(dw.as<uint8_t>(), ds.as<float>(), mode, dx.as<uint16_t>() + r * in, 1, in, out, bias,
                           dy1.as<float>(), nullptr);
      const std::vector<float> one = to_host_floats(dy1, static_cast<size_t>(out));
      for (int64_t o = 0; o < out; ++o) {
        const size_t at = static_cast<size_t>(r * out + o);
        const double err = std::fabs(got[at] - want[at]) / std::max(magnitude[at], 1e-30);
        worst = std::max(worst, err);
        ASSERT_LE(err, kRelTolerance) << what << " rows " << rows << " y[" << r << ", " << o << "] = " << got[at]
                                      << ", float64 " << want[at];
        ASSERT_EQ(got[at], one[static_cast<size_t>(o)]) << what << ": row " << r << " of a " << rows
                                                        << "-row launch differs from the one-row launch";
      }
    }
  }
  std::printf("[ gemv_fp8 ] %s: max error %.2e of sum |x w| (tolerance %.0e)\n", what.c_str(), worst, kRelTolerance);
}

TEST(CudaGemvFp8Test, PerTensorScaleMatchesTheFloat64Product) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check(300, 1024, kcu::Fp8Scale::kPerTensor, false, 1);
  check(300, 1024, kcu::Fp8Scale::kPerTensor, true, 2);
}

TEST(CudaGemvFp8Test, PerChannelScaleMatchesTheFloat64Product) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check(257, 2048, kcu::Fp8Scale::kPerChannel, true, 3);
}

// 200 x 336: the last block row holds 72 rows and the last block column 80 columns.
TEST(CudaGemvFp8Test, BlockScalesMatchTheFloat64ProductWithPartialEdgeBlocks) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check(200, 336, kcu::Fp8Scale::kBlock128, true, 4);
  check(384, 4096, kcu::Fp8Scale::kBlock128, false, 5);
}

// ---- launch_gemv_fp8_mma -----------------------------------------------------------------------

double mma_tolerance(int64_t in) { return std::max(1e-5, (double(in) / 16 + 64) * 0x1p-23); }

struct MmaWorkspace {
  kcu::DeviceBuffer buffer;
  kcu::Fp8MmaWorkspace view;
  explicit MmaWorkspace(int64_t max_out) : buffer(static_cast<size_t>(kcu::fp8_mma_workspace_bytes(max_out))) {
    view = kcu::fp8_mma_workspace_init(buffer.data(), static_cast<int64_t>(buffer.size()), max_out);
  }
};

// Every weight load of launch_gemv_fp8_mma (kBlockStages, kBlockPairs: 128-output blocks, x in
// shared memory; 200 and 257 outputs leave whole warps / m-tiles past `out` there).
constexpr kcu::Fp8MmaLoad kMmaLoads[] = {kcu::Fp8MmaLoad::kLanePieces, kcu::Fp8MmaLoad::kRowSpans,
                                         kcu::Fp8MmaLoad::kBlockStages, kcu::Fp8MmaLoad::kBlockPairs};

// Every row count of kMmaRows (at most p.rows) with `splits` (0: automatic), each output of each
// row against the float64 product; returns the worst |y - ref| / sum |x w|.
constexpr int64_t kMmaRows[] = {1, 4, 5, 8, 9, 16, 17, 24, 31, 32};

double check_mma(const Problem& p, bool with_bias, int64_t splits, kcu::Fp8MmaLoad load,
                 const kcu::Fp8MmaWorkspace& ws, const std::vector<double>& want,
                 const std::vector<double>& magnitude) {
  auto dw = to_device(p.w);
  auto ds = to_device(p.scale);
  auto dx = to_device(p.x);
  auto db = to_device(p.bias);
  const float* bias = with_bias ? db.as<float>() : nullptr;
  kcu::DeviceBuffer dy(static_cast<size_t>(p.rows * p.out) * sizeof(float));
  const std::string what = mode_name(p.mode) + " " + std::to_string(p.out) + "x" + std::to_string(p.in) +
                           (with_bias ? " +bias" : "") + " splits " + std::to_string(splits) +
                           (load == kcu::Fp8MmaLoad::kRowSpans     ? " row spans"
                            : load == kcu::Fp8MmaLoad::kBlockStages ? " block stages"
                            : load == kcu::Fp8MmaLoad::kBlockPairs  ? " block pairs"
                                                                    : " lane pieces");
  const double tolerance = mma_tolerance(p.in);
  double worst = 0;
  for (const int64_t rows : kMmaRows) {
    if (rows > p.rows) break;
    kcu::fill_zero(dy.data(), dy.size());
    kcu::launch_gemv_fp8_mma(dw.as<uint8_t>(), ds.as<float>(), p.mode, dx.as<uint16_t>(),
                             rows, p.in, p.out, bias, dy.as<float>(), ws, nullptr, splits, load);
    const std::vector<float> got = to_host_floats(dy, static_cast<size_t>(rows * p.out));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < p.out; ++o) {
        const size_t at = static_cast<size_t>(r * p.out + o);
        const double err = std::fabs(got[at] - want[at]) / std::max(magnitude[at], 1e-30);
        worst = std::max(worst, std::isnan(err) ? INFINITY : err);
        if (!(err <= tolerance)) {
          ADD_FAILURE() << what << " rows " << rows << " y[" << r << ", " << o << "] = " << got[at] << ", float64 "
                        << want[at] << " (error " << err << " of sum |x w|, tolerance " << tolerance << ")";
          return worst;
        }
      }
    }
    if (rows == p.rows) {  // the same launch again: the same bits
      kcu::launch_gemv_fp8_mma(dw.as<uint8_t>(), ds.as<float>(), p.mode, dx.as<uint16_t>(), rows, p.in, p.out, bias,
                               dy.as<float>(), ws, nullptr, splits, load);
      const std::vector<float> again = to_host_floats(dy, static_cast<size_t>(rows * p.out));
      for (size_t i = 0; i < got.size(); ++i) {
        if (again[i] != got[i]) {
          ADD_FAILURE() << what << ": a repeated launch gave other bits at " << i;
          break;
        }
      }
    }
  }
  std::printf("[ gemv_fp8_mma ] %s: max error %.2e of sum |x w| (tolerance %.2e)\n", what.c_str(), worst, tolerance);
  return worst;
}

void check_mma_shape(int64_t out, int64_t in, kcu::Fp8Scale mode, bool with_bias, uint64_t seed,
                     std::initializer_list<int64_t> splits) {
  const Problem p = make_problem(out, in, kcu::kGemvFp8MmaMaxRows, mode, seed);
  std::vector<double> want, magnitude;
  reference(p, with_bias, want, magnitude);
  const MmaWorkspace ws(out);
  for (const kcu::Fp8MmaLoad load : kMmaLoads) {
    for (const int64_t s : splits) check_mma(p, with_bias, s, load, ws.view, want, magnitude);
  }
}

TEST(CudaGemvFp8MmaTest, PerTensorScaleMatchesTheFloat64Product) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_mma_shape(200, 336, kcu::Fp8Scale::kPerTensor, false, 11, {0, 1, 2, 3});
  check_mma_shape(300, 1040, kcu::Fp8Scale::kPerTensor, true, 12, {0, 1, 9});
}

TEST(CudaGemvFp8MmaTest, PerChannelScaleMatchesTheFloat64Product) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_mma_shape(257, 2048, kcu::Fp8Scale::kPerChannel, true, 13, {0, 1, 16});
  check_mma_shape(64, 14336, kcu::Fp8Scale::kPerChannel, false, 14, {0, 1, 112});  // down's width
}

// 200 x 336: the last block row holds 72 rows and the last block column 80 columns.
TEST(CudaGemvFp8MmaTest, BlockScalesMatchTheFloat64ProductWithPartialEdgeBlocks) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_mma_shape(200, 336, kcu::Fp8Scale::kBlock128, true, 15, {0, 1, 2, 3});
  check_mma_shape(384, 4096, kcu::Fp8Scale::kBlock128, false, 16, {0, 1, 5, 32});
  check_mma_shape(136, 1040, kcu::Fp8Scale::kBlock128, true, 17, {0, 3});
}

// The e4m3 subnormals (exponent field 0: m / 8 * 2^-6) land on bf16 subnormals before the 2^120
// multiply: a flush to zero there would make every output 0 (error 1 of sum |x w|).
TEST(CudaGemvFp8MmaTest, SubnormalWeightsAreNotFlushed) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Problem p = make_problem(64, 256, 16, kcu::Fp8Scale::kPerTensor, 18);
  std::mt19937 rng(18);
  std::uniform_int_distribution<int> m(1, 7), sign(0, 1);
  for (auto& c : p.w) c = static_cast<uint8_t>(m(rng) | (sign(rng) << 7));
  p.scale[0] = 1.0f;
  std::vector<double> want, magnitude;
  reference(p, false, want, magnitude);
  const MmaWorkspace ws(p.out);
  for (const kcu::Fp8MmaLoad load : kMmaLoads) {
    EXPECT_LE(check_mma(p, false, 0, load, ws.view, want, magnitude), mma_tolerance(p.in));
  }
}

// Without a workspace the product runs unsplit, with the same result.
TEST(CudaGemvFp8MmaTest, NoWorkspaceRunsUnsplit) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Problem p = make_problem(128, 1024, 9, kcu::Fp8Scale::kPerChannel, 19);
  std::vector<double> want, magnitude;
  reference(p, true, want, magnitude);
  for (const kcu::Fp8MmaLoad load : kMmaLoads) {
    EXPECT_LE(check_mma(p, true, 4, load, kcu::Fp8MmaWorkspace{}, want, magnitude), mma_tolerance(p.in));
  }
}

TEST(CudaGemvFp8MmaTest, SplitsKeepTheGridInOneWave) {
  // 8B shapes at 32 rows where the device holds 528 blocks (132 SMs x 4): o 4096 outputs = 64
  // groups of 64 -> 8 splits (512 blocks, and 4096 / (16 x 32) = 8); down (in 14336) 8; q 4096 x
  // 4096 8; gate / up 14336 x 4096 = 224 groups -> 2; k / v 1024 x 4096: 16 groups would take 33,
  // the partial sums' cap 8; a joined gate_up 28672 = 448 groups -> 1. At 9 rows the cap is 28.
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(32, 4096, 4096, 528), 8);
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(32, 4096, 14336, 528), 8);
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(32, 14336, 4096, 528), 2);
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(32, 1024, 4096, 528), 8);
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(9, 1024, 4096, 528), 28);
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(32, 28672, 4096, 528), 1);
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(1, 64, 256, 528), 2);     // the 128-column units
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(1, 64, 1 << 20, 528), 64);  // the most
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(32, 64, 256, 528), 1);    // the cap (256 / 512 = 0)
  // kBlockStages: 128-output groups, 264 blocks resident (132 SMs x 2). o: 32 groups -> 8 (the
  // cap); q/k/v joined 6144: 48 groups -> 5; gate/up joined 28672: 224 groups -> 1; down 8; at 4
  // rows q/k/v 5 and o (cap 64) 8 = 264 / 32.
  const auto block = kcu::Fp8MmaLoad::kBlockStages;
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(32, 4096, 4096, 264, block), 8);
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(32, 6144, 4096, 264, block), 5);
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(32, 28672, 4096, 264, block), 1);
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(32, 4096, 14336, 264, block), 8);
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(4, 6144, 4096, 264, block), 5);
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(4, 4096, 4096, 264, block), 8);
  EXPECT_EQ(kcu::gemv_fp8_mma_splits(32, 6144, 4096, 264, kcu::Fp8MmaLoad::kBlockPairs), 5);
}

TEST(CudaGemvFp8MmaTest, UnsupportedShapesThrow) {
  SKIP_WITHOUT_CUDA_DEVICE();
  kcu::DeviceBuffer probe(1 << 16);
  EXPECT_TRUE(kcu::gemv_fp8_mma_supports(32, 1024, probe.data(), probe.data()));
  EXPECT_FALSE(kcu::gemv_fp8_mma_supports(33, 1024, probe.data(), probe.data())) << "more than 32 rows";
  EXPECT_FALSE(kcu::gemv_fp8_mma_supports(0, 1024, probe.data(), probe.data())) << "no rows";
  EXPECT_FALSE(kcu::gemv_fp8_mma_supports(9, 1000, probe.data(), probe.data())) << "in % 16 != 0";
  EXPECT_FALSE(kcu::gemv_fp8_mma_supports(9, 1024, probe.data(), probe.as<uint8_t>() + 2)) << "misaligned x";
  EXPECT_THROW(kcu::launch_gemv_fp8_mma(probe.as<uint8_t>(), nullptr, kcu::Fp8Scale::kPerTensor, probe.as<uint16_t>(),
                                        9, 1024, 4, nullptr, probe.as<float>(), kcu::Fp8MmaWorkspace{}, nullptr),
               Error) << "no scale";
  EXPECT_THROW(kcu::launch_gemv_fp8_mma(probe.as<uint8_t>(), probe.as<float>(), kcu::Fp8Scale::kPerTensor,
                                        probe.as<uint16_t>(), 33, 1024, 4, nullptr, probe.as<float>(),
                                        kcu::Fp8MmaWorkspace{}, nullptr),
               Error);
}

TEST(CudaGemvFp8Test, UnsupportedShapesThrow) {
  SKIP_WITHOUT_CUDA_DEVICE();
  kcu::DeviceBuffer probe(1 << 16);
  EXPECT_FALSE(kcu::gemv_fp8_supports(1, 1000, probe.data(), probe.data())) << "in % 16 != 0";
  EXPECT_FALSE(kcu::gemv_fp8_supports(9, 1024, probe.data(), probe.data())) << "more than 8 rows";
  EXPECT_FALSE(kcu::gemv_fp8_supports(1, 1024, probe.as<uint8_t>() + 1, probe.data())) << "misaligned W";
  EXPECT_THROW(kcu::launch_gemv_fp8(probe.as<uint8_t>(), probe.as<float>(), kcu::Fp8Scale::kPerTensor,
                                    probe.as<uint16_t>(), 1, 1000, 4, nullptr, probe.as<float>(), nullptr),
               Error);
}

}  // namespace
}  // namespace spindle
