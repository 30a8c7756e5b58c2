// Direct linear kernel with AVX-512F/BW/VL (16 floats per vector); see linear_isa.h. Compiled
// with the AVX-512 flags of kernels/CMakeLists.txt; everything ISA-specific stays in this file.
//
// Same tiling as linear_avx2.cc with 32 registers (up to 24 accumulators), plus 5-row passes
// (a speculative verify of 4 drafts in one pass over W); the k tail is read with masked loads, so
// there is no scalar remainder loop. W is prefetched in software as linear_avx2.cc does it (the
// same rule and byte limits; 5-row tiles prefetch their rows ahead): without it a 1-row kjv-tiny
// forward, whose weights come from L3, ran at 2.9 ms instead of avx2's 1.35 ms on a 2-core EPYC
// (bench/results/2026-12-03-spec-cpu).
//
// The sum of every output element is fixed: 16 f32 lanes, lane l accumulating x[t] * w[t] by FMA
// for t = l, l + 16, ... in order, then the tree of GCC's _mm512_reduce_add_ps, then + bias
// (tests/kernels/linear_test.cc, Avx512IsTheSumInItsStatedOrder, spells it out in scalar code).
// Row groups, tile shapes, widening and the reduction code may change; that order may not.
// bench/results/2026-12-04-spec-cpu2: one-instruction bf16 widening, the 4-at-a-time reduction
// and 5-row passes took a 5-row kjv-tiny verify from ~2.0x to ~1.6x a 1-row step.

// GCC 12's AVX-512 headers trip these on their own _mm512_undefined_* (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "kernels/cpu/linear_isa.h"

namespace spindle::kernels::cpu {
namespace {

// (No std:: templates in ISA files: a non-inlined copy could be linked into non-AVX-512 callers.)
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// bf16 -> f32 widening in one shuffle: vpermw places bf16 element i in the high half of 32-bit
// lane i and zeroes the low halves (mask 0xAAAAAAAA): exactly float(bf16), in lane order. (Zero
// extension plus a shift, as before, is the same value in two instructions.)
inline __m512i widen_index() {
  return _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1,
                          0, 0, 0);
}
inline __m512 widen(__m256i raw, __m512i index) {
  return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, index, _mm512_castsi256_si512(raw)));
}
inline __m512 load16(const float* p, __m512i) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p, __m512i index) {
  return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), index);
}
inline __m512 load16(const float* p, __mmask16 m, __m512i) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const uint16_t* p, __mmask16 m, __m512i index) {
  return widen(_mm256_maskz_loadu_epi16(m, p), index);
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

// W is prefetched in software (a prefetch never faults) by the rule of linear_isa.h's
// kLinearTileAheadMaxBytes / kLinearAheadBytes, shared with the other ISA's kernel.

// y[i, j0 + r] for i < MR, r < NR. x: [MR, k] (row stride k); w: NR rows from column j0; next:
// the W the caller runs next, prefetched while this tile runs, or null; ahead: prefetch this
// tile's rows ahead instead (next null). Prefetching changes no arithmetic: each y element is the
// same sum in the same order whatever MR and NR.
template <typename T, int MR, int NR>
void tile(const float* x, const T* w, int64_t k, float* y, int64_t ldy, const float* bias, const T* next, bool ahead) {
  constexpr int64_t kLineMask = 64 / int64_t(sizeof(T)) - 1;
  const __m512i index = widen_index();
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  const char* pf = reinterpret_cast<const char*>(next);
  int64_t t = 0;
  for (; t + 16 <= k; t += 16) {
    if (next) {
      // 16 * NR elements of the next tile per step (one prefetch per 64-byte line): all of it by
      // the end of this one.
      constexpr int kStepBytes = 16 * NR * int(sizeof(T));
      for (int b = 0; b < kStepBytes; b += 64) _mm_prefetch(pf + t * NR * int64_t(sizeof(T)) + b, _MM_HINT_T0);
    } else if (ahead && (t & kLineMask) == 0) {
      // One line per W row every 64 bytes of it, kLinearAheadBytes ahead.
      for (int r = 0; r < NR; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w + r * k + t) + kLinearAheadBytes, _MM_HINT_T0);
    }
    __m512 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = _mm512_loadu_ps(x + i * k + t);
    for (int r = 0; r < NR; ++r) {
      const __m512 wv = load16(w + r * k + t, index);
      for (int i = 0; i < MR; ++i) acc[i][r] = _mm512_fmadd_ps(xv[i], wv, acc[i][r]);
    }
  }
  if (t < k) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - t)) - 1);
    __m512 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = load16(x + i * k + t, mask, index);
    for (int r = 0; r < NR; ++r) {
      const __m512 wv = load16(w + r * k + t, mask, index);
      for (int i = 0; i < MR; ++i) acc[i][r] = _mm512_fmadd_ps(xv[i], wv, acc[i][r]);
    }
  }
  // Sums of 4 columns at a time (zero-padded past NR), plus the bias (the same scalar addition).
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

// Columns [c0, c1) for MR rows of x starting at row i0. Small tiles prefetch the next tile's W;
// larger ones prefetch their own rows ahead when rows_ahead.
template <typename T, int MR, int NR>
void columns(const LinearSliceParams& p, int64_t i0, int64_t c0, int64_t c1, bool rows_ahead) {
  const T* w = static_cast<const T*>(p.w);
  const float* x = p.x + i0 * p.k;
  float* y = p.y + i0 * p.n;
  int64_t j = c0;
  // (5-row tiles prefetch rows ahead: with the next tile's W prefetched, 1B-shaped products from
  // memory ran 5 rows in 38.8 instead of 31.3 ms, bench/results/2026-12-04-spec-cpu2.)
  const bool tile_ahead = NR * p.k * int64_t(sizeof(T)) <= kLinearTileAheadMaxBytes && MR < 5;
  const bool ahead = rows_ahead && !tile_ahead;
  for (; j + NR <= c1; j += NR) {
    const T* next = tile_ahead ? w + (j + NR) * p.k : nullptr;
    tile<T, MR, NR>(x, w + j * p.k, p.k, y + j, p.n, p.bias ? p.bias + j : nullptr, next, ahead);
  }
  // The remaining columns in tiles of 4, then 1 (a column's sum does not depend on its tile).
  if constexpr (NR > 4) {
    for (; j + 4 <= c1; j += 4)
      tile<T, MR, 4>(x, w + j * p.k, p.k, y + j, p.n, p.bias ? p.bias + j : nullptr, nullptr, rows_ahead);
  }
  for (; j < c1; ++j)
    tile<T, MR, 1>(x, w + j * p.k, p.k, y + j, p.n, p.bias ? p.bias + j : nullptr, nullptr, rows_ahead);
}

// Rows [i0, i0 + rows) over columns [c0, c1), rows <= kMaxPassRows; the prefetch rule of
// linear_avx2.cc's pass (rows ahead from 3 rows). Each W vector is widened once per pass and
// used by every row of it, so fewer, larger passes widen less.
template <typename T>
void pass(const LinearSliceParams& p, int64_t i0, int64_t rows, int64_t c0, int64_t c1) {
  switch (rows) {
    case 1:
      columns<T, 1, 12>(p, i0, c0, c1, false);
      break;
    case 2:
      columns<T, 2, 12>(p, i0, c0, c1, false);
      break;
    case 3:
      columns<T, 3, 8>(p, i0, c0, c1, true);
      break;
    case 4:
      columns<T, 4, 6>(p, i0, c0, c1, true);
      break;
    default:  // 5 rows x 4 columns: 20 accumulators, 5 x vectors, W, the widening index
      columns<T, 5, 4>(p, i0, c0, c1, true);
      break;
  }
}

constexpr int64_t kMaxPassRows = 5;

template <typename T>
void slice(const LinearSliceParams& p, int64_t col_begin, int64_t col_end) {
  // Rows go in ceil(m / kMaxPassRows) groups of near-equal size (5 in one pass, a speculative
  // verify of 4 drafts; 6 = 3 + 3, 7 = 4 + 3, 11 = 4 + 4 + 3): no 1-row pass after a 5-row one.
  const int64_t groups = (p.m + kMaxPassRows - 1) / kMaxPassRows;
  for (int64_t c0 = col_begin; c0 < col_end; c0 += kLinearSubBlockCols) {
    const int64_t c1 = min64(col_end, c0 + kLinearSubBlockCols);
    for (int64_t g = 0, i0 = 0; g < groups; ++g) {
      const int64_t rows = p.m / groups + (g < p.m % groups ? 1 : 0);
      pass<T>(p, i0, rows, c0, c1);
      i0 += rows;
    }
  }
}

}  // namespace

void linear_slice_avx512(const LinearSliceParams& p, int64_t col_begin, int64_t col_end) {
  if (p.w_dtype == DType::kF32) {
    slice<float>(p, col_begin, col_end);
  } else {
    slice<uint16_t>(p, col_begin, col_end);
  }
}

}  // namespace spindle::kernels::cpu
