// Internal: the AVX-512 code shared by the direct linear kernels linear_avx512.cc (f32 FMA) and
// linear_avx512_bf16.cc (vdpbf16ps). Included only by files compiled with the AVX-512 flags of
// kernels/CMakeLists.txt; everything is in an unnamed namespace (no std:: templates), so no
// ISA-flagged copy can be linked into callers on other CPUs.
#pragma once

// GCC 12's AVX-512 headers trip these on their own _mm512_undefined_* (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "kernels/cpu/linear_isa.h"

namespace spindle::kernels::cpu {
namespace {

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Rows go in ceil(m / kLinearAvx512PassRows) groups of near-equal size (5 in one pass, a
// speculative verify of 4 drafts; 6 = 3 + 3, 7 = 4 + 3, 11 = 4 + 4 + 3: no 1-row pass after a 5-row
// one), each over every sub-block of kLinearSubBlockCols columns, which stays in L2 between groups.
inline constexpr int64_t kLinearAvx512PassRows = 5;

// Calls pass(i0, rows, c0, c1) for every sub-block [c0, c1) of [col_begin, col_end) and every row
// group [i0, i0 + rows) of m rows, sub-block by sub-block.
template <typename Pass>
inline void for_each_pass(int64_t m, int64_t col_begin, int64_t col_end, Pass pass) {
  const int64_t groups = (m + kLinearAvx512PassRows - 1) / kLinearAvx512PassRows;
  for (int64_t c0 = col_begin; c0 < col_end; c0 += kLinearSubBlockCols) {
    const int64_t c1 = min64(col_end, c0 + kLinearSubBlockCols);
    for (int64_t g = 0, i0 = 0; g < groups; ++g) {
      const int64_t rows = m / groups + (g < m % groups ? 1 : 0);
      pass(i0, rows, c0, c1);
      i0 += rows;
    }
  }
}

// A tile width as a type, for for_each_tile's callback.
template <int N>
struct TileCols {
  static constexpr int value = N;
};

// Walks columns [c0, c1) in tiles of NR columns, then of 4, then of 1 (a column's sum does not
// depend on its tile): run(TileCols<width>{}, j, prefetch_next, rows_ahead). Full tiles get
// (next_ahead, full_rows_ahead), the narrower tail tiles (false, tail_rows_ahead).
template <int NR, typename Run>
inline void for_each_tile(int64_t c0, int64_t c1, bool next_ahead, bool full_rows_ahead, bool tail_rows_ahead,
                          Run run) {
  int64_t j = c0;
  for (; j + NR <= c1; j += NR) run(TileCols<NR>{}, j, next_ahead, full_rows_ahead);
  if constexpr (NR > 4) {
    for (; j + 4 <= c1; j += 4) run(TileCols<4>{}, j, false, tail_rows_ahead);
  }
  for (; j < c1; ++j) run(TileCols<1>{}, j, false, tail_rows_ahead);
}

// The horizontal sums of 4 accumulators a..d, each by the tree of GCC's _mm512_reduce_add_ps
// (lanes i + (i + 8), then + (i + 4), then + (i + 2), then + (i + 1)), returned as [a, b, c, d]:
// the same value, bit for bit, as 4 separate reductions, in 11 shuffles and adds instead of ~28.
// Each accumulator's tree only ever adds its own lanes, so the sums do not depend on which
// accumulators share a call (zero padding included).
inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // [a_i + a_{i+8} (i < 8), b_i + b_{i+8}] and the same for c, d.
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  // 128-bit block q of v: accumulator q's T6_j = T3_j + T3_{j+4}, j < 4 (a, b, c, d).
  const __m512 v = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
  // Per block: [T6_0 + T6_2, T6_1 + T6_3, ...], then lane 0 of each block: T8_0 + T8_1.
  const __m512 w = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 u = _mm512_add_ps(w, _mm512_permute_ps(w, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), u));
}

// y[i * ldy + r] = sum of acc[i][r] (reduce4's tree) + bias[r] (when bias), i < MR, r < NR: 4
// columns at a time, zero-padded past NR (the same scalar additions as one column at a time).
template <int MR, int NR>
inline void store_sums(const __m512 (&acc)[MR][NR], float* y, int64_t ldy, const float* bias) {
  const __m512 zero = _mm512_setzero_ps();
  for (int i = 0; i < MR; ++i) {
    for (int r = 0; r < NR; r += 4) {
      const __m128 s = reduce4(acc[i][r], r + 1 < NR ? acc[i][r + 1] : zero, r + 2 < NR ? acc[i][r + 2] : zero,
                               r + 3 < NR ? acc[i][r + 3] : zero);
      const int n = NR - r < 4 ? NR - r : 4;
      const __mmask8 keep = static_cast<__mmask8>((1u << n) - 1);
      __m128 out = s;
      if (bias) out = _mm_add_ps(s, _mm_maskz_loadu_ps(keep, bias + r));
      _mm_mask_storeu_ps(y + i * ldy + r, keep, out);
    }
  }
}

}  // namespace
}  // namespace spindle::kernels::cpu
