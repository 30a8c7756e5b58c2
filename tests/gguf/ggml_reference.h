// Float64 dequantization references for the ggml block types, written from the formats'
// definitions element by element (byte offsets into the raw block, no structs, no loops shared
// with src/gguf/dequantize.cc): element e of a block is computed on its own from the bytes it
// depends on. Every value is exact in float64 (fp16 scales times small integers).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "gguf/ggml_type.h"

namespace spindle::gguf::reference {

// IEEE binary16 from its bits, in float64: sign, 5-bit exponent (bias 15), 10-bit fraction;
// exponent 0 is subnormal (fraction * 2^-24); exponent 31 is Inf/NaN.
inline double fp16(const uint8_t* p) {
  const unsigned bits = p[0] | (p[1] << 8);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 31;
  const int fraction = bits & 1023;
  if (exponent == 0) return sign * std::ldexp(fraction, -24);
  if (exponent == 31) return fraction ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + fraction, exponent - 25);
}

// bfloat16: the top 16 bits of a binary32.
inline double bf16(const uint8_t* p) {
  const uint32_t bits = (static_cast<uint32_t>(p[0]) << 16) | (static_cast<uint32_t>(p[1]) << 24);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Nibble e (0..31) of the 16 packed bytes of a 32-element block: elements 0..15 are the low
// nibbles of bytes 0..15, elements 16..31 their high nibbles.
inline int nibble32(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

// Bit e of the little-endian 32-bit word at p.
inline int bit32(const uint8_t* p, int e) { return (p[e / 8] >> (e % 8)) & 1; }

// The 6-bit scale (which = 0) or min (which = 1) of sub-block s (0..7) of a Q4_K / Q5_K block's
// 12 scale bytes: sub-blocks 0..3 keep both in the low 6 bits of bytes s and s + 4; sub-blocks
// 4..7 keep their low 4 bits in byte s + 4 (scale low nibble, min high nibble) and their top 2
// bits in the top 2 bits of bytes s - 4 (scale) and s (min).
inline int k_scale(const uint8_t* scales, int s, int which) {
  if (s < 4) return scales[s + 4 * which] & 63;
  const int low = which == 0 ? (scales[s + 4] & 15) : (scales[s + 4] >> 4);
  const int high = scales[s - 4 * (1 - which)] >> 6;
  return low | (high << 4);
}

// Element e of the block at `b` (e < the type's block size).
inline double element(GgmlType type, const uint8_t* b, int e) {
  switch (type) {
    case GgmlType::kF32: {
      float f;
      std::memcpy(&f, b, 4);
      return f;
    }
    case GgmlType::kF16: return fp16(b);
    case GgmlType::kBF16: return bf16(b);
    case GgmlType::kQ8_0: return fp16(b) * static_cast<int8_t>(b[2 + e]);
    case GgmlType::kQ4_0: return fp16(b) * (nibble32(b + 2, e) - 8);
    case GgmlType::kQ4_1: return fp16(b) * nibble32(b + 4, e) + fp16(b + 2);
    case GgmlType::kQ5_0: return fp16(b) * ((nibble32(b + 6, e) | bit32(b + 2, e) << 4) - 16);
    case GgmlType::kQ5_1:
      return fp16(b) * (nibble32(b + 8, e) | bit32(b + 4, e) << 4) + fp16(b + 2);
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      // d @0, dmin @2, scales @4 (12 bytes), [Q5_K: qh @16 (32 bytes)], qs after.
      const int s = e / 32, l = e % 32;
      const uint8_t* qs = b + (type == GgmlType::kQ4_K ? 16 : 48);
      int q = (s % 2 == 0) ? (qs[32 * (s / 2) + l] & 15) : (qs[32 * (s / 2) + l] >> 4);
      if (type == GgmlType::kQ5_K) q += 16 * ((b[16 + l] >> s) & 1);
      return fp16(b) * k_scale(b + 4, s, 0) * q - fp16(b + 2) * k_scale(b + 4, s, 1);
    }
    case GgmlType::kQ6_K: {
      // ql @0 (128 bytes), qh @128 (64), scales int8 @192 (16), d @208.
      const int half = e / 128, k = (e % 128) / 32, l = e % 32;
      const uint8_t low_byte = b[64 * half + l + 32 * (k % 2)];
      const int low = k < 2 ? (low_byte & 15) : (low_byte >> 4);
      const int high = (b[128 + 32 * half + l] >> (2 * k)) & 3;
      const int scale = static_cast<int8_t>(b[192 + 8 * half + 2 * k + l / 16]);
      return fp16(b + 208) * scale * ((low | high << 4) - 32);
    }
    default: return NAN;
  }
}

}  // namespace spindle::gguf::reference
