// FP8 E4M3 ("e4m3fn", the format of FP8 checkpoints and of torch.float8_e4m3fn) on the host.
//
// One byte: sign s (bit 7), exponent e (bits 6-3, bias 7), mantissa m (bits 2-0).
//   e = 0:            (-1)^s * 2^-6 * m / 8            (subnormals; 0x00 and 0x80 are +-0)
//   0 < e, not NaN:   (-1)^s * 2^(e - 7) * (1 + m / 8)  (largest finite: 0x7E = 448)
//   e = 15 and m = 7: NaN (0x7F, 0xFF). There is no infinity.
// Encoding rounds to the nearest value, ties to an even mantissa, and saturates: every finite value
// beyond +-448 (and +-infinity) becomes +-448, since a cast past the range must never produce a NaN
// (an FP8 weight or KV entry that became NaN would poison every sum that reads it). NaN stays NaN.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace spindle {

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr uint8_t kFp8E4m3NaN = 0x7F;

inline float fp8_e4m3_to_float(uint8_t byte) {
  const int exponent = (byte >> 3) & 0xF;
  const int mantissa = byte & 0x7;
  const float sign = (byte & 0x80) != 0 ? -1.0f : 1.0f;
  if (exponent == 0xF && mantissa == 0x7) return std::nanf("");
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // 2^-6 * m / 8
  return sign * std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);     // 2^(e-7) * (8 + m) / 8
}

// Round to nearest even, saturating at +-448 (see above).
inline uint8_t float_to_fp8_e4m3(float value) {
  if (std::isnan(value)) return kFp8E4m3NaN;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  float a = std::fabs(value);
  if (a >= kFp8E4m3Max) return sign | 0x7E;
  // The spacing of representable values at a: 2^-9 below 2^-6 (subnormals), else 2^(floor(log2 a) - 3).
  int exp2 = 0;
  std::frexp(a, &exp2);  // a = f * 2^exp2, f in [0.5, 1)
  const int unbiased = exp2 - 1;
  const int quantum_exp = unbiased < -6 ? -9 : unbiased - 3;
  const float steps = std::nearbyint(std::ldexp(a, -quantum_exp));  // ties to even (default rounding mode)
  const float rounded = std::ldexp(steps, quantum_exp);
  if (rounded >= kFp8E4m3Max) return sign | 0x7E;
  if (rounded == 0.0f) return sign;
  int e2 = 0;
  const float f = std::frexp(rounded, &e2);
  const int e = e2 - 1 + 7;  // biased exponent of the rounded value
  if (e <= 0) return sign | static_cast<uint8_t>(std::ldexp(rounded, 9));  // subnormal: m = rounded / 2^-9
  const int m = static_cast<int>(std::ldexp(f, 4)) - 8;                    // f * 16 in [8, 16)
  return sign | static_cast<uint8_t>((e << 3) | m);
}

}  // namespace spindle
