// The 8-rows-a-vector quantized linear kernel, included by exactly two files, each compiled with
// its own flags: quant_linear_avx2.cc (kVnni = false: _mm256_maddubs_epi16 + _mm256_madd_epi16;
// Q8_0 by the sign trick |w| . sign(x, w)) and quant_linear_avx_vnni.cc (kVnni = true: VEX
// vpdpbusd; Q8_0 as q + 128 with the offset removed like Q4_0's). Everything is in an anonymous
// namespace so the two inclusions never share code. The arithmetic per block is that of
// quant_linear_avx512_vnni.cc on each half (rows 0-7, 8-15) of a group; see quant_linear.h.
// Rates (llvm-mca -mcpu=znver3 on the avx2 Q4_K 4-row loop): ~44 cycles a block of 4 rows, all four
// FP pipes busy; 8 of each row's ~40 FP-pipe ops are the activation broadcasts, done again for each
// half. Tried and measured slower (bench/results/2026-12-07-devvm-zen4-quant-rows): both halves in one
// tile with the decoded block in an L1 panel, each broadcast shared (16 rows): the panel's loads
// and stores then bound it (~111 cycles of FP load/store a 4-row block of 16 rows).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/quant_linear_isa.h"

namespace spindle::kernels::cpu {
namespace {

namespace ql = quant_layout;

inline __m256i load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256 fp16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 u8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 i8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline int32_t load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

struct Block {
  __m256i w[8];
  __m256 scale_lo, scale_hi, min;
};

// h: which half of the group (rows 8h .. 8h + 7): byte offset 32 h in every 64-byte vector.
inline void nibbles(const uint8_t* p, int h, __m256i* w) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = load(p + 64 * c + 32 * h);
    w[c] = _mm256_and_si256(v, low);
    w[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
  }
}

// 16 where bit i of `bits` is set, else 0, for byte i of the result.
inline __m256i bits_to_16s(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// The 64 B of fifth bits at p (bit e of 64-bit word t: vector t's byte e) added as 16 to w[t].
inline void fifth_bits(const uint8_t* p, int h, __m256i* w) {
  for (int t = 0; t < 8; ++t) {
    uint32_t bits;
    std::memcpy(&bits, p + 8 * t + 4 * h, 4);
    w[t] = _mm256_or_si256(w[t], bits_to_16s(bits));
  }
}

template <QuantType T, bool kVnni>
inline void decode(const uint8_t* gw, int64_t b, int h, Block& out) {
  if constexpr (T == QuantType::kQ8_0) {
    const uint8_t* u = gw + b * ql::kQ8_0Block;
    out.scale_lo = out.scale_hi = fp16x8(u + 16 * h);
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    for (int t = 0; t < 8; ++t) {
      const __m256i v = load(u + ql::kScaleBytes + 64 * t + 32 * h);
      out.w[t] = kVnni ? _mm256_xor_si256(v, flip) : v;  // avx2: signed q, used as |q| and sign(x, q)
    }
  } else if constexpr (T == QuantType::kQ4_0) {
    const uint8_t* u = gw + b * ql::kQ4_0Block;
    out.scale_lo = out.scale_hi = fp16x8(u + 16 * h);
    nibbles(u + ql::kScaleBytes, h, out.w);
  } else if constexpr (T == QuantType::kQ5_0 || T == QuantType::kQ5_1) {
    constexpr bool kMin = T == QuantType::kQ5_1;
    const uint8_t* u = gw + b * (kMin ? ql::kQ5_1Block : ql::kQ5_0Block);
    out.scale_lo = out.scale_hi = fp16x8(u + 16 * h);
    if constexpr (kMin) out.min = fp16x8(u + ql::kScaleBytes + 16 * h);
    const uint8_t* q = u + (kMin ? 2 : 1) * ql::kScaleBytes;
    nibbles(q, h, out.w);
    fifth_bits(q + ql::kNibbleBytes, h, out.w);
  } else if constexpr (T == QuantType::kQ4_K || T == QuantType::kQ5_K) {
    constexpr int64_t kSuper = T == QuantType::kQ4_K ? ql::kQ4_KSuper : ql::kQ5_KSuper;
    constexpr int64_t kSub = T == QuantType::kQ4_K ? ql::kQ4_KSub : ql::kQ5_KSub;
    const uint8_t* s = gw + (b / 8) * kSuper;
    const int64_t sub = b % 8;
    out.scale_lo = out.scale_hi = _mm256_mul_ps(fp16x8(s + 16 * h), u8x8(s + 2 * ql::kScaleBytes + 16 * sub + 8 * h));
    out.min = _mm256_mul_ps(fp16x8(s + ql::kScaleBytes + 16 * h),
                            u8x8(s + 2 * ql::kScaleBytes + 128 + 16 * sub + 8 * h));
    const uint8_t* u = s + ql::kKHeader + sub * kSub;
    nibbles(u, h, out.w);
    if constexpr (T == QuantType::kQ5_K) fifth_bits(u + ql::kNibbleBytes, h, out.w);
  } else {  // Q6_K
    const uint8_t* s = gw + (b / 8) * ql::kQ6_KSuper;
    const int64_t blk = b % 8;
    const __m256 d = fp16x8(s + 16 * h);
    out.scale_lo = _mm256_mul_ps(d, i8x8(s + ql::kScaleBytes + 16 * (2 * blk) + 8 * h));
    out.scale_hi = _mm256_mul_ps(d, i8x8(s + ql::kScaleBytes + 16 * (2 * blk + 1) + 8 * h));
    const uint8_t* u = s + ql::kQ6_KHeader + blk * ql::kQ6_KSub;
    nibbles(u, h, out.w);
    const __m256i two = _mm256_set1_epi8(0x30);
    for (int c = 0; c < 2; ++c) {
      const __m256i qh = load(u + ql::kNibbleBytes + 64 * c + 32 * h);
      __m256i* w = out.w + 4 * c;
      w[0] = _mm256_or_si256(w[0], _mm256_and_si256(_mm256_slli_epi16(qh, 4), two));
      w[1] = _mm256_or_si256(w[1], _mm256_and_si256(_mm256_slli_epi16(qh, 2), two));
      w[2] = _mm256_or_si256(w[2], _mm256_and_si256(qh, two));
      w[3] = _mm256_or_si256(w[3], _mm256_and_si256(_mm256_srli_epi16(qh, 2), two));
    }
  }
}

template <QuantType T, bool kVnni>
constexpr int32_t kOffset = T == QuantType::kQ8_0   ? (kVnni ? 128 : 0)
                            : T == QuantType::kQ4_0 ? 8
                            : T == QuantType::kQ5_0 ? 16
                            : T == QuantType::kQ6_K ? 32
                                                    : 0;

// Consecutive maddubs outputs summed in int16 before one madd to int32: a lane of a maddubs output
// is a pair q0 x0 + q1 x1 with |x| <= 127, at most 2 * 127 * qmax: 3810 for 4-bit quants (8 sums:
// 30480), 7874 for 5-bit (4: 31496), 16002 for 6-bit (2: 32004), all < 32767, so nothing saturates
// and the int32 dot is exact. Q8_0 (sign trick, |q| <= 128: 32512) takes each on its own.
template <QuantType T>
constexpr int kInt16Depth = T == QuantType::kQ4_0 || T == QuantType::kQ4_K   ? 8
                            : T == QuantType::kQ6_K                          ? 2
                            : T == QuantType::kQ8_0                          ? 1
                                                                             : 4;  // Q5_0, Q5_1, Q5_K

// s + the int32 dot of NT vectors w[0 .. NT - 1] (4 NT k) with the 4 NT activations at xq.
template <QuantType T, bool kVnni, int NT>
inline __m256i dot(const __m256i* w, const int8_t* xq, __m256i s) {
  if constexpr (kVnni) {
    for (int t = 0; t < NT; ++t) s = _mm256_dpbusd_avx_epi32(s, w[t], _mm256_set1_epi32(load32(xq + 4 * t)));
    return s;
  } else if constexpr (T == QuantType::kQ8_0) {
    // |q| * sign(x, q): |q| <= 128, |x| <= 127, so a pair of products fits int16.
    const __m256i ones = _mm256_set1_epi16(1);
    for (int t = 0; t < NT; ++t) {
      const __m256i xv = _mm256_set1_epi32(load32(xq + 4 * t));
      const __m256i pr = _mm256_maddubs_epi16(_mm256_abs_epi8(w[t]), _mm256_sign_epi8(xv, w[t]));
      s = _mm256_add_epi32(s, _mm256_madd_epi16(pr, ones));
    }
    return s;
  } else {
    constexpr int kD = std::min(kInt16Depth<T>, NT);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int t0 = 0; t0 < NT; t0 += kD) {
      __m256i p = _mm256_maddubs_epi16(w[t0], _mm256_set1_epi32(load32(xq + 4 * t0)));
      for (int t = t0 + 1; t < t0 + kD; ++t) {
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w[t], _mm256_set1_epi32(load32(xq + 4 * t))));
      }
      s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
    }
    return s;
  }
}

// The activation rows of a tile: their terms (quant_row_terms, from the chunk's first row) and x.
struct RowTile {
  const QuantizedActivations* x;
  int64_t i0;              // first row of the tile in x
  const int32_t* neg_off;  // the tile's first row's entry of QuantRowTerms::neg_off
  const float* dxs;        // and of QuantRowTerms::dxs
};

// acc[i] += block b of activation rows i0 .. i0 + MT - 1: each row's integer dot starts from the
// exact -offset * xsum; then, in f32, as quant_linear_avx512_vnni.cc.
template <QuantType T, bool kVnni, int MT>
inline void rows_block(const Block& blk, const RowTile& rt, int64_t b, __m256* acc) {
  const QuantizedActivations& x = *rt.x;
  const int64_t k = x.k, nb = k / kQuantBlock;
  constexpr bool kOff = kOffset<T, kVnni> != 0;
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) {
    const int8_t* xq = x.q.data() + (rt.i0 + i) * k + b * kQuantBlock;
    const __m256 vdx = _mm256_set1_ps(x.scale[(rt.i0 + i) * nb + b]);
    if constexpr (T == QuantType::kQ6_K) {
      const int32_t* off = rt.neg_off + 2 * (i * nb + b);
      const __m256i lo = dot<T, kVnni, 4>(blk.w, xq, _mm256_set1_epi32(off[0]));
      const __m256i hi = dot<T, kVnni, 4>(blk.w + 4, xq + 16, _mm256_set1_epi32(off[1]));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), _mm256_mul_ps(blk.scale_lo, vdx), acc[i]);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), _mm256_mul_ps(blk.scale_hi, vdx), acc[i]);
    } else {
      const __m256i init = kOff ? _mm256_set1_epi32(rt.neg_off[i * nb + b]) : _mm256_setzero_si256();
      const __m256i sum = dot<T, kVnni, 8>(blk.w, xq, init);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(blk.scale_lo, vdx), acc[i]);
      if constexpr (ql::kHasMin<T>) acc[i] = _mm256_fnmadd_ps(blk.min, _mm256_set1_ps(rt.dxs[i * nb + b]), acc[i]);
    }
  }
}

// out[0 .. valid - 1] = the first `valid` (1..8) lanes of v.
inline void store_half(float* out, int64_t valid, __m256 v) {
  if (valid == 8) {
    _mm256_storeu_ps(out, v);
  } else {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    std::memcpy(out, tmp, sizeof(float) * valid);
  }
}

template <QuantType T, bool kVnni, int MT>
void tile(const QuantGroupsParams& p, int64_t g, int h, const RowTile& rt) {
  const PackedQuantWeight& w = *p.w;
  const int64_t col = g * kQuantGroupRows + 8 * h;
  if (col >= w.n) return;
  const uint8_t* gw = w.data() + g * w.group_bytes;
  const int64_t nb = w.k / kQuantBlock;
  __m256 acc[MT];
  for (int i = 0; i < MT; ++i) acc[i] = _mm256_setzero_ps();
  Block blk;
  blk.min = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    decode<T, kVnni>(gw, b, h, blk);
    rows_block<T, kVnni, MT>(blk, rt, b, acc);
  }
  const int64_t valid = std::min<int64_t>(8, w.n - col);
  for (int i = 0; i < MT; ++i) store_half(p.y + (rt.i0 + i) * w.n + col, valid, acc[i]);
}

// ---- One activation row (decode): both halves of a group in one pass, each activation broadcast
// shared by the halves (tile<T, kVnni, 1> broadcasts every one twice, once a half), super-blocks
// walked with their 8 blocks unrolled at constant offsets.
// The integer sums are the same integers and the f32 steps per half and block are tile<T, kVnni, 1>'s
// in the same order, so the outputs are bit for bit equal (a row's outputs do not depend on m).

template <QuantType T>
constexpr bool kHasRow1 = T == QuantType::kQ4_K || T == QuantType::kQ6_K || T == QuantType::kQ8_0;

// The 4 int8 activations at x, broadcast.
inline __m256i bcast(const int8_t* x) { return _mm256_set1_epi32(load32(x)); }

// s + the int32 dot (madd of the int16 pair sums) of the int16 sum p (non-VNNI).
inline __m256i madd_add(__m256i s, __m256i p) { return _mm256_add_epi32(s, _mm256_madd_epi16(p, _mm256_set1_epi16(1))); }

// Per half of the group (rows 8 h .. 8 h + 7) its f32 accumulator.
struct Row1Acc {
  __m256 acc[2];
};

inline void scale_step(__m256& acc, __m256i isum, __m256 scale, __m256 vdx) {
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(scale, vdx), acc);
}

// Q4_K block `sub` of the super-block at s, activations xb.
template <bool kVnni>
inline void q4_k_block(const uint8_t* s, int sub, const int8_t* xb, float dx, float dxs, Row1Acc& a) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const uint8_t* u = s + ql::kKHeader + sub * ql::kQ4_KSub;
  __m256i isum[2];
  if constexpr (kVnni) {  // high nibbles as 16 q (v & 0xF0) in their own chain, shifted down once
    __m256i lo[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, hi16[2] = {lo[0], lo[0]};
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i xl = bcast(xb + 4 * c), xh = bcast(xb + 16 + 4 * c);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i v = load(u + 64 * c + 32 * h);
        lo[h] = _mm256_dpbusd_avx_epi32(lo[h], _mm256_and_si256(v, low), xl);
        hi16[h] = _mm256_dpbusd_avx_epi32(hi16[h], _mm256_andnot_si256(low, v), xh);
      }
    }
    for (int h = 0; h < 2; ++h) isum[h] = _mm256_add_epi32(lo[h], _mm256_srai_epi32(hi16[h], 4));
  } else {  // all 8 maddubs of a half summed in int16 (kInt16Depth<Q4_K> = 8), then one madd
    __m256i p[2];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i xl = bcast(xb + 4 * c), xh = bcast(xb + 16 + 4 * c);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i v = load(u + 64 * c + 32 * h);
        const __m256i two = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(v, low), xl),
                                             _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), xh));
        p[h] = c == 0 ? two : _mm256_add_epi16(p[h], two);
        asm("" : "+x"(p[h]));  // accumulate in chunk order: GCC otherwise hoists every load and spills
      }
    }
    for (int h = 0; h < 2; ++h) isum[h] = _mm256_madd_epi16(p[h], _mm256_set1_epi16(1));
  }
  const __m256 vdx = _mm256_set1_ps(dx), vdxs = _mm256_set1_ps(dxs);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256 d = fp16x8(s + 16 * h), dmin = fp16x8(s + ql::kScaleBytes + 16 * h);
    scale_step(a.acc[h], isum[h], _mm256_mul_ps(d, u8x8(s + 2 * ql::kScaleBytes + 16 * sub + 8 * h)), vdx);
    const __m256 min = _mm256_mul_ps(dmin, u8x8(s + 2 * ql::kScaleBytes + 128 + 16 * sub + 8 * h));
    a.acc[h] = _mm256_fnmadd_ps(min, vdxs, a.acc[h]);
  }
}

// Q6_K block `blk` of the super-block at s: per half of k (kh), vectors 4 kh + c from -32 * xsum.
template <bool kVnni>
inline void q6_k_block(const uint8_t* s, int blk, const int8_t* xb, float dx, const int32_t* neg_off, Row1Acc& a) {
  const __m256i low = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  const uint8_t* u = s + ql::kQ6_KHeader + blk * ql::kQ6_KSub;
  const __m256 vdx = _mm256_set1_ps(dx);
#pragma GCC unroll 2
  for (int kh = 0; kh < 2; ++kh) {
    __m256i sum[2];
    sum[0] = sum[1] = _mm256_set1_epi32(neg_off[kh]);
#pragma GCC unroll 2
    for (int c0 = 0; c0 < 4; c0 += 2) {  // pairs of vectors: two 6-bit maddubs fit int16 (kInt16Depth 2)
      const __m256i x0 = bcast(xb + 16 * kh + 4 * c0), x1 = bcast(xb + 16 * kh + 4 * c0 + 4);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i qh = load(u + ql::kNibbleBytes + 64 * kh + 32 * h);
        __m256i w[2];
        for (int j = 0; j < 2; ++j) {
          const int c = c0 + j;
          const __m256i v = load(u + 64 * c + 32 * h);
          const __m256i nib = _mm256_and_si256(kh == 0 ? v : _mm256_srli_epi16(v, 4), low);
          const __m256i high = c == 0 ? _mm256_slli_epi16(qh, 4)
                               : c == 1 ? _mm256_slli_epi16(qh, 2)
                               : c == 2 ? qh
                                        : _mm256_srli_epi16(qh, 2);
          w[j] = _mm256_or_si256(nib, _mm256_and_si256(high, bits45));
        }
        if constexpr (kVnni) {
          sum[h] = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(sum[h], w[0], x0), w[1], x1);
        } else {
          sum[h] = madd_add(sum[h], _mm256_add_epi16(_mm256_maddubs_epi16(w[0], x0), _mm256_maddubs_epi16(w[1], x1)));
        }
      }
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256 scale = _mm256_mul_ps(fp16x8(s + 16 * h), i8x8(s + ql::kScaleBytes + 16 * (2 * blk + kh) + 8 * h));
      scale_step(a.acc[h], sum[h], scale, vdx);
    }
  }
}

// Q8_0 block at u (avx2: the sign trick from 0; VNNI: q xor 0x80 from -128 * xsum).
template <bool kVnni>
inline void q8_0_block(const uint8_t* u, const int8_t* xb, float dx, int32_t neg_off, Row1Acc& a) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  __m256i sum[2];
  sum[0] = sum[1] = kVnni ? _mm256_set1_epi32(neg_off) : _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) {
    const __m256i xv = bcast(xb + 4 * t);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i v = load(u + ql::kScaleBytes + 64 * t + 32 * h);
      if constexpr (kVnni) {
        sum[h] = _mm256_dpbusd_avx_epi32(sum[h], _mm256_xor_si256(v, flip), xv);
      } else {
        const __m256i pr = _mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(xv, v));
        sum[h] = _mm256_add_epi32(sum[h], _mm256_madd_epi16(pr, ones));
      }
    }
  }
  const __m256 vdx = _mm256_set1_ps(dx);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) scale_step(a.acc[h], sum[h], fp16x8(u + 16 * h), vdx);
}

// y[rt.i0, 16 g + r] for r < 16 (valid columns only).
template <QuantType T, bool kVnni>
void row1(const QuantGroupsParams& p, int64_t g, const RowTile& rt) {
  const PackedQuantWeight& w = *p.w;
  const uint8_t* gw = w.data() + g * w.group_bytes;
  const QuantizedActivations& x = *rt.x;
  const int64_t nb = w.k / kQuantBlock;
  const int8_t* xq = x.q.data() + rt.i0 * x.k;
  const float* dx = x.scale.data() + rt.i0 * nb;
  Row1Acc a{{_mm256_setzero_ps(), _mm256_setzero_ps()}};
  if constexpr (T == QuantType::kQ8_0) {
    for (int64_t b = 0; b < nb; ++b) {
      q8_0_block<kVnni>(gw + b * ql::kQ8_0Block, xq + b * kQuantBlock, dx[b], rt.neg_off[b], a);
    }
  } else {
    constexpr int64_t kSuper = T == QuantType::kQ4_K ? ql::kQ4_KSuper : ql::kQ6_KSuper;
    for (int64_t sb = 0; sb < nb / 8; ++sb) {
      const uint8_t* s = gw + sb * kSuper;
      const int64_t b0 = 8 * sb;
      const int8_t* xs = xq + b0 * kQuantBlock;
      if constexpr (T == QuantType::kQ4_K) {
#pragma GCC unroll 8
        for (int sub = 0; sub < 8; ++sub) {
          q4_k_block<kVnni>(s, sub, xs + sub * kQuantBlock, dx[b0 + sub], rt.dxs[b0 + sub], a);
        }
      } else {
#pragma GCC unroll 8
        for (int blk = 0; blk < 8; ++blk) {
          q6_k_block<kVnni>(s, blk, xs + blk * kQuantBlock, dx[b0 + blk], rt.neg_off + 2 * (b0 + blk), a);
        }
      }
    }
  }
  for (int h = 0; h < 2; ++h) {
    const int64_t col = g * kQuantGroupRows + 8 * h;
    if (col >= w.n) break;
    store_half(p.y + rt.i0 * w.n + col, std::min<int64_t>(8, w.n - col), a.acc[h]);
  }
}

// Rows in chunks of kQuantRowChunk, in tiles of 4 rows (the 8 decoded vectors and 4 accumulators
// take 12 of the 16 ymm registers).
constexpr int kTileRows = 4;

template <QuantType T, bool kVnni>
void groups(const QuantGroupsParams& p, int64_t g0, int64_t g1) {
  thread_local QuantRowTerms terms;
  const QuantizedActivations& x = *p.x;
  const int64_t m = x.m, nb = x.k / kQuantBlock;
  constexpr int64_t kH = T == QuantType::kQ6_K ? 2 : 1;
  for (int64_t c0 = 0; c0 < m; c0 += kQuantRowChunk) {
    const int64_t c1 = std::min(m, c0 + kQuantRowChunk);
    quant_row_terms(x, kOffset<T, kVnni>, kH == 2, c0, c1, terms);
    const auto at = [&](int64_t i) {
      return RowTile{&x, i, terms.neg_off.data() + (i - c0) * nb * kH, terms.dxs.data() + (i - c0) * nb};
    };
    for (int64_t g = g0; g < g1; ++g) {
      if constexpr (kHasRow1<T>) {
        if (c1 - c0 == 1) {  // one row in the chunk: both halves in one pass
          row1<T, kVnni>(p, g, at(c0));
          continue;
        }
      }
      for (int h = 0; h < 2; ++h) {
        int64_t i = c0;
        for (; i + kTileRows <= c1; i += kTileRows) tile<T, kVnni, kTileRows>(p, g, h, at(i));
        switch (c1 - i) {
          case 3: tile<T, kVnni, 3>(p, g, h, at(i)); break;
          case 2: tile<T, kVnni, 2>(p, g, h, at(i)); break;
          case 1: tile<T, kVnni, 1>(p, g, h, at(i)); break;
          default: break;
        }
      }
    }
  }
}

template <bool kVnni>
void groups_any(const QuantGroupsParams& p, int64_t group_begin, int64_t group_end) {
  with_quant_type(p.w->type, [&](auto t) { groups<decltype(t)::value, kVnni>(p, group_begin, group_end); });
}

}  // namespace
}  // namespace spindle::kernels::cpu
