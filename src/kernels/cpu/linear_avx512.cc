// Direct linear kernel with AVX-512F/BW/VL (16 floats per vector); see linear_isa.h. Compiled
// with the AVX-512 flags of kernels/CMakeLists.txt; everything ISA-specific stays in this file.
//
// Same tiling as linear_avx2.cc with 32 registers (up to 24 accumulators); the k tail is read
// with masked loads, so there is no scalar remainder loop. W is prefetched in software as
// linear_avx2.cc does it (the same rule and byte limits): without it a 1-row kjv-tiny forward,
// whose weights come from L3, ran at 2.9 ms instead of avx2's 1.35 ms on a 2-core EPYC
// (bench/results/2026-12-03-spec-cpu).

// GCC 12's AVX-512 headers trip these on their own _mm512_undefined_* (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "kernels/cpu/linear_isa.h"

namespace spindle::kernels::cpu {
namespace {

// (No std:: templates in ISA files: a non-inlined copy could be linked into non-AVX-512 callers.)
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const uint16_t* p, __mmask16 m) {
  const __m256i raw = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
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
      const __m512 wv = load16(w + r * k + t);
      for (int i = 0; i < MR; ++i) acc[i][r] = _mm512_fmadd_ps(xv[i], wv, acc[i][r]);
    }
  }
  if (t < k) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - t)) - 1);
    __m512 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = load16(x + i * k + t, mask);
    for (int r = 0; r < NR; ++r) {
      const __m512 wv = load16(w + r * k + t, mask);
      for (int i = 0; i < MR; ++i) acc[i][r] = _mm512_fmadd_ps(xv[i], wv, acc[i][r]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int r = 0; r < NR; ++r) {
      const float s = _mm512_reduce_add_ps(acc[i][r]);
      y[i * ldy + r] = bias ? s + bias[r] : s;
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
  const bool tile_ahead = NR * p.k * int64_t(sizeof(T)) <= kLinearTileAheadMaxBytes;
  const bool ahead = rows_ahead && !tile_ahead;
  for (; j + NR <= c1; j += NR) {
    const T* next = tile_ahead ? w + (j + NR) * p.k : nullptr;
    tile<T, MR, NR>(x, w + j * p.k, p.k, y + j, p.n, p.bias ? p.bias + j : nullptr, next, ahead);
  }
  for (; j < c1; ++j)
    tile<T, MR, 1>(x, w + j * p.k, p.k, y + j, p.n, p.bias ? p.bias + j : nullptr, nullptr, rows_ahead);
}

// Rows [i0, i0 + rows) over columns [c0, c1), rows <= 4; the prefetch rule of linear_avx2.cc's
// pass (rows ahead from 3 rows).
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
    default:
      columns<T, 4, 6>(p, i0, c0, c1, true);
      break;
  }
}

template <typename T>
void slice(const LinearSliceParams& p, int64_t col_begin, int64_t col_end) {
  // Rows go in ceil(m / 4) groups of near-equal size (5 = 3 + 2, 6 = 3 + 3, 7 = 4 + 3), as in
  // linear_avx2.cc: no 1-row pass after a 4-row one.
  const int64_t groups = (p.m + 3) / 4;
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
