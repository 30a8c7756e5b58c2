// 16-bit float storage types and their conversions to and from fp32.
//
// Contract: fp32 -> 16-bit rounds to nearest, ties to even; overflow becomes Inf; NaN stays NaN
// (sign kept, quiet bit set, payload truncated); Inf stays Inf. 16-bit -> fp32 is exact.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace spindle {

// Brain float: 1 sign, 8 exponent, 7 mantissa bits; the upper half of an fp32.
struct bf16 {
  uint16_t bits = 0;
};
// IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits.
struct fp16 {
  uint16_t bits = 0;
};

inline float bf16_bits_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t float_to_bf16_bits(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) {           // NaN: keep sign and top payload, force quiet
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t lsb = (u >> 16) & 1u;              // ties go to the even result
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}

float fp16_bits_to_float(uint16_t bits);
uint16_t float_to_fp16_bits(float value);

inline float to_float(bf16 v) { return bf16_bits_to_float(v.bits); }
inline float to_float(fp16 v) { return fp16_bits_to_float(v.bits); }
inline float to_float(float v) { return v; }
inline bf16 to_bf16(float v) { return bf16{float_to_bf16_bits(v)}; }
inline fp16 to_fp16(float v) { return fp16{float_to_fp16_bits(v)}; }

}  // namespace spindle
