// Direct linear kernel with AVX2 + FMA (8 floats per vector); see linear_isa.h. Compiled with
// -mavx2 -mfma -mf16c (kernels/CMakeLists.txt); everything ISA-specific stays in this file.
//
// Tile: MR rows of x times NR rows of W, MR * NR accumulators of 8 lanes each running along k;
// each W vector (bf16 widened by a 16-bit shift) is used MR times, each x vector NR times.
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

// y[i, j0 + r] for i < MR, r < NR. x: [MR, k] (row stride k); w: NR rows from column j0.
template <typename T, int MR, int NR>
void tile(const float* x, const T* w, int64_t k, float* y, int64_t ldy, const float* bias) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 8 <= k; t += 8) {
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

// Columns [c0, c1) for MR rows of x starting at row i0.
template <typename T, int MR, int NR>
void columns(const LinearSliceParams& p, int64_t i0, int64_t c0, int64_t c1) {
  const T* w = static_cast<const T*>(p.w);
  const float* x = p.x + i0 * p.k;
  float* y = p.y + i0 * p.n;
  int64_t j = c0;
  for (; j + NR <= c1; j += NR) tile<T, MR, NR>(x, w + j * p.k, p.k, y + j, p.n, p.bias ? p.bias + j : nullptr);
  for (; j < c1; ++j) tile<T, MR, 1>(x, w + j * p.k, p.k, y + j, p.n, p.bias ? p.bias + j : nullptr);
}

template <typename T>
void slice(const LinearSliceParams& p, int64_t col_begin, int64_t col_end) {
  // Sub-blocks of columns keep their W rows in L2 while every group of x rows passes over them.
  for (int64_t c0 = col_begin; c0 < col_end; c0 += kLinearSubBlockCols) {
    const int64_t c1 = min64(col_end, c0 + kLinearSubBlockCols);
    for (int64_t i0 = 0; i0 < p.m; i0 += 4) {
      switch (min64(4, p.m - i0)) {
        case 1: columns<T, 1, 8>(p, i0, c0, c1); break;
        case 2: columns<T, 2, 6>(p, i0, c0, c1); break;
        case 3: columns<T, 3, 4>(p, i0, c0, c1); break;
        default: columns<T, 4, 3>(p, i0, c0, c1); break;
      }
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
