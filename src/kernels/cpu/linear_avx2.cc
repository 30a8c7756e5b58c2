// Direct linear kernel with AVX2 + FMA (8 floats per vector); see linear_isa.h. Compiled with
// -mavx2 -mfma -mf16c (kernels/CMakeLists.txt); everything ISA-specific stays in this file.
//
// Tile: MR rows of x times NR rows of W, MR * NR accumulators of 8 lanes each running along k;
// each W vector (bf16 widened by a 16-bit shift) is used MR times, each x vector NR times. A
// call's rows go in passes of 1-4 rows over each L2-resident sub-block of W, so W comes from
// memory (or L3) once per call; the multi-row tiles (and every tile whose W is small) prefetch W
// in software, without which they wait on it (bench/results/2026-12-02-cpu-smallm).
#include <immintrin.h>

#include "kernels/cpu/linear_isa.h"

namespace spindle::kernels::cpu {
namespace {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline float scalar(float v) { return v; }
inline float scalar(uint16_t v) {
  const uint32_t bits = uint32_t{v} << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

// (No std:: templates in ISA files: a non-inlined copy could be linked into non-AVX2 callers.)
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// W is prefetched in software (a prefetch never faults) by the rule of linear_isa.h's
// kLinearTileAheadMaxBytes / kLinearAheadBytes, shared with the other ISA's kernel.

// y[i, j0 + r] for i < MR, r < NR. x: [MR, k] (row stride k); w: NR rows from column j0, NR * k
// contiguous elements; next: the W the caller runs next, prefetched while this tile runs, or
// null; ahead: prefetch this tile's rows ahead instead (next null).
//
// Every y element is the same sum in the same order whatever MR and NR, so a row's outputs do
// not depend on how many rows share the call: lane l sums x * w at t = l, l + 8, ... by FMA,
// then hsum, then the k % 8 tail in order, then the bias.
template <typename T, int MR, int NR>
void tile(const float* x, const T* w, int64_t k, float* y, int64_t ldy, const float* bias, const T* next, bool ahead) {
  constexpr int64_t kLineMask = 64 / int64_t(sizeof(T)) - 1;
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_setzero_ps();
  const char* pf = reinterpret_cast<const char*>(next);
  int64_t t = 0;
  for (; t + 8 <= k; t += 8) {
    if (next) {
      // 8 * NR elements of the next tile per step (one prefetch per 64-byte line): all of it by
      // the end of this one.
      constexpr int kStepBytes = 8 * NR * int(sizeof(T));
      for (int b = 0; b < kStepBytes; b += 64) _mm_prefetch(pf + t * NR * int64_t(sizeof(T)) + b, _MM_HINT_T0);
    } else if (ahead && (t & kLineMask) == 0) {
      // One line per W row every 64 bytes of it, kLinearAheadBytes ahead.
      for (int r = 0; r < NR; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w + r * k + t) + kLinearAheadBytes, _MM_HINT_T0);
    }
    __m256 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(x + i * k + t);
    for (int r = 0; r < NR; ++r) {
      const __m256 wv = load8(w + r * k + t);
      for (int i = 0; i < MR; ++i) acc[i][r] = _mm256_fmadd_ps(xv[i], wv, acc[i][r]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int r = 0; r < NR; ++r) {
      float s = hsum(acc[i][r]);
      for (int64_t u = t; u < k; ++u) s += x[i * k + u] * scalar(w[r * k + u]);
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

// Rows [i0, i0 + rows) over columns [c0, c1), rows <= 4. Measured (bench_linear --small-m-cpu,
// one thread, 2-core EPYC, bench/results/2026-12-02-cpu-smallm): W from L3 (kjv-tiny's 28 MB,
// k = 384 and 1024: tiles of <= 16 KiB) wants the next tile prefetched at every m (m = 1: 2.0
// vs 3.6 ms per forward, m = 5: 3.3 vs 6.2); W from memory (the 1B shape) at m = 1-2, whose
// tiles there are 24-32 KiB, runs best on the hardware prefetcher alone (rows ahead at m = 1: 56
// vs 44 ms; m = 2: 63 vs 46), at m >= 3, whose tiles compute 3-4x longer per W byte, with the
// software prefetch (next tile at k = 2048, rows ahead at k = 8192; m = 4: 56 vs 61 ms, m = 5:
// 77 vs 83).
template <typename T>
void pass(const LinearSliceParams& p, int64_t i0, int64_t rows, int64_t c0, int64_t c1) {
  switch (rows) {
    case 1:
      columns<T, 1, 8>(p, i0, c0, c1, false);
      break;
    case 2:
      columns<T, 2, 6>(p, i0, c0, c1, false);
      break;
    case 3:
      columns<T, 3, 4>(p, i0, c0, c1, true);
      break;
    default:
      columns<T, 4, 3>(p, i0, c0, c1, true);
      break;
  }
}

template <typename T>
void slice(const LinearSliceParams& p, int64_t col_begin, int64_t col_end) {
  // Rows go in ceil(m / 4) groups of near-equal size (5 = 3 + 2, 6 = 3 + 3, 7 = 4 + 3): no 1-row
  // pass after a 4-row one (the 1-row tile does about half the 4-row tile's FMAs per cycle).
  const int64_t groups = (p.m + 3) / 4;
  // Sub-blocks of columns keep their W rows in L2 while every group of x rows passes over them:
  // W comes from memory once per call, whatever m.
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

void linear_slice_avx2(const LinearSliceParams& p, int64_t col_begin, int64_t col_end) {
  if (p.w_dtype == DType::kF32) {
    slice<float>(p, col_begin, col_end);
  } else {
    slice<uint16_t>(p, col_begin, col_end);
  }
}

}  // namespace spindle::kernels::cpu
