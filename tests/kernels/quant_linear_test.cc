// Quantized linear kernels (kernels/cpu/quant_linear.h) against float64 references.
//
// Weights: random GGUF blocks of each type, dequantized element by element by the float64
// reference written from the format's definition (tests/gguf/ggml_reference.h), never by the
// kernels' repack. Activations: random f32 rows (normal, with outliers and all-zero blocks).
//
// 1. Same quantized activations: ref = sum_k w[n, k] * (dx_b * q[i, k]) in float64 over the
//    activations exactly as quantize_activations() rounded them. The kernels' integer dots are
//    exact; each block adds one or two f32 terms (scale * dx rounded, the FMA rounded; Q4_K/Q5_K a
//    min term too) to a running f32 sum of num_blocks = k / 32 terms, so by the recursive-summation
//    bound |y - ref| <= (num_blocks + 2) * u * T with u = 2^-24 and T the sum of the terms'
//    magnitudes. T <= 4 * A with A = sum_k |w[n, k] * xq[i, k]| for these random blocks (scale and
//    min parts are each at most ~the element's magnitude; 4 is a margin for their cancellation), so
//    the test checks  |y - ref| <= 4 * (num_blocks + 2) * 2^-24 * A.  Measured worst ratio is
//    printed (a wrong nibble, scale or offset is O(A), many orders above; CorruptedWeightFails
//    shows one flipped bit failing).
// 2. End to end, against the unquantized activations over the dequantized weights: rounding x to
//    q * dx moves each element by at most dx / 2, so |y - ref_f32x| <= sum_b (dx_b / 2) *
//    sum_{k in b} |w[n, k]| + the bound of 1. The measured relative error (|y - ref| / A) is
//    printed: typically ~2e-3 of A, the int8 activation rounding.
// Shapes: m in {1, 3, 17, 65, 67} (tiles of 1-4 rows, the one-row paths, the 16-row AMX tile, a
// 64-row chunk plus 1 or 3);
// n in {1, 15, 16, 33} (not multiples of the 16-row interleave); k in {256, 512, 2048}.
// Kernels whose ISA this CPU lacks (or the OS does not enable) are skipped with the reason.
#include "kernels/cpu/quant_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gguf/ggml_reference.h"
#include "platform/cpu_info.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {
namespace {

namespace ref = gguf::reference;

gguf::GgmlType ggml_type(QuantType type) {
  switch (type) {
    case QuantType::kQ8_0: return gguf::GgmlType::kQ8_0;
    case QuantType::kQ4_0: return gguf::GgmlType::kQ4_0;
    case QuantType::kQ5_0: return gguf::GgmlType::kQ5_0;
    case QuantType::kQ5_1: return gguf::GgmlType::kQ5_1;
    case QuantType::kQ4_K: return gguf::GgmlType::kQ4_K;
    case QuantType::kQ5_K: return gguf::GgmlType::kQ5_K;
    case QuantType::kQ6_K: return gguf::GgmlType::kQ6_K;
  }
  return gguf::GgmlType::kF32;
}

// fp16 bits of a random value in [2^-7, 2^-1) (sign random when `signed_value`).
void random_fp16(uint8_t* p, std::mt19937& rng, bool signed_value) {
  const unsigned exponent = 8 + rng() % 7, fraction = rng() % 1024;
  const unsigned sign = signed_value ? (rng() & 1) : 0;
  const unsigned bits = sign << 15 | exponent << 10 | fraction;
  p[0] = static_cast<uint8_t>(bits & 255);
  p[1] = static_cast<uint8_t>(bits >> 8);
}

// n rows of k / block elements random blocks: uniform quant and scale bytes, fp16 fields finite.
std::vector<uint8_t> random_weight(QuantType type, int64_t n, int64_t k, std::mt19937& rng) {
  const int64_t bb = quant_file_block_bytes(type), blocks = n * k / quant_file_block_elements(type);
  std::vector<uint8_t> data(static_cast<size_t>(blocks * bb));
  for (auto& byte : data) byte = static_cast<uint8_t>(rng());
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* block = data.data() + b * bb;
    switch (type) {
      case QuantType::kQ8_0:
      case QuantType::kQ4_0:
      case QuantType::kQ5_0: random_fp16(block, rng, true); break;
      case QuantType::kQ5_1:  // d and m (m of either sign: the min is added)
        random_fp16(block, rng, true);
        random_fp16(block + 2, rng, true);
        break;
      case QuantType::kQ4_K:
      case QuantType::kQ5_K:
        random_fp16(block, rng, false);
        random_fp16(block + 2, rng, false);
        break;
      case QuantType::kQ6_K: random_fp16(block + 208, rng, true); break;
    }
  }
  return data;
}

// Float64 dequantization [n, k] by the reference.
std::vector<double> dequantize64(QuantType type, const std::vector<uint8_t>& data, int64_t n, int64_t k) {
  const int64_t be = quant_file_block_elements(type), bb = quant_file_block_bytes(type);
  std::vector<double> w(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t e = 0; e < k; ++e) {
      const uint8_t* block = data.data() + (r * (k / be) + e / be) * bb;
      w[r * k + e] = ref::element(ggml_type(type), block, static_cast<int>(e % be));
    }
  return w;
}

std::vector<float> random_x(int64_t m, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (auto& v : x) v = normal(rng);
  for (int64_t i = 0; i < m; ++i) {
    x[i * k + rng() % k] *= 40.0f;                                        // an outlier
    if (k >= 64 && i % 2 == 1) std::fill_n(x.begin() + i * k + 32, 32, 0.0f);  // a zero block
  }
  return x;
}

struct Shape {
  int64_t m, n, k;
};

std::vector<Shape> shapes() {
  std::vector<Shape> s;
  for (int64_t m : {1, 3, 17})
    for (int64_t n : {1, 15, 16, 33})
      for (int64_t k : {256, 512}) s.push_back({m, n, k});
  s.push_back({67, 33, 256});
  s.push_back({65, 33, 512});  // a one-row chunk after a full one (avx2's one-row path at row 64)
  s.push_back({4, 40, 2048});
  return s;
}

// Runs every shape of every type on `isa`; returns the worst ratios (error / tolerance).
void check_kernel(QuantKernelIsa isa, ThreadPool* pool) {
  std::mt19937 rng(77);
  for (QuantType type : quant_types()) {
    double worst_same = 0.0, worst_e2e = 0.0, worst_rel = 0.0;
    for (const Shape& s : shapes()) {
      SCOPED_TRACE(fmt::format("{} {} m={} n={} k={}", quant_kernel_isa_name(isa), quant_type_name(type), s.m, s.n,
                               s.k));
      const auto file = random_weight(type, s.n, s.k, rng);
      const auto w64 = dequantize64(type, file, s.n, s.k);
      const auto x = random_x(s.m, s.k, rng);
      const PackedQuantWeight packed = repack_quant_weight(type, file.data(), int64_t(file.size()), s.n, s.k, pool);
      QuantizedActivations xq;
      quantize_activations(x.data(), s.m, s.k, xq, pool);
      std::vector<float> y(static_cast<size_t>(s.m * s.n), std::nanf(""));
      quant_linear_forward(isa, packed, xq, y.data(), pool);
      const int64_t nb = s.k / kQuantBlock;
      int failures = 0;
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t c = 0; c < s.n; ++c) {
          double same = 0, mag = 0, unq = 0, shift = 0;
          for (int64_t e = 0; e < s.k; ++e) {
            const double wv = w64[c * s.k + e];
            const double dx = xq.scale[i * nb + e / kQuantBlock];
            const double xv = dx * xq.q[i * s.k + e];
            same += wv * xv;
            mag += std::fabs(wv * xv);
            unq += wv * double(x[i * s.k + e]);
            shift += std::fabs(wv) * dx / 2;
          }
          const double tol = 4.0 * double(nb + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
          const double yv = y[i * s.n + c];
          const double err = std::fabs(yv - same), err2 = std::fabs(yv - unq);
          worst_same = std::max(worst_same, err / tol);
          worst_e2e = std::max(worst_e2e, err2 / (shift + tol));
          if (mag > 0) worst_rel = std::max(worst_rel, err2 / mag);
          if (!(err <= tol) || !(err2 <= shift + tol)) {
            if (++failures <= 3) {
              ADD_FAILURE() << fmt::format("y[{}, {}] = {} vs same-activation ref {} (tol {:.3g}), unquantized {} "
                                           "(bound {:.3g})",
                                           i, c, yv, same, tol, unq, shift + tol);
            }
          }
        }
    }
    std::printf("%-12s %-5s worst |err| / tolerance: same activations %.3f, end to end %.3f; "
                "end-to-end |err| / sum|w x| max %.2e\n",
                std::string(quant_kernel_isa_name(isa)).c_str(), std::string(quant_type_name(type)).c_str(),
                worst_same, worst_e2e, worst_rel);
  }
}

std::string skip_reason(QuantKernelIsa isa) {
  const auto reasons = quant_linear_unsupported_reasons(isa, detect_cpu_info());
  return reasons.empty() ? "" : fmt::format("{} unavailable: {}", quant_kernel_isa_name(isa), fmt::join(reasons, "; "));
}

class QuantLinearKernel : public ::testing::TestWithParam<QuantKernelIsa> {};

TEST_P(QuantLinearKernel, MatchesFloat64ReferencesSerial) {
  if (auto reason = skip_reason(GetParam()); !reason.empty()) GTEST_SKIP() << reason;
  check_kernel(GetParam(), nullptr);
}

TEST_P(QuantLinearKernel, MatchesFloat64ReferencesThreaded) {
  if (auto reason = skip_reason(GetParam()); !reason.empty()) GTEST_SKIP() << reason;
  ThreadPool pool(3);
  check_kernel(GetParam(), &pool);
}

// A row's outputs do not depend on how many rows are computed with it.
TEST_P(QuantLinearKernel, RowsAreIndependentOfM) {
  if (auto reason = skip_reason(GetParam()); !reason.empty()) GTEST_SKIP() << reason;
  std::mt19937 rng(5);
  const int64_t n = 24, k = 512, m = 19;
  for (QuantType type : quant_types()) {
    SCOPED_TRACE(std::string(quant_type_name(type)));
    const auto file = random_weight(type, n, k, rng);
    const auto x = random_x(m, k, rng);
    const auto packed = repack_quant_weight(type, file.data(), int64_t(file.size()), n, k);
    std::vector<float> y(m * n), y1(n);
    quant_linear_forward(GetParam(), packed, x.data(), m, y.data(), nullptr);
    for (int64_t i : {0, 5, 18}) {
      quant_linear_forward(GetParam(), packed, x.data() + i * k, 1, y1.data(), nullptr);
      EXPECT_EQ(0, std::memcmp(y1.data(), y.data() + i * n, n * sizeof(float))) << "row " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, QuantLinearKernel,
                         ::testing::Values(QuantKernelIsa::kAvx2, QuantKernelIsa::kAvxVnni,
                                           QuantKernelIsa::kAvx512Vnni, QuantKernelIsa::kAmxInt8),
                         [](const auto& info) { return std::string(quant_kernel_isa_name(info.param)); });

// A weight repacked into a HugePageArena (CpuOps' weights below 2 MiB) has the same bytes as one in
// its own storage, so every kernel computes the same outputs from it.
TEST(QuantLinear, ArenaRepackEqualsOwnStorage) {
  std::mt19937 rng(33);
  HugePageArena arena;
  const int64_t n = 40, k = 512, m = 3;
  for (QuantType type : quant_types()) {
    SCOPED_TRACE(std::string(quant_type_name(type)));
    const auto file = random_weight(type, n, k, rng);
    const auto own = repack_quant_weight(type, file.data(), int64_t(file.size()), n, k);
    const auto in_arena = repack_quant_weight(type, file.data(), int64_t(file.size()), n, k, nullptr, &arena);
    ASSERT_TRUE(in_arena.storage.empty());
    ASSERT_EQ(reinterpret_cast<uintptr_t>(in_arena.data()) % 64, 0u);
    ASSERT_EQ(own.num_bytes(), in_arena.num_bytes());
    EXPECT_EQ(0, std::memcmp(own.data(), in_arena.data(), static_cast<size_t>(own.num_bytes())));
    const auto x = random_x(m, k, rng);
    for (QuantKernelIsa isa : quant_kernel_isas()) {
      if (!skip_reason(isa).empty()) continue;
      std::vector<float> a(m * n), b(m * n);
      quant_linear_forward(isa, own, x.data(), m, a.data(), nullptr);
      quant_linear_forward(isa, in_arena, x.data(), m, b.data(), nullptr);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << quant_kernel_isa_name(isa);
    }
  }
}

// amx_int8 computes the same integers and the same f32 epilogue as avx512_vnni (quant_linear_amx.cc).
TEST(QuantLinear, AmxEqualsAvx512VnniBitForBit) {
  for (QuantKernelIsa isa : {QuantKernelIsa::kAmxInt8, QuantKernelIsa::kAvx512Vnni}) {
    if (auto reason = skip_reason(isa); !reason.empty()) GTEST_SKIP() << reason;
  }
  std::mt19937 rng(21);
  const int64_t n = 40, k = 512, m = 35;
  for (QuantType type : quant_types()) {
    SCOPED_TRACE(std::string(quant_type_name(type)));
    const auto file = random_weight(type, n, k, rng);
    const auto x = random_x(m, k, rng);
    const auto packed = repack_quant_weight(type, file.data(), int64_t(file.size()), n, k);
    std::vector<float> a(m * n), b(m * n);
    quant_linear_forward(QuantKernelIsa::kAmxInt8, packed, x.data(), m, a.data(), nullptr);
    quant_linear_forward(QuantKernelIsa::kAvx512Vnni, packed, x.data(), m, b.data(), nullptr);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  }
}

// The check can fail: one flipped quant bit in the repacked weight (at byte `at` of group 0, `mask`,
// a bit of row 3's first quant) moves that output far past the tolerance and no other output.
void expect_corruption_fails(QuantType type, int64_t at, uint8_t mask) {
  SCOPED_TRACE(std::string(quant_type_name(type)));
  std::mt19937 rng(9);
  const int64_t n = 16, k = 256;
  const auto file = random_weight(type, n, k, rng);
  auto x = random_x(1, k, rng);
  x[0] = 3.0f;  // the corrupted quant's activation: far from zero
  PackedQuantWeight packed = repack_quant_weight(type, file.data(), int64_t(file.size()), n, k);
  std::vector<float> good(n), bad(n);
  quant_linear_forward(QuantKernelIsa::kAvx2, packed, x.data(), 1, good.data(), nullptr);
  packed.storage[packed.offset + at] ^= mask;
  quant_linear_forward(QuantKernelIsa::kAvx2, packed, x.data(), 1, bad.data(), nullptr);
  const auto w64 = dequantize64(type, file, n, k);
  double mag = 0;
  for (int64_t e = 0; e < k; ++e) mag += std::fabs(w64[3 * k + e] * x[e]);
  const double tol = 4.0 * double(k / 32 + 2) * std::ldexp(1.0, -24) * mag;
  EXPECT_GT(std::fabs(bad[3] - good[3]), 100 * tol);
  for (int64_t c = 0; c < n; ++c) {
    if (c != 3) {
      EXPECT_EQ(bad[c], good[c]) << c;
    }
  }
}

TEST(QuantLinear, CorruptedWeightFails) {
  if (auto reason = skip_reason(QuantKernelIsa::kAvx2); !reason.empty()) GTEST_SKIP() << reason;
  expect_corruption_fails(QuantType::kQ4_K, 320 + 4 * 3, 0x08);  // bit 3 of a nibble (sub-block 0)
  // Fifth bits: byte 4 * 3 = 12 of vector 0 is bit 12 of the first 64-bit word (byte 1, bit 4).
  expect_corruption_fails(QuantType::kQ5_0, 32 + 256 + 1, 0x10);
  expect_corruption_fails(QuantType::kQ5_1, 64 + 256 + 1, 0x10);
}

// Parts repacked where they lie (a gate and an up projection, q/k/v) give the bytes the joined
// rows give: part boundaries at 5 and 21 rows cut through the groups of 16. The joined repack is
// the one the float64 tests above check.
TEST(QuantLinear, PartsRepackAsTheirJoinedRows) {
  std::mt19937 rng(13);
  const int64_t k = 512;
  const int64_t part_rows[] = {5, 16, 22};
  for (QuantType type : quant_types()) {
    SCOPED_TRACE(std::string(quant_type_name(type)));
    std::vector<std::vector<uint8_t>> files;
    std::vector<uint8_t> joined;
    std::vector<QuantRows> parts;
    for (int64_t rows : part_rows) files.push_back(random_weight(type, rows, k, rng));
    for (size_t i = 0; i < files.size(); ++i) {
      joined.insert(joined.end(), files[i].begin(), files[i].end());
      parts.push_back({files[i].data(), int64_t(files[i].size()), part_rows[i]});
    }
    ThreadPool pool(2);
    const auto a = repack_quant_weight(type, joined.data(), int64_t(joined.size()), 43, k);
    const auto b = repack_quant_weight(type, parts, k, &pool);
    ASSERT_EQ(a.n, b.n);
    ASSERT_EQ(a.num_bytes(), b.num_bytes());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), size_t(a.num_bytes())));
  }
  std::vector<uint8_t> data(144 * 3);
  const QuantRows bad[] = {{data.data(), 144, 1}, {data.data(), 144, 2}};  // part 1: 2 rows, 1 row's bytes
  try {
    repack_quant_weight(QuantType::kQ4_K, bad, 256);
    ADD_FAILURE() << "no error for a part of the wrong size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("part 1 of 2"), std::string::npos) << e.what();
  }
}

TEST(QuantLinear, BadShapesAreErrors) {
  std::vector<uint8_t> data(144 * 2);
  EXPECT_THROW(repack_quant_weight(QuantType::kQ4_K, data.data(), int64_t(data.size()), 2, 128), Error);  // k % 256
  EXPECT_THROW(repack_quant_weight(QuantType::kQ4_K, data.data(), int64_t(data.size()) - 1, 2, 256), Error);
  EXPECT_NO_THROW(repack_quant_weight(QuantType::kQ4_K, data.data(), int64_t(data.size()), 2, 256));
  std::vector<float> x(40);
  QuantizedActivations xq;
  EXPECT_THROW(quantize_activations(x.data(), 1, 40, xq), Error);
}

TEST(QuantLinear, UnsupportedReasonsNameTheFeature) {
  CpuInfo none;
  none.features = decode_cpu_features(CpuidRegisters{}, AmxPermission{false, "CPU does not report AMX-TILE"});
  for (QuantKernelIsa isa : quant_kernel_isas()) {
    const auto reasons = quant_linear_unsupported_reasons(isa, none);
    ASSERT_FALSE(reasons.empty()) << quant_kernel_isa_name(isa);
    EXPECT_EQ(reasons[0], "CPU lacks avx2");
  }
  const auto amx = quant_linear_unsupported_reasons(QuantKernelIsa::kAmxInt8, none);
  EXPECT_EQ(amx.back(), "CPU lacks amx_int8");
}

}  // namespace
}  // namespace spindle::kernels::cpu
