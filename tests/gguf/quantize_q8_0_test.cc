// quantize_row_q8_0 (gguf/quantize_q8_0.h) against three independent truths:
// 1. llama.cpp's own quantizer: tests/golden/gguf/ggml_q8_0.bin holds f32 rows and the blocks the
//    snapshot's ggml quantize_row_q8_0_ref made of them (make_ggml_q8_0.c); tolerance: none, the
//    bytes must be equal (for f32 input, and for bf16 input where the values are bf16).
// 2. A float64 reference from the format's definition, d = max|x| / 127, q = round(x / d):
//    - the stored fp16 d is d rounded to fp16: |d16 - d| <= ulp16(d) / 2 + 2^-23 d (the f32
//      division first, then the fp16 rounding, may add that much to the correctly rounded value);
//    - |q - x / d| <= 1/2 + 2^-17 (the f32 d and x * (1 / d) each round by 2^-24 relative, three
//      roundings on a value <= 127: 3 * 127 * 2^-24 < 2^-17); so wherever x / d is farther than
//      that from a half-integer, q is exactly its nearest integer; |q| <= 127; ties round away
//      from zero, as C's round() (checked where nothing rounds: amax = 127, so d = 1; elsewhere a
//      float64 tie may fall either way within the 2^-17 band, as it does in llama.cpp).
// 3. Round trip through gguf::dequantize_row: |x - x'| <= d (1/2 + 2^-17) + 127 |d16 - d| + 2^-24 |x'|.
#include "gguf/quantize_q8_0.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "gguf/dequantize.h"
#include "gguf/ggml_blocks.h"
#include "util/error.h"

namespace spindle::gguf {
namespace {

struct Golden {
  std::vector<float> x;
  std::vector<std::byte> blocks;
};

Golden read_golden() {
  std::ifstream in(std::string(SPINDLE_SOURCE_DIR) + "/tests/golden/gguf/ggml_q8_0.bin", std::ios::binary);
  Golden g;
  uint32_t blocks = 0;
  in.read(reinterpret_cast<char*>(&blocks), 4);
  g.x.resize(size_t{blocks} * kQK);
  g.blocks.resize(size_t{blocks} * sizeof(BlockQ8_0));
  in.read(reinterpret_cast<char*>(g.x.data()), static_cast<std::streamsize>(g.x.size() * sizeof(float)));
  in.read(reinterpret_cast<char*>(g.blocks.data()), static_cast<std::streamsize>(g.blocks.size()));
  if (!in || blocks == 0) g.x.clear();
  return g;
}

BlockQ8_0 block(const std::vector<std::byte>& bytes, size_t b) {
  BlockQ8_0 out;
  std::memcpy(&out, bytes.data() + b * sizeof(BlockQ8_0), sizeof(out));
  return out;
}

// Half the fp16 spacing at |v| (normal or subnormal range).
double half_ulp16(double v) {
  int e;
  std::frexp(std::fabs(v), &e);  // |v| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, -14) - 10) / 2;
}

// Checks 2 and 3 on the blocks quantized from x; returns the worst |q - x/d| seen.
double check_against_definition(const std::vector<float>& x, const std::vector<std::byte>& q8) {
  double worst = 0;
  std::vector<float> back(x.size());
  dequantize_row(GgmlType::kQ8_0, q8, back);
  for (size_t b = 0; b < x.size() / kQK; ++b) {
    SCOPED_TRACE("block " + std::to_string(b));
    const BlockQ8_0 blk = block(q8, b);
    double amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(double(x[b * kQK + j])));
    const double d = amax / 127, d16 = fp16_bits_to_float(blk.d);
    EXPECT_LE(std::fabs(d16 - d), half_ulp16(d) + std::ldexp(d, -23));
    for (int j = 0; j < kQK; ++j) {
      const double xv = x[b * kQK + j], q = blk.qs[j];
      const double r = d > 0 ? xv / d : 0.0;
      EXPECT_LE(std::fabs(q), 127);
      EXPECT_LE(std::fabs(q - r), 0.5 + std::ldexp(1.0, -17)) << "element " << j << " x " << xv;
      if (amax == 127 && std::fabs(r - std::trunc(r)) == 0.5) {  // d = 1: x * id is exact
        EXPECT_EQ(q, std::round(r)) << "tie at " << j;
      }
      worst = std::max(worst, std::fabs(q - r));
      const double xb = back[b * kQK + j];
      EXPECT_LE(std::fabs(xv - xb), d * (0.5 + std::ldexp(1.0, -17)) + 127 * std::fabs(d16 - d) +
                                        std::ldexp(std::fabs(xb), -24))
          << "round trip, element " << j;
    }
  }
  return worst;
}

TEST(QuantizeQ8_0, EqualsLlamaCppBytes) {
  const Golden g = read_golden();
  ASSERT_FALSE(g.x.empty()) << "tests/golden/gguf/ggml_q8_0.bin unreadable";
  std::vector<std::byte> out(g.blocks.size());
  quantize_row_q8_0(g.x, out);
  for (size_t b = 0; b < g.blocks.size() / sizeof(BlockQ8_0); ++b) {
    ASSERT_EQ(0, std::memcmp(out.data() + b * 34, g.blocks.data() + b * 34, 34)) << "block " << b;
  }
  std::printf("worst |q - x/d| on the golden rows: %.6f\n", check_against_definition(g.x, out));
}

TEST(QuantizeQ8_0, Bf16InputEqualsLlamaCppOnBf16Values) {
  const Golden g = read_golden();
  ASSERT_FALSE(g.x.empty());
  int blocks_checked = 0;
  for (size_t b = 0; b < g.x.size() / kQK; ++b) {
    std::vector<bf16> xb(kQK);
    bool exact = true;
    for (int j = 0; j < kQK; ++j) {
      xb[j] = to_bf16(g.x[b * kQK + j]);
      exact = exact && to_float(xb[j]) == g.x[b * kQK + j];
    }
    if (!exact) continue;
    std::vector<std::byte> out(34);
    quantize_row_q8_0(std::span<const bf16>(xb), out);
    EXPECT_EQ(0, std::memcmp(out.data(), g.blocks.data() + b * 34, 34)) << "block " << b;
    ++blocks_checked;
  }
  EXPECT_GE(blocks_checked, 16);  // the golden's bf16 blocks (2 of 8) and the tie blocks
}

TEST(QuantizeQ8_0, MatchesDefinitionOnRandomRows) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(32 * 400);
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * std::ldexp(1.0f, int(i / 32 % 40) - 30);
  for (int j = 0; j < 32; ++j) x[32 * 7 + j] = 0.0f;               // a zero block
  x[32 * 9 + 5] = 65504.0f * 127.0f;                              // d at fp16's largest finite
  x[32 * 11 + 3] = std::ldexp(1.0f, -130);                         // subnormal x, d rounds to 0 in fp16
  std::vector<std::byte> out(q8_0_bytes(int64_t(x.size())));
  quantize_row_q8_0(x, out);
  std::printf("worst |q - x/d| on random rows: %.6f\n", check_against_definition(x, out));
}

// The checks can fail: a quant moved by one, or a scale one fp16 step off, is caught.
TEST(QuantizeQ8_0, CorruptedBlocksFail) {
  const Golden g = read_golden();
  ASSERT_FALSE(g.x.empty());
  std::vector<std::byte> out(g.blocks.size());
  quantize_row_q8_0(g.x, out);
  for (int what = 0; what < 2; ++what) {
    auto bad = out;
    if (what == 0) bad[0 * 34 + 2 + 5] = std::byte(uint8_t(bad[2 + 5]) + 1);  // block 0, quant 5
    else bad[1 * 34] = std::byte(uint8_t(bad[34]) + 1);                       // block 1, d's low bits
    ::testing::TestPartResultArray failures;
    {
      ::testing::ScopedFakeTestPartResultReporter reporter(
          ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
      check_against_definition(g.x, bad);
    }
    EXPECT_GT(failures.size(), 0) << "corruption " << what << " went unnoticed";
  }
}

TEST(QuantizeQ8_0, BadInputIsAnError) {
  std::vector<float> x(40, 1.0f);
  std::vector<std::byte> out(68);
  EXPECT_THROW(quantize_row_q8_0(std::span<const float>(x.data(), 40), out), Error);  // not a multiple of 32
  EXPECT_THROW(quantize_row_q8_0(std::span<const float>(x.data(), 32), out), Error);  // 68 bytes for one block
  EXPECT_THROW(q8_0_bytes(33), Error);
  std::vector<float> y(64, 1.0f);
  y[40] = std::nanf("");
  EXPECT_THROW(quantize_row_q8_0(y, out), Error);
  y[40] = 1e7f;  // d = 78740 > 65504
  try {
    quantize_row_q8_0(y, out);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("overflows fp16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spindle::gguf
