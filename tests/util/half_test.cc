// bf16/fp16 <-> fp32, exhaustively over all 65,536 bit patterns.
// Independent references: the F16C hardware conversions (vcvtph2ps / vcvtps2ph, round to nearest
// even) where the CPU has them, and a double-precision "pick the nearer neighbour" rounding for bf16.
// Tolerance: none; every result must match bit for bit (NaN: both NaN).
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "util/half.h"

namespace spindle {
namespace {

bool is_nan_bf16(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }
bool is_nan_fp16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

__attribute__((target("f16c"))) float hw_fp16_to_float(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
__attribute__((target("f16c"))) uint16_t hw_float_to_fp16(float f) {
  return static_cast<uint16_t>(
      _mm_cvtsi128_si32(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT)) & 0xffff);
}
bool cpu_has_f16c() { return __builtin_cpu_supports("f16c"); }

// bf16 rounding written independently: among the two bf16 neighbours of x, the nearer one (in
// double arithmetic); ties to the even mantissa; beyond the largest finite value, Inf.
uint16_t reference_float_to_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t down = static_cast<uint16_t>(u >> 16);   // truncation toward zero
  if ((u & 0xffff) == 0) return down;
  const uint16_t up = static_cast<uint16_t>(down + 1);    // next magnitude (may be Inf)
  const double dx = std::fabs(static_cast<double>(x));
  const double d_down = std::fabs(static_cast<double>(bf16_bits_to_float(down)));
  double d_up;
  if ((up & 0x7fff) == 0x7f80) {
    d_up = std::ldexp(1.0, 128);  // the value Inf stands in for when rounding (2^128)
  } else {
    d_up = std::fabs(static_cast<double>(bf16_bits_to_float(up)));
  }
  const double e_down = dx - d_down, e_up = d_up - dx;
  if (e_down < e_up) return down;
  if (e_up < e_down) return up;
  return (down & 1) ? up : down;
}

TEST(HalfTest, Bf16ToFloatAndBackIsIdentityForAllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
    const uint16_t back = float_to_bf16_bits(f);
    if (is_nan_bf16(static_cast<uint16_t>(b))) {
      EXPECT_TRUE(std::isnan(f)) << b;
      EXPECT_TRUE(is_nan_bf16(back)) << b;
      EXPECT_EQ(back & 0x8000, b & 0x8000) << "sign of NaN " << b;
    } else {
      EXPECT_EQ(back, b) << "pattern " << b;
    }
  }
}

TEST(HalfTest, Bf16ValuesMatchExponentMantissaFormula) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const int exponent = (b >> 7) & 0xff;
    const int mantissa = b & 0x7f;
    const double sign = (b & 0x8000) ? -1.0 : 1.0;
    const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
    if (exponent == 0xff) {
      EXPECT_TRUE(mantissa ? std::isnan(f) : std::isinf(f)) << b;
      continue;
    }
    const double expected = exponent == 0 ? sign * std::ldexp(mantissa, -133)
                                          : sign * std::ldexp(128 + mantissa, exponent - 134);
    EXPECT_EQ(static_cast<double>(f), expected) << b;
  }
}

TEST(HalfTest, FloatToBf16RoundsToNearestEven) {
  // Every bf16 midpoint and its neighbours (the hard cases), then random floats.
  for (uint32_t b = 0; b < 65536; ++b) {
    if (((b >> 7) & 0xff) == 0xff) continue;
    const uint32_t mid = (b << 16) | 0x8000u;
    for (uint32_t u : {mid - 1, mid, mid + 1, (b << 16) | 1u, (b << 16) | 0xffffu}) {
      const float x = std::bit_cast<float>(u);
      EXPECT_EQ(float_to_bf16_bits(x), reference_float_to_bf16(x)) << std::hex << u;
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    ASSERT_EQ(float_to_bf16_bits(x), reference_float_to_bf16(x)) << x;
  }
}

TEST(HalfTest, Bf16SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_bf16_bits(inf), 0x7f80);
  EXPECT_EQ(float_to_bf16_bits(-inf), 0xff80);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to Inf
  EXPECT_TRUE(is_nan_bf16(float_to_bf16_bits(std::bit_cast<float>(0x7f800001u))));  // low payload
  EXPECT_TRUE(is_nan_bf16(float_to_bf16_bits(std::bit_cast<float>(0xffc00000u))));
  EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000);
}

TEST(HalfTest, Fp16ToFloatMatchesFormulaForAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const int exponent = (h >> 10) & 0x1f;
    const int mantissa = h & 0x3ff;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    const float f = fp16_bits_to_float(static_cast<uint16_t>(h));
    if (exponent == 0x1f) {
      EXPECT_TRUE(mantissa ? std::isnan(f) : std::isinf(f)) << h;
      continue;
    }
    const double expected = exponent == 0 ? sign * std::ldexp(mantissa, -24)
                                          : sign * std::ldexp(1024 + mantissa, exponent - 25);
    EXPECT_EQ(static_cast<double>(f), expected) << h;
    EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
  }
}

TEST(HalfTest, Fp16RoundTripIsIdentityForAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = float_to_fp16_bits(fp16_bits_to_float(static_cast<uint16_t>(h)));
    if (is_nan_fp16(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(is_nan_fp16(back)) << h;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << h;
    } else {
      EXPECT_EQ(back, h) << h;
    }
  }
}

TEST(HalfTest, Fp16MatchesF16cHardware) {
  if (!cpu_has_f16c()) GTEST_SKIP() << "cpu lacks f16c: no hardware reference on this machine";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = fp16_bits_to_float(static_cast<uint16_t>(h));
    const float hw = hw_fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(hw)) {
      EXPECT_TRUE(std::isnan(ours)) << h;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(ours), std::bit_cast<uint32_t>(hw)) << h;
    }
  }
  // fp32 -> fp16: all fp16 midpoints and neighbours (in fp32), then random fp32 patterns.
  auto check = [](float x) {
    const uint16_t hw = hw_float_to_fp16(x);
    const uint16_t ours = float_to_fp16_bits(x);
    if (is_nan_fp16(hw)) {
      ASSERT_TRUE(is_nan_fp16(ours)) << x;
    } else {
      ASSERT_EQ(ours, hw) << std::hexfloat << x;
    }
  };
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = fp16_bits_to_float(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7c00 ? 65536.0 : fp16_bits_to_float(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in fp32
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      check(x);
      check(-x);
    }
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 2000000; ++i) check(std::bit_cast<float>(static_cast<uint32_t>(rng())));
}

}  // namespace
}  // namespace spindle
