// Quantized linear kernel with AVX-512 VNNI (vpdpbusd on 16 weight rows per vector); the layout and
// the arithmetic are in quant_linear.h. Compiled with -mavx512vnni (kernels/CMakeLists.txt).
//
// Per 32-element block b, weight group g (16 rows) and activation row i: the eight vectors of
// unsigned quants (Q8_0: q xor 0x80 = q + 128) are dotted with the broadcast int8 activations in
// two int32 chains (vectors 0-3, k 0..15 and 4-7, k 16..31); the integer offset (Q8_0 128, Q4_0 8,
// Q5_0 16, Q6_K 32) times the activation half-block sum is subtracted exactly; then, in f32,
//   acc += float(isum) * (scale * dx)          (Q6_K: once per half, each with its own scale)
//   acc -= min * (dx * xsum)                   (Q4_K, Q5_K, Q5_1)
// in that order for every block, whatever the number of rows computed together.
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

// acc[i] += block b of activation rows i0 .. i0 + MT - 1 against the decoded block.
template <QuantType T, int MT>
inline void rows_block(const Block& blk, const QuantizedActivations& x, int64_t i0, int64_t b, __m512* acc) {
  const int64_t k = x.k, nb = k / kQuantBlock;
  for (int i = 0; i < MT; ++i) {
    const int8_t* xq = x.q.data() + (i0 + i) * k + b * kQuantBlock;
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
    for (int t = 0; t < 4; ++t) {
      lo = _mm512_dpbusd_epi32(lo, blk.w[t], _mm512_set1_epi32(load32(xq + 4 * t)));
      hi = _mm512_dpbusd_epi32(hi, blk.w[t + 4], _mm512_set1_epi32(load32(xq + 16 + 4 * t)));
    }
    const float dx = x.scale[(i0 + i) * nb + b];
    const int32_t* s16 = x.sum16.data() + (i0 + i) * (k / 16) + 2 * b;
    const __m512 vdx = _mm512_set1_ps(dx);
    if constexpr (T == QuantType::kQ6_K) {
      lo = _mm512_sub_epi32(lo, _mm512_set1_epi32(kOffset<T> * s16[0]));
      hi = _mm512_sub_epi32(hi, _mm512_set1_epi32(kOffset<T> * s16[1]));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(blk.scale_lo, vdx), acc[i]);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(blk.scale_hi, vdx), acc[i]);
    } else {
      __m512i sum = _mm512_add_epi32(lo, hi);
      if constexpr (kOffset<T> != 0) sum = _mm512_sub_epi32(sum, _mm512_set1_epi32(kOffset<T> * (s16[0] + s16[1])));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(blk.scale_lo, vdx), acc[i]);
      if constexpr (ql::kHasMin<T>) {
        acc[i] = _mm512_fnmadd_ps(blk.min, _mm512_set1_ps(dx * static_cast<float>(s16[0] + s16[1])), acc[i]);
      }
    }
  }
}

// y[i0 + i, 16 g + r] for i < MT, r < 16 (valid columns only).
template <QuantType T, int MT>
void tile(const QuantGroupsParams& p, int64_t g, int64_t i0) {
  const PackedQuantWeight& w = *p.w;
  const uint8_t* gw = w.data() + g * w.group_bytes;
  const int64_t nb = w.k / kQuantBlock;
  __m512 acc[MT];
  for (int i = 0; i < MT; ++i) acc[i] = _mm512_setzero_ps();
  Block blk;
  blk.min = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    decode<T>(gw, b, blk);
    rows_block<T, MT>(blk, *p.x, i0, b, acc);
  }
  const int64_t col = g * kQuantGroupRows;
  const __mmask16 mask = static_cast<__mmask16>((1u << std::min<int64_t>(16, w.n - col)) - 1);
  for (int i = 0; i < MT; ++i) _mm512_mask_storeu_ps(p.y + (i0 + i) * w.n + col, mask, acc[i]);
}

// Rows of x are taken in chunks of kRowChunk (their int8 quants, k bytes a row, stay in L2 while
// the chunk passes every group of the range), in tiles of up to 4 rows against one group.
constexpr int64_t kRowChunk = 64;

template <QuantType T>
void groups(const QuantGroupsParams& p, int64_t g0, int64_t g1) {
  const int64_t m = p.x->m;
  for (int64_t c0 = 0; c0 < m; c0 += kRowChunk) {
    const int64_t c1 = std::min(m, c0 + kRowChunk);
    for (int64_t g = g0; g < g1; ++g) {
      int64_t i = c0;
      for (; i + 4 <= c1; i += 4) tile<T, 4>(p, g, i);
      switch (c1 - i) {
        case 3: tile<T, 3>(p, g, i); break;
        case 2: tile<T, 2>(p, g, i); break;
        case 1: tile<T, 1>(p, g, i); break;
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
