// Direct linear kernel with AVX-512F/BW/VL (16 floats per vector); see linear_isa.h. Compiled
// with the AVX-512 flags of kernels/CMakeLists.txt; everything ISA-specific stays in this file.
//
// Same tiling as linear_avx2.cc with 32 registers (up to 24 accumulators), plus 5-row passes
// (a speculative verify of 4 drafts in one pass over W); the k tail is read with masked loads, so
// there is no scalar remainder loop. W is prefetched in software (columns() has the rule; it
// started as linear_avx2.cc's, and the next tile now goes to L2 when it is too large for L1): without it a 1-row
// kjv-tiny forward, whose weights come from L3, ran at 2.9 ms instead of avx2's 1.35 ms on a 2-core EPYC
// (bench/results/2026-12-03-spec-cpu).
//
// The sum of every output element is fixed: 16 f32 lanes, lane l accumulating x[t] * w[t] by FMA
// for t = l, l + 16, ... in order, then the tree of GCC's _mm512_reduce_add_ps, then + bias
// (tests/kernels/linear_test.cc, Avx512IsTheSumInItsStatedOrder, spells it out in scalar code).
// Row groups, tile shapes, widening and the reduction code may change; that order may not.
// bench/results/2026-12-04-spec-cpu2: one-instruction bf16 widening, the 4-at-a-time reduction
// and 5-row passes took a 5-row kjv-tiny verify from ~2.0x to ~1.6x a 1-row step.

#include "kernels/cpu/linear_avx512_isa.h"

namespace spindle::kernels::cpu {
namespace {

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

// W is prefetched in software (a prefetch never faults) with linear_isa.h's
// kLinearTileAheadMaxBytes / kLinearAheadBytes, by the rule of columns() below.

// y[i, j0 + r] for i < MR, r < NR. x: [MR, k] (row stride k); w: NR rows from column j0; next:
// the W the caller runs next, prefetched while this tile runs, or null; ahead: prefetch this
// tile's rows ahead instead (next null). Prefetching changes no arithmetic: each y element is the
// same sum in the same order whatever MR and NR.
template <typename T, int MR, int NR>
void tile(const float* x, const T* w, int64_t k, float* y, int64_t ldy, const float* bias, const T* next,
          bool next_to_l2, bool ahead) {
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
      const char* line = pf + t * NR * int64_t(sizeof(T));
      if (next_to_l2) {
        for (int b = 0; b < kStepBytes; b += 64) _mm_prefetch(line + b, _MM_HINT_T1);
      } else {
        for (int b = 0; b < kStepBytes; b += 64) _mm_prefetch(line + b, _MM_HINT_T0);
      }
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
  store_sums<MR, NR>(acc, y, ldy, bias);
}

// Columns [c0, c1) for MR rows of x starting at row i0. Full tiles prefetch the next tile's W or
// their own rows ahead (below); the narrower tail tiles their own rows when rows_ahead.
template <typename T, int MR, int NR>
void columns(const LinearSliceParams& p, int64_t i0, int64_t c0, int64_t c1, bool rows_ahead) {
  const T* w = static_cast<const T*>(p.w);
  const float* x = p.x + i0 * p.k;
  float* y = p.y + i0 * p.n;
  // Passes of up to 4 rows prefetch the next tile as they run: into L1 when it is at most
  // kLinearTileAheadMaxBytes, else into L2 (larger tiles would not stay in L1; the L2 rule of
  // linear_avx512_bf16.cc: 1B shape, exact, 8 rounds alternating on 2 Zen 4 cores, decode batch 1
  // median 103.1 -> 94.0 ms, batch 16 307.7 -> 266.3 ms, bench/results/2026-12-04-zen4-spec).
  // 5-row passes prefetch their own rows ahead when W rows are long (with the next tile's W
  // prefetched, 1B-shaped products from memory ran 5 rows in 38.8 instead of 31.3 ms,
  // bench/results/2026-12-04-spec-cpu2), the next tile when rows are shorter than
  // 2 * kLinearAheadBytes ("ahead" of a 768-byte kjv-tiny row lands in the tile's own next row).
  const bool long_rows = p.k * int64_t(sizeof(T)) >= 2 * kLinearAheadBytes;
  const bool tile_ahead = MR < 5 || !long_rows;
  const bool next_to_l2 = NR * p.k * int64_t(sizeof(T)) > kLinearTileAheadMaxBytes;
  for_each_tile<NR>(c0, c1, tile_ahead, rows_ahead && !tile_ahead, rows_ahead,
                    [&](auto cols, int64_t j, bool next_ahead, bool ahead) {
                      constexpr int kCols = decltype(cols)::value;
                      tile<T, MR, kCols>(x, w + j * p.k, p.k, y + j, p.n, p.bias ? p.bias + j : nullptr,
                                         next_ahead ? w + (j + kCols) * p.k : nullptr, next_to_l2, ahead);
                    });
}

// Rows [i0, i0 + rows) over columns [c0, c1), rows <= kLinearAvx512PassRows; the prefetch rule of
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

template <typename T>
void slice(const LinearSliceParams& p, int64_t col_begin, int64_t col_end) {
  for_each_pass(p.m, col_begin, col_end,
                [&](int64_t i0, int64_t rows, int64_t c0, int64_t c1) { pass<T>(p, i0, rows, c0, c1); });
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
