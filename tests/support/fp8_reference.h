// FP8 E4M3 written out from its definition (the OCP 8-bit floating point spec's E4M3: sign, 4
// exponent bits with bias 7, 3 mantissa bits, subnormals at exponent 0, S.1111.111 NaN, no
// infinity), in float64: the independent truth for util/fp8.h and the FP8 kernels' tests.
#pragma once

#include <cmath>
#include <limits>

namespace spindle::testing {

inline double e4m3_definition(int code) {
  const int s = (code >> 7) & 1, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = e == 0 ? std::pow(2.0, -6) * (m / 8.0) : std::pow(2.0, e - 7) * (1.0 + m / 8.0);
  return s ? -magnitude : magnitude;
}

}  // namespace spindle::testing
