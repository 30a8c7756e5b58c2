// AVX2+FMA versions of the small ops whose scalar form costs real time in a prefill (ops.cc
// dispatches here when the CPU has AVX2 and FMA). Compiled with -mavx2 -mfma; see ops.h.
#include <immintrin.h>

#include <cstdint>

namespace spindle::kernels::cpu {
namespace {

// e^x for 8 lanes: x clamped to [-87.3, 88.7] (no denormal results), n = round(x / ln 2), r = x -
// n ln 2 (Cody-Waite, two constants), e^r by the degree-6 polynomial of Cephes' expf (|r| <=
// ln 2 / 2), times 2^n through the exponent bits; +inf above 88.7 (as expf overflows). About 1 ulp
// of f32 (checked by ops_test against float64).
inline __m256 exp8(__m256 x_in) {
  const __m256 x = _mm256_min_ps(_mm256_max_ps(x_in, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n: n in [-126, 128]; 2^128 is split as 2^127 * 2 so the exponent field never overflows.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 s2 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  const __m256 over = _mm256_cmp_ps(x_in, _mm256_set1_ps(88.7f), _CMP_GT_OQ);
  return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), over);
}

// silu(g) * u = g / (1 + e^-g) * u for 8 lanes.
inline __m256 silu_mul8(__m256 g, __m256 u) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

}  // namespace

void silu_mul_avx2(const float* gate, const float* up, int64_t in_stride, float* out, int64_t rows, int64_t cols) {
  // The last cols % 8 elements of a row go through the same vector code with masked loads and
  // stores, so every element's value depends on its inputs alone (not on its column).
  alignas(32) int32_t mask_bits[8];
  for (int j = 0; j < 8; ++j) mask_bits[j] = j < cols % 8 ? -1 : 0;
  const __m256i tail = _mm256_load_si256(reinterpret_cast<const __m256i*>(mask_bits));
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * in_stride;
    const float* u = up + r * in_stride;
    float* o = out + r * cols;
    int64_t i = 0;
    for (; i + 8 <= cols; i += 8) _mm256_storeu_ps(o + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < cols) {
      const __m256 y = silu_mul8(_mm256_maskload_ps(g + i, tail), _mm256_maskload_ps(u + i, tail));
      _mm256_maskstore_ps(o + i, tail, y);
    }
  }
}

}  // namespace spindle::kernels::cpu
