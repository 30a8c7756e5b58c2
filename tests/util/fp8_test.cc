// util/fp8.h against E4M3 written out from its definition (tests/support/fp8_reference.h), every
// one of the 256 codes; and the encoder's rounding (nearest,
// ties to an even mantissa) and saturation (no finite input becomes NaN).
#include "util/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/fp8_reference.h"

namespace spindle {
namespace {

using testing::e4m3_definition;

TEST(Fp8Test, EveryCodeDecodesToItsDefinedValue) {
  for (int b = 0; b < 256; ++b) {
    const double want = e4m3_definition(b);
    const float got = fp8_e4m3_to_float(static_cast<uint8_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << b;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << "code " << b;
    }
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8Test, EveryFiniteCodeRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const float v = fp8_e4m3_to_float(static_cast<uint8_t>(b));
    if (std::isnan(v)) continue;
    EXPECT_EQ(float_to_fp8_e4m3(v), b == 0x80 ? 0x80 : b) << "code " << b << " value " << v;
  }
}

// Between two neighbouring finite codes, the encoder picks the nearer (the even-mantissa one at
// the midpoint): checked against a brute-force nearest search over the definition.
TEST(Fp8Test, EncodingRoundsToTheNearestValueTiesToEven) {
  for (int b = 0; b < 0x7E; ++b) {  // positive finite codes and their successors
    const double lo = e4m3_definition(b), hi = e4m3_definition(b + 1);
    for (double t : {0.25, 0.5, 0.75}) {
      const float x = static_cast<float>(lo + t * (hi - lo));
      int want = t < 0.5 ? b : b + 1;
      if (t == 0.5) want = (b & 1) == 0 ? b : b + 1;  // ties: the even code (even mantissa)
      EXPECT_EQ(float_to_fp8_e4m3(x), want) << "x " << x << " between codes " << b << " and " << b + 1;
      EXPECT_EQ(float_to_fp8_e4m3(-x), want | 0x80) << "x " << -x;
    }
  }
}

TEST(Fp8Test, OutOfRangeSaturatesAndNaNStaysNaN) {
  for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(float_to_fp8_e4m3(x), 0x7E) << x;
    EXPECT_EQ(float_to_fp8_e4m3(-x), 0xFE) << -x;
  }
  EXPECT_EQ(float_to_fp8_e4m3(std::nanf("")), kFp8E4m3NaN);
  EXPECT_EQ(float_to_fp8_e4m3(1e-30f), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(float_to_fp8_e4m3(-1e-30f), 0x80);
}

}  // namespace
}  // namespace spindle
