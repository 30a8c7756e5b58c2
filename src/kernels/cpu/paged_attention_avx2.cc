// Paged attention with AVX2 + FMA (8 floats per vector). Algorithm and work split: see
// paged_attention_tiled.h. Compiled with -mavx2 -mfma -mf16c (kernels/CMakeLists.txt).
#include <immintrin.h>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/paged_attention_tiled.h"

namespace spindle::kernels::cpu {
namespace {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

inline float hmax(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// The 8 horizontal sums of v[0..7], in order, as one vector.
inline __m256 hsum8(const __m256 v[8]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]);
  const __m256 t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]);
  const __m256 t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// e^x per lane, relative error ~2e-7; x below -87.3 (and -inf) gives exactly 0.
inline __m256 exp8(__m256 x) {
  const __m256 valid = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504089f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.0f / 5040);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 720));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 120));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 24));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 6));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(0.5f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), valid);
}

// s[r][j] = q_r . k_j for R rows x J keys (R * J <= 8).
template <int R, int J, class KT>
inline void dot_block(const float* q, int q_stride, const KT* const* k, int D, float* s, int s_stride) {
  __m256 acc[R][J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int d = 0; d < D; d += 8) {
    __m256 kv[J];
    for (int j = 0; j < J; ++j) kv[j] = load8(k[j] + d);
    for (int r = 0; r < R; ++r) {
      const __m256 qv = _mm256_loadu_ps(q + r * q_stride + d);
      for (int j = 0; j < J; ++j) acc[r][j] = _mm256_fmadd_ps(qv, kv[j], acc[r][j]);
    }
  }
  __m256 v[8];
  for (int i = 0; i < 8; ++i) v[i] = i < R * J ? acc[i / J][i % J] : _mm256_setzero_ps();
  alignas(32) float sums[8];
  _mm256_store_ps(sums, hsum8(v));
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) s[r * s_stride + j] = sums[r * J + j];
}

template <int R, class KT>
inline void dot_rows(const float* q, int q_stride, const KT* const* k, int n, int D, float* s, int s_stride) {
  constexpr int J = R == 1 ? 8 : R == 2 ? 4 : 2;
  int j = 0;
  for (; j + J <= n; j += J) dot_block<R, J>(q, q_stride, k + j, D, s + j, s_stride);
  for (; j < n; ++j) dot_block<R, 1>(q, q_stride, k + j, D, s + j, s_stride);
}

// o[r][d0 .. d0 + 8 NV) = o * corr_r + sum_j p[r][j] v_j[...].
template <int R, int NV, class VT>
inline void pv_block(const float* pm, int p_stride, const VT* const* v, int n, int d0, float* o, int D,
                     const float* corr) {
  __m256 acc[R][NV];
  for (int r = 0; r < R; ++r) {
    const __m256 c = _mm256_set1_ps(corr[r]);
    for (int i = 0; i < NV; ++i) acc[r][i] = _mm256_mul_ps(_mm256_loadu_ps(o + r * D + d0 + 8 * i), c);
  }
  for (int j = 0; j < n; ++j) {
    __m256 vv[NV];
    for (int i = 0; i < NV; ++i) vv[i] = load8(v[j] + d0 + 8 * i);
    for (int r = 0; r < R; ++r) {
      const __m256 pb = _mm256_broadcast_ss(pm + r * p_stride + j);
      for (int i = 0; i < NV; ++i) acc[r][i] = _mm256_fmadd_ps(pb, vv[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < NV; ++i) _mm256_storeu_ps(o + r * D + d0 + 8 * i, acc[r][i]);
}

template <int R, class VT>
inline void pv_rows(const float* pm, int p_stride, const VT* const* v, int n, int D, float* o,
                    const float* corr) {
  constexpr int NV = R <= 2 ? 4 : 2;
  int d = 0;
  for (; d + 8 * NV <= D; d += 8 * NV) pv_block<R, NV>(pm, p_stride, v, n, d, o, D, corr);
  for (; d < D; d += 8) pv_block<R, 1>(pm, p_stride, v, n, d, o, D, corr);
}

struct Avx2 {
  static constexpr int kWidth = 8;
  static constexpr int kRowBlock = 4;

  template <class KT>
  static void scores(const float* q, int q_stride, int rows, const KT* const* k, int n, int D, float* s,
                     int s_stride) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) dot_rows<4>(q + r * q_stride, q_stride, k, n, D, s + r * s_stride, s_stride);
    const float* qr = q + r * q_stride;
    float* sr = s + r * s_stride;
    switch (rows - r) {
      case 3: dot_rows<3>(qr, q_stride, k, n, D, sr, s_stride); break;
      case 2: dot_rows<2>(qr, q_stride, k, n, D, sr, s_stride); break;
      case 1: dot_rows<1>(qr, q_stride, k, n, D, sr, s_stride); break;
      default: break;
    }
  }

  static void scores_bf16dot(const uint16_t*, int, int, const uint16_t* const*, int, int, float*, int) {}

  static void softmax_rows(float* s, int s_stride, int rows, int n_pad, float* m, float* l, float* corr) {
    for (int r = 0; r < rows; ++r) {
      float* row = s + r * s_stride;
      __m256 mx = _mm256_set1_ps(kNegInf);
      for (int j = 0; j < n_pad; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(row + j));
      const float tile_max = hmax(mx);
      const float m_new = tile_max > m[r] ? tile_max : m[r];
      const float m_use = m_new == kNegInf ? 0.0f : m_new;  // a row with nothing visible yet
      corr[r] = std::exp(m[r] - m_use);
      const __m256 mu = _mm256_set1_ps(m_use);
      __m256 sum = _mm256_setzero_ps();
      for (int j = 0; j < n_pad; j += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), mu));
        _mm256_storeu_ps(row + j, e);
        sum = _mm256_add_ps(sum, e);
      }
      l[r] = l[r] * corr[r] + hsum(sum);
      m[r] = m_new;
    }
  }

  template <class VT>
  static void pv(const float* pm, int p_stride, int rows, const VT* const* v, int n, int D, float* o,
                 const float* corr) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) pv_rows<4>(pm + r * p_stride, p_stride, v, n, D, o + r * D, corr + r);
    const float* pr = pm + r * p_stride;
    float* orow = o + r * D;
    switch (rows - r) {
      case 3: pv_rows<3>(pr, p_stride, v, n, D, orow, corr + r); break;
      case 2: pv_rows<2>(pr, p_stride, v, n, D, orow, corr + r); break;
      case 1: pv_rows<1>(pr, p_stride, v, n, D, orow, corr + r); break;
      default: break;
    }
  }

  static void convert_rows(const uint16_t* const* src, int n, int D, float* dst) {
    for (int j = 0; j < n; ++j)
      for (int d = 0; d < D; d += 8) _mm256_storeu_ps(dst + int64_t{j} * D + d, load8(src[j] + d));
  }
};

}  // namespace

void paged_attention_avx2(const PagedAttentionParams& p) {
  check_optimized_attention_params(p, count_query_rows(p.sequences), "avx2");
  const Plan plan = make_plan(p, 32);
  run_plan(p, plan, [&](const Task& t, float* partials) { vector_task<Avx2>(p, t, partials, false); });
}

}  // namespace spindle::kernels::cpu
