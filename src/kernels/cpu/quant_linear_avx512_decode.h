// The AVX-512 decoding of one repacked block (quant_linear.h's layout) into 16-row vectors and the
// store of a group's outputs, included by quant_linear_avx512_vnni.cc and quant_linear_amx.cc (each
// compiled with AVX-512 flags); everything is in an anonymous namespace so the inclusions never
// share code.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/quant_linear_isa.h"

namespace spindle::kernels::cpu {
namespace {

namespace ql = quant_layout;

inline __m512i load(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline __m512 fp16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 u8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 i8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline int32_t load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The decoded weights of one block of a group: 8 vectors of unsigned quants, the f32 scales of
// its halves (equal except Q6_K) and its mins (Q4_K/Q5_K/Q5_1).
struct Block {
  __m512i w[8];
  __m512 scale_lo, scale_hi, min;
};

inline void nibbles(const uint8_t* p, __m512i* w) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m512i v = load(p + 64 * c);
    w[c] = _mm512_and_si512(v, low);
    w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
  }
}

// The 64 B of fifth bits at p (bit e of 64-bit word t: vector t's byte e) added as 16 to w[t].
inline void fifth_bits(const uint8_t* p, __m512i* w) {
  const __m512i sixteen = _mm512_set1_epi8(16);
  for (int t = 0; t < 8; ++t) {
    uint64_t bits;
    std::memcpy(&bits, p + 8 * t, 8);
    w[t] = _mm512_mask_add_epi8(w[t], _cvtu64_mask64(bits), w[t], sixteen);
  }
}

// kFlipQ8: Q8_0 quants as q xor 0x80 (= q + 128, unsigned for vpdpbusd); else as stored (signed).
template <QuantType T, bool kFlipQ8 = true>
inline void decode(const uint8_t* gw, int64_t b, Block& out) {
  if constexpr (T == QuantType::kQ8_0) {
    const uint8_t* u = gw + b * ql::kQ8_0Block;
    out.scale_lo = out.scale_hi = fp16x16(u);
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int t = 0; t < 8; ++t) {
      const __m512i v = load(u + ql::kScaleBytes + 64 * t);
      out.w[t] = kFlipQ8 ? _mm512_xor_si512(v, flip) : v;
    }
  } else if constexpr (T == QuantType::kQ4_0) {
    const uint8_t* u = gw + b * ql::kQ4_0Block;
    out.scale_lo = out.scale_hi = fp16x16(u);
    nibbles(u + ql::kScaleBytes, out.w);
  } else if constexpr (T == QuantType::kQ5_0 || T == QuantType::kQ5_1) {
    constexpr bool kMin = T == QuantType::kQ5_1;
    const uint8_t* u = gw + b * (kMin ? ql::kQ5_1Block : ql::kQ5_0Block);
    out.scale_lo = out.scale_hi = fp16x16(u);
    if constexpr (kMin) out.min = fp16x16(u + ql::kScaleBytes);
    const uint8_t* q = u + (kMin ? 2 : 1) * ql::kScaleBytes;
    nibbles(q, out.w);
    fifth_bits(q + ql::kNibbleBytes, out.w);
  } else if constexpr (T == QuantType::kQ4_K || T == QuantType::kQ5_K) {
    constexpr int64_t kSuper = T == QuantType::kQ4_K ? ql::kQ4_KSuper : ql::kQ5_KSuper;
    constexpr int64_t kSub = T == QuantType::kQ4_K ? ql::kQ4_KSub : ql::kQ5_KSub;
    const uint8_t* s = gw + (b / 8) * kSuper;
    const int64_t sub = b % 8;
    out.scale_lo = out.scale_hi = _mm512_mul_ps(fp16x16(s), u8x16(s + 2 * ql::kScaleBytes + 16 * sub));
    out.min = _mm512_mul_ps(fp16x16(s + ql::kScaleBytes), u8x16(s + 2 * ql::kScaleBytes + 128 + 16 * sub));
    const uint8_t* u = s + ql::kKHeader + sub * kSub;
    nibbles(u, out.w);
    if constexpr (T == QuantType::kQ5_K) fifth_bits(u + ql::kNibbleBytes, out.w);
  } else {  // Q6_K
    const uint8_t* s = gw + (b / 8) * ql::kQ6_KSuper;
    const int64_t blk = b % 8;
    const __m512 d = fp16x16(s);
    out.scale_lo = _mm512_mul_ps(d, i8x16(s + ql::kScaleBytes + 16 * (2 * blk)));
    out.scale_hi = _mm512_mul_ps(d, i8x16(s + ql::kScaleBytes + 16 * (2 * blk + 1)));
    const uint8_t* u = s + ql::kQ6_KHeader + blk * ql::kQ6_KSub;
    nibbles(u, out.w);
    const __m512i two = _mm512_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      const __m512i qh = load(u + ql::kNibbleBytes + 64 * h);
      __m512i* w = out.w + 4 * h;
      w[0] = _mm512_or_si512(w[0], _mm512_and_si512(_mm512_slli_epi16(qh, 4), two));
      w[1] = _mm512_or_si512(w[1], _mm512_and_si512(_mm512_slli_epi16(qh, 2), two));
      w[2] = _mm512_or_si512(w[2], _mm512_and_si512(qh, two));
      w[3] = _mm512_or_si512(w[3], _mm512_and_si512(_mm512_srli_epi16(qh, 2), two));
    }
  }
}

// y[i0 + i, 16 g + r] = acc[i][r] for i < rows and the group's valid columns (16 g + r < w.n).
inline void store_group(const QuantGroupsParams& p, int64_t g, int64_t i0, int rows, const __m512* acc) {
  const int64_t n = p.w->n, col = g * kQuantGroupRows;
  const __mmask16 mask = static_cast<__mmask16>((1u << std::min<int64_t>(16, n - col)) - 1);
  for (int i = 0; i < rows; ++i) _mm512_mask_storeu_ps(p.y + (i0 + i) * n + col, mask, acc[i]);
}

}  // namespace
}  // namespace spindle::kernels::cpu
