// The float64 reference's activation roundings (reference_forward.h): round_e4m3 (nearest-even
// E4M3 from fp8_reference.h's definition, saturated), round_bf16, and the kE4m3PerToken product
// input (s = f32(max|x|) / 448). Checked against their definitions by enumeration and against
// util/fp8.h / util/half.h (the host encoders, themselves tested against the definition) on
// random values: two implementations written apart must agree exactly.
#include <gtest/gtest.h>

#include <random>

#include "model/reference_forward.h"
#include "util/fp8.h"
#include "util/half.h"

namespace spindle::testing {
namespace {

namespace r = reference_forward_detail;

TEST(ReferenceRounding, E4m3ValuesAreFixedAndMidpointsGoToTheEvenCode) {
  for (int code = 0; code < 127; ++code) {
    const double v = e4m3_definition(code);
    EXPECT_EQ(r::round_e4m3(v), v) << code;
    EXPECT_EQ(r::round_e4m3(-v), -v) << code;
    if (code + 1 < 127) {
      const double mid = (v + e4m3_definition(code + 1)) / 2;
      EXPECT_EQ(r::round_e4m3(mid), e4m3_definition(code % 2 == 0 ? code : code + 1)) << "midpoint above " << code;
      EXPECT_EQ(r::round_e4m3(std::nextafter(mid, 0.0)), v) << code;
      EXPECT_EQ(r::round_e4m3(std::nextafter(mid, 1e9)), e4m3_definition(code + 1)) << code;
    }
  }
  EXPECT_EQ(r::round_e4m3(460.0), 448.0);   // beyond the largest finite value: saturated
  EXPECT_EQ(r::round_e4m3(-1e30), -448.0);
}

TEST(ReferenceRounding, E4m3AndBf16AgreeWithTheHostEncoders) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> exponent(-12, 10), sign(-1, 1);
  for (int i = 0; i < 200000; ++i) {
    const float v = static_cast<float>((sign(rng) < 0 ? -1 : 1) * std::exp2(exponent(rng)));
    ASSERT_EQ(r::round_e4m3(v), fp8_e4m3_to_float(float_to_fp8_e4m3(v))) << v;
    ASSERT_EQ(r::round_bf16(v), bf16_bits_to_float(float_to_bf16_bits(v))) << v;
  }
}

TEST(ReferenceRounding, E4m3PerTokenScalesByTheLargestMagnitude) {
  const r::Vec x = {0.5, -3.0, 1e-4, 2.9};
  r::Rounding q;
  q.on = true;
  q.kind = ActivationRounding::kE4m3PerToken;
  const r::Vec y = r::quantize_blocks(x, q);
  const double s = static_cast<double>(3.0f / 448.0f);
  ASSERT_EQ(y.size(), x.size());
  EXPECT_DOUBLE_EQ(y[1], -448.0 * s);  // the largest maps to the largest code
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], r::round_e4m3(x[i] / s) * s) << i;
    EXPECT_LE(std::abs(y[i] - x[i]), std::abs(x[i]) / 16 + 1e-300 + s * 0x1p-10) << i;  // half a step: 2^-4 relative, or subnormal spacing
  }
  EXPECT_EQ(r::quantize_blocks(r::Vec(5, 0.0), q), r::Vec(5, 0.0));
}

}  // namespace
}  // namespace spindle::testing
