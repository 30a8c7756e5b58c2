#include "util/half.h"

namespace spindle {

float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {                 // Inf or NaN (payload kept in the top mantissa bits)
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {             // normal: rebias 15 -> 127
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {             // signed zero
    bits = sign;
  } else {                                // subnormal: normalise into an fp32 normal
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_fp16_bits(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {                // NaN: quiet, top payload bits kept
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) {               // >= 65520 rounds to Inf (and Inf stays Inf)
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (abs >= 0x38800000u) {               // normal fp16 range (>= 2^-14)
    const uint32_t lsb = (abs >> 13) & 1u;
    const uint32_t rounded = abs + 0xfffu + lsb;
    // Rebias 127 -> 15; a mantissa carry correctly bumps the exponent.
    return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
  }
  if (abs < 0x33000000u) {                // below half the smallest subnormal (2^-25): zero
    return sign;
  }
  // Subnormal result: value = m * 2^-24 with m in [0, 1024).
  const uint32_t exponent = abs >> 23;            // 102..112
  const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exponent;         // 14..24
  uint32_t m = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (m & 1u))) ++m;
  return static_cast<uint16_t>(sign | m);
}

}  // namespace spindle
