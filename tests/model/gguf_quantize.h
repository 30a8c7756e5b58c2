// Quantizers for tests: one row of floats into ggml blocks (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), written
// from the block layouts (the same definitions tests/gguf/ggml_reference.h decodes), with simple
// per-block rules: scales from each block's range, quants rounded to the nearest level. They need
// not be optimal (llama-quantize searches for better scales), only valid blocks: the tests compare
// Spindle with a float64 forward over these blocks as the reference decoder reads them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include "gguf/ggml_type.h"
#include "util/half.h"

namespace spindle::testing {

namespace gguf_quantize_detail {

inline void put_fp16(uint8_t* p, float v) {
  const uint16_t bits = float_to_fp16_bits(v);
  p[0] = static_cast<uint8_t>(bits & 255);
  p[1] = static_cast<uint8_t>(bits >> 8);
}
// The value the block will hold for a scale v (its fp16 rounding).
inline float fp16_value(float v) { return fp16_bits_to_float(float_to_fp16_bits(v)); }

inline int clamp_round(double v, int lo, int hi) { return std::clamp(static_cast<int>(std::lround(v)), lo, hi); }

inline double max_abs(const float* x, int n) {
  double m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::abs(double{x[i]}));
  return m;
}

// Q8_0: d fp16 | 32 int8; w = d q. The quants use the f32 d = max|x| / 127 and q = round-half-away(
// x * (1 / d)) in f32, not the stored fp16 d: ggml's reference quantizer's arithmetic, so these
// blocks equal llama-quantize's (and --quantization q8_0's, tests/model/quantize_on_load_test.cc).
inline void q8_0(const float* x, uint8_t* b) {
  const float d = static_cast<float>(max_abs(x, 32)) / 127.0f;
  const float id = d == 0 ? 0.0f : 1.0f / d;
  put_fp16(b, fp16_value(d));
  for (int e = 0; e < 32; ++e) b[2 + e] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(static_cast<int>(std::round(x[e] * id)), -127, 127)));
}

// Q4_0: d fp16 | 16 bytes, element e < 16 the low nibble of byte e, e >= 16 the high nibble of
// byte e - 16; w = d (q - 8).
inline void q4_0(const float* x, uint8_t* b) {
  const float d = fp16_value(static_cast<float>(max_abs(x, 32) / 7));
  put_fp16(b, d);
  std::memset(b + 2, 0, 16);
  for (int e = 0; e < 32; ++e) {
    const int q = d == 0 ? 8 : clamp_round(x[e] / d + 8, 0, 15);
    b[2 + e % 16] |= static_cast<uint8_t>(e < 16 ? q : q << 4);
  }
}

// Q4_K / Q5_K super-block of 256: d, dmin fp16 | 12 bytes of 6-bit scales and mins of the 8
// sub-blocks of 32 | (Q5_K: 32 bytes, bit s of byte l = bit 4 of sub-block s's element l) |
// 128 bytes: byte 32 (s / 2) + l holds sub-block s's element l, low nibble for even s, high for
// odd. w = d sc_s q - dmin m_s.
inline void k_quant(const float* x, uint8_t* b, int bits) {
  const int levels = (1 << bits) - 1;
  double scale[8], minus[8];
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    const double lo = std::min(0.0, double{*std::min_element(xs, xs + 32)});
    const double hi = *std::max_element(xs, xs + 32);
    scale[s] = (hi - lo) / levels;
    minus[s] = -lo;
  }
  const float d = fp16_value(static_cast<float>(*std::max_element(scale, scale + 8) / 63));
  const float dmin = fp16_value(static_cast<float>(*std::max_element(minus, minus + 8) / 63));
  put_fp16(b, d);
  put_fp16(b + 2, dmin);
  int sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = d == 0 ? 0 : clamp_round(scale[s] / d, 0, 63);
    mn[s] = dmin == 0 ? 0 : clamp_round(minus[s] / dmin, 0, 63);
  }
  uint8_t* scales = b + 4;
  for (int s = 0; s < 4; ++s) {
    scales[s] = static_cast<uint8_t>(sc[s] | (sc[s + 4] >> 4) << 6);
    scales[s + 4] = static_cast<uint8_t>(mn[s] | (mn[s + 4] >> 4) << 6);
    scales[s + 8] = static_cast<uint8_t>((sc[s + 4] & 15) | (mn[s + 4] & 15) << 4);
  }
  uint8_t* qh = b + 16;
  uint8_t* qs = b + (bits == 5 ? 48 : 16);
  if (bits == 5) std::memset(qh, 0, 32);
  std::memset(qs, 0, 128);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, l = e % 32;
    const double step = double{d} * sc[s];
    const int q = step == 0 ? 0 : clamp_round((x[e] + double{dmin} * mn[s]) / step, 0, levels);
    qs[32 * (s / 2) + l] |= static_cast<uint8_t>(s % 2 == 0 ? (q & 15) : (q & 15) << 4);
    if (bits == 5) qh[l] |= static_cast<uint8_t>((q >> 4) << s);
  }
}

// Q6_K super-block of 256: ql (128 bytes) | qh (64) | 16 int8 scales (one per 16 elements) | d.
// Element e = 128 h + 32 k + l: low 4 bits in byte 64 h + l + 32 (k % 2) (low nibble for k < 2,
// high for k >= 2), high 2 bits at bits 2k, 2k + 1 of byte 128 + 32 h + l; w = d sc (q - 32).
inline void q6_k(const float* x, uint8_t* b) {
  double scale[16];
  for (int j = 0; j < 16; ++j) scale[j] = max_abs(x + 16 * j, 16) / 31;
  const float d = fp16_value(static_cast<float>(*std::max_element(scale, scale + 16) / 127));
  std::memset(b, 0, 210);
  put_fp16(b + 208, d);
  for (int j = 0; j < 16; ++j) b[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(d == 0 ? 0 : clamp_round(scale[j] / d, -127, 127)));
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const double step = double{d} * static_cast<int8_t>(b[192 + e / 16]);
    const int q = step == 0 ? 32 : clamp_round(x[e] / step + 32, 0, 63);
    b[64 * h + l + 32 * (k % 2)] |= static_cast<uint8_t>(k < 2 ? (q & 15) : (q & 15) << 4);
    b[128 + 32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
  }
}

}  // namespace gguf_quantize_detail

// The blocks of one row x (x.size() a multiple of the type's block elements).
inline std::vector<uint8_t> quantize_row(gguf::GgmlType type, std::span<const float> x) {
  namespace q = gguf_quantize_detail;
  const size_t be = gguf::ggml_block_elements(type), bb = gguf::ggml_block_bytes(type);
  if (x.size() % be != 0) throw std::invalid_argument("quantize_row: length is not a multiple of the block");
  std::vector<uint8_t> out(x.size() / be * bb);
  for (size_t i = 0; i < x.size() / be; ++i) {
    const float* xb = x.data() + i * be;
    uint8_t* b = out.data() + i * bb;
    switch (type) {
      case gguf::GgmlType::kQ8_0: q::q8_0(xb, b); break;
      case gguf::GgmlType::kQ4_0: q::q4_0(xb, b); break;
      case gguf::GgmlType::kQ4_K: q::k_quant(xb, b, 4); break;
      case gguf::GgmlType::kQ5_K: q::k_quant(xb, b, 5); break;
      case gguf::GgmlType::kQ6_K: q::q6_k(xb, b); break;
      default: throw std::invalid_argument("quantize_row: unsupported type");
    }
  }
  return out;
}

}  // namespace spindle::testing
