// Quantized linear kernel with AVX-512 VNNI (vpdpbusd on 16 weight rows per vector); the layout and
// the arithmetic are in quant_linear.h. Compiled with -mavx512vnni (kernels/CMakeLists.txt).
//
// Per 32-element block b, weight group g (16 rows) and activation row i: the eight vectors of
// unsigned quants (Q8_0: q xor 0x80 = q + 128) are dotted with the broadcast int8 activations in an
// int32 chain that starts from -offset * xsum (Q8_0 128, Q4_0 8, Q5_0 16, Q6_K 32; Q6_K one chain
// per half with its half's sum), so isum is exact; then, in f32,
//   acc += float(isum) * (scale * dx)          (Q6_K: once per half, each with its own scale)
//   acc -= min * (dx * xsum)                   (Q4_K, Q5_K, Q5_1; dx * xsum rounded once, quant_row_terms)
// in that order for every block, whatever the number of rows computed together.
// Rates: per row and block, 8 vpdpbusd and then a multiply and an FMA (one more FMA for the min;
// Q6_K two of each) on the same pipes (Zen 4: one zmm vpdpbusd or FMA a cycle, measured), so Q4_K
// peaks at 8/11 of the vpdpbusd rate; the decode, conversions and broadcasts go to other ports.
#include <algorithm>

#include "kernels/cpu/quant_linear_avx512_decode.h"

namespace spindle::kernels::cpu {
namespace {

template <QuantType T>
constexpr int32_t kOffset = T == QuantType::kQ8_0   ? 128
                            : T == QuantType::kQ4_0 ? 8
                            : T == QuantType::kQ5_0 ? 16
                            : T == QuantType::kQ6_K ? 32
                                                    : 0;

template <QuantType T>
constexpr int64_t kH = T == QuantType::kQ6_K ? 2 : 1;  // QuantRowTerms::neg_off entries a block

// The activation rows of a tile: their terms (quant_row_terms, from the chunk's first row) and x.
struct RowTile {
  const QuantizedActivations* x;
  int64_t i0;             // first row of the tile in x
  const int32_t* neg_off;  // the tile's first row's entry of QuantRowTerms::neg_off
  const float* dxs;        // and of QuantRowTerms::dxs
};

// The integer dots of vectors w[t0 .. t0 + NT - 1] (k 4 t0 .. 4 (t0 + NT) - 1 of the block) with
// rows 0 .. MT - 1 of the tile, added to sum[i]; t outer and rows inner, so the MT chains are
// independent neighbours in the instruction stream (the scheduler always has MT vpdpbusd ready).
template <int MT, int NT>
inline void dots(const __m512i* w, const int8_t* const* xq, int t0, __m512i* sum) {
#pragma GCC unroll 8
  for (int t = t0; t < t0 + NT; ++t) {
#pragma GCC unroll 16
    for (int i = 0; i < MT; ++i) sum[i] = _mm512_dpbusd_epi32(sum[i], w[t], _mm512_set1_epi32(load32(xq[i] + 4 * t)));
  }
}

// acc[i] += block b of activation rows i0 .. i0 + MT - 1 against the decoded block. Each integer
// chain starts from the exact -offset * xsum (QuantRowTerms); below 4 rows the eight vpdpbusd of a
// row run as two chains (k 0..15, 16..31) for latency, summed before the conversion (the integer sum
// is the same either way). Q6_K: the halves one after the other, each with its own scale.
template <QuantType T, int MT>
inline void rows_block(const Block& blk, const RowTile& rt, int64_t b, __m512* acc) {
  const QuantizedActivations& x = *rt.x;
  const int64_t k = x.k, nb = k / kQuantBlock;
  constexpr bool kHalves = T == QuantType::kQ6_K;
  const int8_t* xq[MT];
  float dx[MT];
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i) {
    xq[i] = x.q.data() + (rt.i0 + i) * k + b * kQuantBlock;
    dx[i] = x.scale[(rt.i0 + i) * nb + b];
  }
  __m512i sum[MT];
  if constexpr (kHalves) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 16
      for (int i = 0; i < MT; ++i) sum[i] = _mm512_set1_epi32(rt.neg_off[(i * nb + b) * 2 + h]);
      dots<MT, 4>(blk.w, xq, 4 * h, sum);
      const __m512 scale = h == 0 ? blk.scale_lo : blk.scale_hi;
#pragma GCC unroll 16
      for (int i = 0; i < MT; ++i) {
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[i]), _mm512_mul_ps(scale, _mm512_set1_ps(dx[i])), acc[i]);
      }
    }
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < MT; ++i) {
      sum[i] = kOffset<T> != 0 ? _mm512_set1_epi32(rt.neg_off[i * nb + b]) : _mm512_setzero_si512();
    }
    if constexpr (MT < 4) {
      __m512i hi[MT];
      for (int i = 0; i < MT; ++i) hi[i] = _mm512_setzero_si512();
      dots<MT, 4>(blk.w, xq, 0, sum);
      dots<MT, 4>(blk.w, xq, 4, hi);
      for (int i = 0; i < MT; ++i) sum[i] = _mm512_add_epi32(sum[i], hi[i]);
    } else {
      dots<MT, 8>(blk.w, xq, 0, sum);
    }
#pragma GCC unroll 16
    for (int i = 0; i < MT; ++i) {
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[i]), _mm512_mul_ps(blk.scale_lo, _mm512_set1_ps(dx[i])), acc[i]);
      if constexpr (ql::kHasMin<T>) acc[i] = _mm512_fnmadd_ps(blk.min, _mm512_set1_ps(rt.dxs[i * nb + b]), acc[i]);
    }
  }
}

// y[i0 + i, 16 g + r] for i < MT, r < 16 (valid columns only).
template <QuantType T, int MT>
void tile(const QuantGroupsParams& p, int64_t g, const RowTile& rt) {
  const PackedQuantWeight& w = *p.w;
  const uint8_t* gw = w.data() + g * w.group_bytes;
  const int64_t nb = w.k / kQuantBlock;
  __m512 acc[MT];
  for (int i = 0; i < MT; ++i) acc[i] = _mm512_setzero_ps();
  Block blk;
  blk.min = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    decode<T>(gw, b, blk);
    rows_block<T, MT>(blk, rt, b, acc);
  }
  store_group(p, g, rt.i0, MT, acc);
}

// ---- One activation row (decode): the arithmetic of tile<T, 1>, block by block in the same order
// (so bit for bit equal, and a row's outputs still do not depend on m), in fewer instructions a
// block: super-blocks walked with their 8 blocks unrolled at constant offsets (no per-block index
// arithmetic), d / dmin converted once a super-block, every activation broadcast folded into its
// vpdpbusd ({1to16} memory operand: GCC 12 emits a separate vpbroadcastd for the intrinsic), and
// (Q4_K) the high nibbles dotted as v & 0xF0 = 16 q in their own chain, shifted down by 4 once a
// block (exact: the chain is a multiple of 16, |chain| <= 16 * 16 * 15 * 127), instead of a shift
// and a mask per vector. Q6_K merges each vector's high bits with one vpternlogd.
// Instructions a block of 32 x 16 rows (objdump of the loops): Q4_K 65 -> 36, Q6_K 82 -> 56. Time
// (Zen 4 dev VM, one thread's CPU time): Q4_K 1.2-1.27x on weights of 0.6-10 MB (L2/L3), Q6_K
// 1.0-1.1x, and ~1.0x on weights streamed from memory (the 128256x2048 LM head): the loop was
// not bound by its instruction count there (bench/results/2026-12-07-devvm-zen4-quant-rows).

// acc + the dot of 16 rows' unsigned quants w with the 4 int8 activations at x, broadcast.
inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const int8_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
}

// A 64-byte load kept in a register: a vector used twice (a nibble chunk's two halves, a Q6_K
// high-bit chunk's four shifts) would otherwise be folded into each use as its own memory operand,
// and Zen 4 loads one zmm a cycle (the first version did: Q6_K 16 zmm loads a block instead of 6,
// slower than the code it replaced on cache-resident weights).
inline __m512i load_once(const uint8_t* p) {
  __m512i v = _mm512_loadu_si512(p);
  asm("" : "+v"(v));
  return v;
}

// Whether row1<T> exists for T (the rest run tile<T, 1>; a Q8_0 version, 36 -> 28 instructions a
// block, measured 0.93-1.00x of tile<Q8_0, 1> and was dropped).
template <QuantType T>
constexpr bool kHasRow1 = T == QuantType::kQ4_K || T == QuantType::kQ6_K;

// acc + float(isum) * (scale * dx): the f32 step of rows_block.
inline __m512 scale_step(__m512 acc, __m512i isum, __m512 scale, float dx) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(scale, _mm512_set1_ps(dx)), acc);
}

// Q4_K block `sub` of the super-block at s (d, dmin converted), activations xb (32), into acc.
inline __m512 q4_k_block(const uint8_t* s, int sub, __m512 d, __m512 dmin, const int8_t* xb, float dx, float dxs,
                         __m512 acc) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  const uint8_t* u = s + ql::kKHeader + sub * ql::kQ4_KSub;
  __m512i lo = _mm512_setzero_si512(), hi16 = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i v = load_once(u + 64 * c);
    lo = dpbusd_bcast(lo, _mm512_and_si512(v, low), xb + 4 * c);
    hi16 = dpbusd_bcast(hi16, _mm512_andnot_si512(low, v), xb + 16 + 4 * c);
  }
  const __m512i isum = _mm512_add_epi32(lo, _mm512_srai_epi32(hi16, 4));
  const __m512 scale = _mm512_mul_ps(d, u8x16(s + 2 * ql::kScaleBytes + 16 * sub));
  acc = scale_step(acc, isum, scale, dx);
  const __m512 min = _mm512_mul_ps(dmin, u8x16(s + 2 * ql::kScaleBytes + 128 + 16 * sub));
  return _mm512_fnmadd_ps(min, _mm512_set1_ps(dxs), acc);
}

// Q6_K block `blk` of the super-block at s: per half h, the 4 vectors 4h + c (nibble chunk c's low
// (h = 0) or high (h = 1) nibbles, high bits 2c, 2c + 1 of chunk h at bits 4, 5) from -32 * xsum.
inline __m512 q6_k_block(const uint8_t* s, int blk, __m512 d, const int8_t* xb, float dx, const int32_t* neg_off,
                         __m512 acc) {
  const __m512i low = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  const uint8_t* u = s + ql::kQ6_KHeader + blk * ql::kQ6_KSub;
  __m512i vs[4];  // the nibble chunks, loaded once for both halves
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i qh = load_once(u + ql::kNibbleBytes + 64 * h);
    const __m512i high[4] = {_mm512_slli_epi16(qh, 4), _mm512_slli_epi16(qh, 2), qh, _mm512_srli_epi16(qh, 2)};
    __m512i sum = _mm512_set1_epi32(neg_off[h]);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i v = h == 0 ? load_once(u + 64 * c) : vs[c];
      if (h == 0) vs[c] = v;
      const __m512i nib = _mm512_and_si512(h == 0 ? v : _mm512_srli_epi16(v, 4), low);
      const __m512i w = _mm512_ternarylogic_epi32(nib, high[c], bits45, 0xF8);  // nib | (high & 0x30)
      sum = dpbusd_bcast(sum, w, xb + 16 * h + 4 * c);
    }
    const __m512 scale = _mm512_mul_ps(d, i8x16(s + ql::kScaleBytes + 16 * (2 * blk + h)));
    acc = scale_step(acc, sum, scale, dx);
  }
  return acc;
}

// y[rt.i0, 16 g + r] for r < 16 (valid columns only); T is Q4_K or Q6_K.
template <QuantType T>
void row1(const QuantGroupsParams& p, int64_t g, const RowTile& rt) {
  const PackedQuantWeight& w = *p.w;
  const uint8_t* gw = w.data() + g * w.group_bytes;
  const QuantizedActivations& x = *rt.x;
  const int64_t nb = w.k / kQuantBlock;
  const int8_t* xq = x.q.data() + rt.i0 * x.k;
  const float* dx = x.scale.data() + rt.i0 * nb;
  __m512 acc = _mm512_setzero_ps();
  constexpr int64_t kSuper = T == QuantType::kQ4_K ? ql::kQ4_KSuper : ql::kQ6_KSuper;
  for (int64_t sb = 0; sb < nb / 8; ++sb) {
    const uint8_t* s = gw + sb * kSuper;
    const int64_t b0 = 8 * sb;
    const int8_t* xs = xq + b0 * kQuantBlock;
    const __m512 d = fp16x16(s);
    if constexpr (T == QuantType::kQ4_K) {
      const __m512 dmin = fp16x16(s + ql::kScaleBytes);
#pragma GCC unroll 8
      for (int sub = 0; sub < 8; ++sub) {
        acc = q4_k_block(s, sub, d, dmin, xs + sub * kQuantBlock, dx[b0 + sub], rt.dxs[b0 + sub], acc);
      }
    } else {
#pragma GCC unroll 8
      for (int blk = 0; blk < 8; ++blk) {
        acc = q6_k_block(s, blk, d, xs + blk * kQuantBlock, dx[b0 + blk], rt.neg_off + 2 * (b0 + blk), acc);
      }
    }
  }
  store_group(p, g, rt.i0, 1, &acc);
}

// Rows of x in chunks of kQuantRowChunk, in tiles of kTileRows rows (the 8 decoded vectors, the
// tile's accumulators and the block's scales stay in the 32 zmm registers), the rest by 4, 3, 2, 1.
constexpr int kTileRows = 8;

template <QuantType T>
void groups(const QuantGroupsParams& p, int64_t g0, int64_t g1) {
  thread_local QuantRowTerms terms;
  const QuantizedActivations& x = *p.x;
  const int64_t m = x.m, nb = x.k / kQuantBlock;
  for (int64_t c0 = 0; c0 < m; c0 += kQuantRowChunk) {
    const int64_t c1 = std::min(m, c0 + kQuantRowChunk);
    quant_row_terms(x, kOffset<T>, kH<T> == 2, c0, c1, terms);
    const auto at = [&](int64_t i) {
      return RowTile{&x, i, terms.neg_off.data() + (i - c0) * nb * kH<T>, terms.dxs.data() + (i - c0) * nb};
    };
    for (int64_t g = g0; g < g1; ++g) {
      int64_t i = c0;
      for (; i + kTileRows <= c1; i += kTileRows) tile<T, kTileRows>(p, g, at(i));
      if (c1 - i >= 4) tile<T, 4>(p, g, at(i)), i += 4;
      switch (c1 - i) {
        case 3: tile<T, 3>(p, g, at(i)); break;
        case 2: tile<T, 2>(p, g, at(i)); break;
        case 1:
          if constexpr (kHasRow1<T>) row1<T>(p, g, at(i));
          else tile<T, 1>(p, g, at(i));
          break;
        default: break;
      }
    }
  }
}

}  // namespace

void quant_linear_groups_avx512_vnni(const QuantGroupsParams& p, int64_t group_begin, int64_t group_end) {
  with_quant_type(p.w->type, [&](auto t) { groups<decltype(t)::value>(p, group_begin, group_end); });
}

}  // namespace spindle::kernels::cpu
