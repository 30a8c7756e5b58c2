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
// FP8 (E4M3FN) bytes as value / 2^8 (paged_attention_tiled.h fp8x8_widen; the caller's scales carry
// the 2^8).
inline __m256 load8(const uint8_t* p) { return fp8x8_widen(p); }

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

// 2^x per lane for x <= 0 (a score minus its row's max, in log2 units): n = round(x), a degree-5
// polynomial in x - n (fitted at Chebyshev nodes on [-0.5, 0.5]: relative error 1.6e-7, as exp8's),
// times 2^n made in the exponent bits. x below -126 (masked keys: -inf) gives exactly 0.
inline __m256 exp2_nonpositive(__m256 x) {
  const __m256 valid = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_sub_ps(x, n);
  __m256 y = _mm256_set1_ps(1.339086331e-03f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(9.676031768e-03f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.550356954e-02f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(2.402210683e-01f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(6.931471825e-01f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.000000119e+00f));
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

// The 8 x 8 transpose of v (v[i][c] -> v[c][i]): unpacks, shuffles and 128-bit permutes.
inline void transpose8(__m256 v[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
  }
  for (int h = 0; h < 8; h += 4) {  // h = 0: rows 0-3, h = 4: rows 4-7
    u[h + 0] = _mm256_shuffle_ps(t[h + 0], t[h + 2], 0x44);
    u[h + 1] = _mm256_shuffle_ps(t[h + 0], t[h + 2], 0xee);
    u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
    u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xee);
  }
  for (int c = 0; c < 4; ++c) {
    v[c] = _mm256_permute2f128_ps(u[c], u[c + 4], 0x20);
    v[c + 4] = _mm256_permute2f128_ps(u[c], u[c + 4], 0x31);
  }
}

// s[r][j .. j + 8 J) = q_r . k_j for R rows, K transposed (kt[d * ld + j]): per d, the 8 J keys'
// element d as J vectors times q_r[d] broadcast. Each score is its D products summed in order
// (an FMA chain from 0), whatever R and J.
template <int R, int J>
inline void tdot_block(const float* q, int q_stride, const float* kt, int ld, int D, float* s, int s_stride) {
  __m256 acc[R][J];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < J; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int d = 0; d < D; ++d) {
    __m256 kv[J];
    for (int c = 0; c < J; ++c) kv[c] = _mm256_loadu_ps(kt + int64_t{d} * ld + 8 * c);
    for (int r = 0; r < R; ++r) {
      const __m256 qb = _mm256_broadcast_ss(q + r * q_stride + d);
      for (int c = 0; c < J; ++c) acc[r][c] = _mm256_fmadd_ps(qb, kv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < J; ++c) _mm256_storeu_ps(s + r * s_stride + 8 * c, acc[r][c]);
}

template <int R>
inline void tdot_rows(const float* q, int q_stride, const float* kt, int ld, int n_pad, int D, float* s,
                      int s_stride) {
  int j = 0;
  for (; j + 16 <= n_pad; j += 16) tdot_block<R, 2>(q, q_stride, kt + j, ld, D, s + j, s_stride);
  for (; j < n_pad; j += 8) tdot_block<R, 1>(q, q_stride, kt + j, ld, D, s + j, s_stride);
}

struct Avx2 {
  static constexpr int kWidth = 8;
  static constexpr int kRowBlock = 4;
  // Prefill tasks take scores_transposed and softmax_rows_base2 (see vector_task).
  static constexpr bool kTransposedScores = true;
  static constexpr bool kTransposedBf16Dot = false;  // no bf16 dot products on AVX2
  static constexpr bool kFp8Rows = true;             // load8 reads FP8 rows (value / 2^8)

  // dst[d * ld + j] = element d of K row j as f32, for j < n_pad (rows from n on read as zeros; n_pad
  // a multiple of 8) and d < D (a multiple of 8).
  template <class KT>
  static void transpose_rows(const KT* const* src, int n, int n_pad, int D, float* dst, int ld) {
    static const KT zeros[kCpuBackendMaxHeadDim] = {};
    for (int j0 = 0; j0 < n_pad; j0 += 8) {
      const KT* rows[8];
      for (int i = 0; i < 8; ++i) rows[i] = j0 + i < n ? src[j0 + i] : zeros;
      for (int d = 0; d < D; d += 8) {
        __m256 v[8];
        for (int i = 0; i < 8; ++i) v[i] = load8(rows[i] + d);
        transpose8(v);
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + int64_t{d + i} * ld + j0, v[i]);
      }
    }
  }

  // s[r][j] = q_r . k_j for r < rows, j < n_pad, K as transpose_rows wrote it.
  static void scores_transposed(const float* q, int q_stride, int rows, const float* kt, int ld, int n_pad, int D,
                                float* s, int s_stride) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) tdot_rows<4>(q + r * q_stride, q_stride, kt, ld, n_pad, D, s + r * s_stride, s_stride);
    const float* qr = q + r * q_stride;
    float* sr = s + r * s_stride;
    switch (rows - r) {
      case 3: tdot_rows<3>(qr, q_stride, kt, ld, n_pad, D, sr, s_stride); break;
      case 2: tdot_rows<2>(qr, q_stride, kt, ld, n_pad, D, sr, s_stride); break;
      case 1: tdot_rows<1>(qr, q_stride, kt, ld, n_pad, D, sr, s_stride); break;
      default: break;
    }
  }

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

  // softmax_rows for scores in log2 units (the transposed prefill tasks pre-scale q by log2 e; m in
  // log2 units too): rows in groups of 8, whose corrections are one exp2 vector and whose sums one
  // hsum8 and one l update, instead of a libm exp and a horizontal sum per row.
  static void softmax_rows_base2(float* s, int s_stride, int rows, int n_pad, float* m, float* l, float* corr) {
    for (int r0 = 0; r0 < rows; r0 += 8) {
      const int nr = imin(8, rows - r0);
      alignas(32) float m_old[8], m_use[8], l_old[8], out[8];
      __m256 sums[8];
      for (int i = 0; i < 8; ++i) {
        sums[i] = _mm256_setzero_ps();
        m_old[i] = i < nr ? m[r0 + i] : 0.0f;
        l_old[i] = i < nr ? l[r0 + i] : 0.0f;
        m_use[i] = 0.0f;
        if (i >= nr) continue;
        const float* row = s + (r0 + i) * s_stride;
        __m256 mx = _mm256_set1_ps(kNegInf);
        for (int j = 0; j < n_pad; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(row + j));
        const float tile_max = hmax(mx);
        const float m_new = tile_max > m_old[i] ? tile_max : m_old[i];
        m_use[i] = m_new == kNegInf ? 0.0f : m_new;  // a row with nothing visible yet
        m[r0 + i] = m_new;
      }
      // m_old - m_use <= 0, or -inf (nothing seen before): a correction of 0, as l and o are 0 then.
      const __m256 c = exp2_nonpositive(_mm256_sub_ps(_mm256_load_ps(m_old), _mm256_load_ps(m_use)));
      for (int i = 0; i < nr; ++i) {
        float* row = s + (r0 + i) * s_stride;
        const __m256 mu = _mm256_set1_ps(m_use[i]);
        for (int j = 0; j < n_pad; j += 8) {
          const __m256 e = exp2_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(row + j), mu));
          _mm256_storeu_ps(row + j, e);
          sums[i] = _mm256_add_ps(sums[i], e);
        }
      }
      _mm256_store_ps(out, _mm256_fmadd_ps(_mm256_load_ps(l_old), c, hsum8(sums)));
      alignas(32) float cs[8];
      _mm256_store_ps(cs, c);
      for (int i = 0; i < nr; ++i) {
        l[r0 + i] = out[i];
        corr[r0 + i] = cs[i];
      }
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

// ---- Small-head_dim decode: tasks of one new token (every row sees every key of the task) ----
//
// At head_dim 32 a query row's dot product is 4 FMAs, so the per-(row, key tile) costs of
// vector_task (key pointers gathered per KV head, masking, softmax bookkeeping and O reloads per
// 64-key tile) weigh as much as the arithmetic. Here the token rows' pointers are gathered once per
// block of kSmallKeyBlock keys for all KV heads of the task; each KV head's query rows (its GQA
// group) share every K and V load; scores of R rows x J keys (R * J = 8) accumulate in 8 vectors
// reduced together by one hsum8; O stays in registers across the block. bf16 K/V are widened 16
// elements per load in a paired layout (even elements, then odd: a shift and a mask), with q
// permuted the same way and O permuted back at the end; f32 K/V use the natural order.
constexpr int kSmallKeyBlock = 256;
// Within a block, scores and P.V go over the keys in chunks of kSmallHeadChunk, every KV head of
// the task per chunk (not every key per head): a token's K (or V) row holds all KV heads side by
// side (num_kv_heads * head_dim elements), so the chunk's rows are read once, in order, and the
// other heads find them in L1. Head by head over a whole block, each pass touched head_dim of every
// row_bytes and the next head's pass met the rows again after 256 rows of the other array: at
// head_dim 32 a batch-16 step's attention on the 6.8M model (6 layers, 981 cached tokens each) took
// 5.2-5.5 ms, now 3.0-4.1 (16-key chunks: 3.1-3.3); head_dim 64 3.5-3.8 -> 2.7-3.3 ms
// (bench/results/2026-12-05-zen3-hd32-chunks). Every score and output is the same sum in the same
// order as before (P.V's accumulators go through o between chunks).
constexpr int kSmallHeadChunk = 32;

// 16 consecutive elements as two vectors: f32 in order; bf16 as (even elements, odd elements).
inline void load16(const float* p, __m256& a, __m256& b) {
  a = _mm256_loadu_ps(p);
  b = _mm256_loadu_ps(p + 8);
}
inline void load16(const uint16_t* p, __m256& a, __m256& b) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  a = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
  b = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// The order load16 delivers dimension d of a row in: identity for f32, paired for bf16.
template <class T>
inline int paired_index(int d) {
  if constexpr (sizeof(T) == 4) {
    return d;
  } else {
    const int c = d & ~15, i = d & 15;
    return c + ((i & 1) ? 8 : 0) + (i >> 1);
  }
}

#define SPINDLE_AVX2_INLINE inline __attribute__((always_inline))

// The 8 horizontal sums of a0..a7, in order, as one vector: hsum8 on values kept in registers,
// with single-uop shuffles (unpack, shufps, vperm2f128) and adds instead of hadd.
SPINDLE_AVX2_INLINE __m256 hsum_pair(__m256 a, __m256 b) {  // [a0+a2, b0+b2, a1+a3, b1+b3 | lanes 4-7]
  return _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
}
SPINDLE_AVX2_INLINE __m256 hsum_quad(__m256 t01, __m256 t23) {  // [a0..a3 sums of lanes 0-3 | of 4-7]
  return _mm256_add_ps(_mm256_shuffle_ps(t01, t23, 0x44), _mm256_shuffle_ps(t01, t23, 0xee));
}
SPINDLE_AVX2_INLINE __m256 hsum8_values(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6,
                                        __m256 a7) {
  const __m256 u0 = hsum_quad(hsum_pair(a0, a1), hsum_pair(a2, a3));
  const __m256 u1 = hsum_quad(hsum_pair(a4, a5), hsum_pair(a6, a7));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// s[r][j] = q_r . k_j for R rows (q rows D apart, in load16 order) x J keys, k_j = krow[j] + off.
// DT: head_dim when known at compile time (0: D).
template <int DT, int R, int J, class KT>
SPINDLE_AVX2_INLINE void sd_score_block(const float* q, int D_rt, const KT* const* krow, int off, float* s,
                                        int s_stride) {
  static_assert(R * J <= 8);
  const int D = DT > 0 ? DT : D_rt;
  __m256 acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
  for (int d = 0; d < D; d += 16) {
    for (int j = 0; j < J; ++j) {
      __m256 a, b;
      load16(krow[j] + off + d, a, b);
      for (int r = 0; r < R; ++r) {
        acc[r * J + j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * D + d), a, acc[r * J + j]);
        acc[r * J + j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * D + d + 8), b, acc[r * J + j]);
      }
    }
  }
  const __m256 sums = hsum8_values(acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]);
  if constexpr (J == 8) {
    _mm256_storeu_ps(s, sums);
  } else if constexpr (J == 4) {
    for (int r = 0; r < R; ++r)
      _mm_storeu_ps(s + r * s_stride, r == 0 ? _mm256_castps256_ps128(sums) : _mm256_extractf128_ps(sums, 1));
  } else {
    alignas(32) float out[8];
    _mm256_store_ps(out, sums);
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < J; ++j) s[r * s_stride + j] = out[r * J + j];
  }
}

template <int DT, int R, class KT>
SPINDLE_AVX2_INLINE void sd_score_keys(const float* q, int D, const KT* const* krow, int off, int n, float* s,
                                       int s_stride) {
  constexpr int J = R == 1 ? 8 : R == 2 ? 4 : R <= 4 ? 2 : 1;
  int j = 0;
  for (; j + J <= n; j += J) sd_score_block<DT, R, J>(q, D, krow + j, off, s + j, s_stride);
  for (; j < n; ++j) sd_score_block<DT, R, 1>(q, D, krow + j, off, s + j, s_stride);
}

// Scores of one KV head's G query rows against keys [0, n) of the block.
template <int DT, class KT>
inline void sd_scores_head(const float* q, int G, int D, const KT* const* krow, int off, int n, float* s,
                           int s_stride) {
  int r = 0;
  for (; r + 8 <= G; r += 8) sd_score_keys<DT, 8>(q + r * D, D, krow, off, n, s + r * s_stride, s_stride);
  for (; r + 4 <= G; r += 4) sd_score_keys<DT, 4>(q + r * D, D, krow, off, n, s + r * s_stride, s_stride);
  const float* qr = q + r * D;
  float* sr = s + r * s_stride;
  switch (G - r) {
    case 3:
      sd_score_keys<DT, 3>(qr, D, krow, off, n, sr, s_stride);
      break;
    case 2:
      sd_score_keys<DT, 2>(qr, D, krow, off, n, sr, s_stride);
      break;
    case 1:
      sd_score_keys<DT, 1>(qr, D, krow, off, n, sr, s_stride);
      break;
    default:
      break;
  }
}

// o[r][d0, d0 + 16 NP) += sum_j p[r][j] v_j[...] (o rows D apart, in load16 order).
template <int R, int NP, class VT>
SPINDLE_AVX2_INLINE void sd_pv_block(const float* pm, int p_stride, const VT* const* vrow, int off, int n, int d0,
                                     float* o, int D) {
  __m256 acc[R][2 * NP];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 2 * NP; ++i) acc[r][i] = _mm256_loadu_ps(o + r * D + d0 + 8 * i);
  for (int j = 0; j < n; ++j) {
    const VT* vj = vrow[j] + off + d0;
    __m256 vv[2 * NP];
    for (int c = 0; c < NP; ++c) load16(vj + 16 * c, vv[2 * c], vv[2 * c + 1]);
    for (int r = 0; r < R; ++r) {
      const __m256 pb = _mm256_broadcast_ss(pm + r * p_stride + j);
      for (int i = 0; i < 2 * NP; ++i) acc[r][i] = _mm256_fmadd_ps(pb, vv[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 2 * NP; ++i) _mm256_storeu_ps(o + r * D + d0 + 8 * i, acc[r][i]);
}

template <int DT, int R, class VT>
SPINDLE_AVX2_INLINE void sd_pv_rows(const float* pm, int p_stride, const VT* const* vrow, int off, int n, float* o,
                                    int D_rt) {
  const int D = DT > 0 ? DT : D_rt;
  constexpr int NP = R == 1 ? 4 : R == 2 ? 2 : 1;
  int d = 0;
  for (; d + 16 * NP <= D; d += 16 * NP) sd_pv_block<R, NP>(pm, p_stride, vrow, off, n, d, o, D);
  for (; d < D; d += 16) sd_pv_block<R, 1>(pm, p_stride, vrow, off, n, d, o, D);
}

template <int DT, class VT>
inline void sd_pv_head(const float* pm, int p_stride, int G, const VT* const* vrow, int off, int n, float* o, int D) {
  int r = 0;
  for (; r + 4 <= G; r += 4) sd_pv_rows<DT, 4>(pm + r * p_stride, p_stride, vrow, off, n, o + r * D, D);
  const float* pr = pm + r * p_stride;
  float* orow = o + r * D;
  switch (G - r) {
    case 3:
      sd_pv_rows<DT, 3>(pr, p_stride, vrow, off, n, orow, D);
      break;
    case 2:
      sd_pv_rows<DT, 2>(pr, p_stride, vrow, off, n, orow, D);
      break;
    case 1:
      sd_pv_rows<DT, 1>(pr, p_stride, vrow, off, n, orow, D);
      break;
    default:
      break;
  }
}

// e^x for x <= 0 (or -inf): exp8 without its upper clamp and its zero mask. x below -87.3 gives
// 2^-126 (~1.2e-38) instead of e^x or 0: a weight that small next to the row's maximum (weight 1)
// changes no output; the -inf padding lanes of a block's last vector add it to l only.
SPINDLE_AVX2_INLINE __m256 exp8_nonpositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504089f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
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
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// Online softmax over one block where every row sees every key: s -> p in place (n_pad lanes,
// the padding at -inf), m, l updated, o rows (D floats, load16 order) rescaled by the correction.
template <int DT>
inline void sd_softmax_rows(float* s, int s_stride, int rows, int n_pad, float* m, float* l, float* o, int D_rt) {
  const int D = DT > 0 ? DT : D_rt;
  for (int r = 0; r < rows; ++r) {
    float* row = s + int64_t{r} * s_stride;
    __m256 mx = _mm256_loadu_ps(row);
    for (int j = 8; j < n_pad; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(row + j));
    const float tile_max = hmax(mx);  // finite: the block's first key is real
    const float m_new = tile_max > m[r] ? tile_max : m[r];
    const float corr = std::exp(m[r] - m_new);  // 0 for the first block (m = -inf)
    const __m256 mu = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < n_pad; j += 8) {
      const __m256 e = exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(row + j), mu));
      _mm256_storeu_ps(row + j, e);
      sum = _mm256_add_ps(sum, e);
    }
    l[r] = l[r] * corr + hsum(sum);
    m[r] = m_new;
    const __m256 c = _mm256_set1_ps(corr);
    float* orow = o + int64_t{r} * D;
    for (int d = 0; d < D; d += 8) _mm256_storeu_ps(orow + d, _mm256_mul_ps(_mm256_loadu_ps(orow + d), c));
  }
}

struct SmallDecodeScratch {
  Scratch<float> q, o, s, m, l, out;
  Scratch<const void*> k_rows, v_rows;
};

inline SmallDecodeScratch& small_decode_scratch() {
  thread_local SmallDecodeScratch scratch;
  return scratch;
}

// A task of one new token (t.q_end == t.q_begin + 1) at head_dim % 16 == 0; KT: the KV element.
template <int DT, class KT>
void small_decode_task(const PagedAttentionParams& p, const Task& t, float* partials) {
  const int D = DT > 0 ? DT : p.kv.head_dim;
  const int G = p.num_heads / p.kv.num_kv_heads;
  const auto& s = p.sequences[t.seq];
  const int rows = G * t.num_heads;  // row r: query head t.kv_head * G + r
  constexpr int B = kSmallKeyBlock;

  SmallDecodeScratch& sc = small_decode_scratch();
  float* q = sc.q.get(size_t(rows) * D);
  float* o = sc.o.get(size_t(rows) * D);
  float* sbuf = sc.s.get(size_t(rows) * B);
  float* m = sc.m.get(rows);
  float* l = sc.l.get(rows);
  const KT** kr = reinterpret_cast<const KT**>(sc.k_rows.get(B));
  const KT** vr = reinterpret_cast<const KT**>(sc.v_rows.get(B));

  for (int r = 0; r < rows; ++r) {
    const float* src = q_row(p, s, t.q_begin, t.kv_head * G + r);
    float* dst = q + int64_t{r} * D;
    for (int d = 0; d < D; ++d) dst[paired_index<KT>(d)] = src[d] * p.scale;
    m[r] = kNegInf;
    l[r] = 0.0f;
  }
  std::memset(o, 0, sizeof(float) * rows * D);

  for (int k0 = t.k_begin; k0 < t.k_end; k0 += B) {
    const int n = imin(B, t.k_end - k0);
    const int n_pad = round_up(n, 8);
    gather_rows(p, s, p.k_pages, t.kv_head, k0, n, kr);  // head t.kv_head + hh at + hh * D
    gather_rows(p, s, p.v_pages, t.kv_head, k0, n, vr);
    for (int j0 = 0; j0 < n; j0 += kSmallHeadChunk) {
      const int nc = imin(kSmallHeadChunk, n - j0);
      for (int hh = 0; hh < t.num_heads; ++hh)
        sd_scores_head<DT>(q + int64_t{hh} * G * D, G, D, kr + j0, hh * D, nc, sbuf + int64_t{hh} * G * B + j0, B);
    }
    for (int r = 0; r < rows; ++r)
      for (int j = n; j < n_pad; ++j) sbuf[int64_t{r} * B + j] = kNegInf;
    sd_softmax_rows<DT>(sbuf, B, rows, n_pad, m, l, o, D);
    for (int j0 = 0; j0 < n; j0 += kSmallHeadChunk) {
      const int nc = imin(kSmallHeadChunk, n - j0);
      for (int hh = 0; hh < t.num_heads; ++hh)
        sd_pv_head<DT>(sbuf + int64_t{hh} * G * B + j0, B, G, vr + j0, hh * D, nc, o + int64_t{hh} * G * D, D);
    }
  }
  const float* o_natural = o;
  if constexpr (sizeof(KT) == 2) {
    float* un = sc.out.get(size_t(rows) * D);
    for (int r = 0; r < rows; ++r)
      for (int d = 0; d < D; ++d) un[int64_t{r} * D + d] = o[int64_t{r} * D + paired_index<KT>(d)];
    o_natural = un;
  }
  finish_task(p, t, rows, m, l, o_natural, partials);
}

// The head_dims of the 6.8M models (and the default cutoff) get compile-time loop bounds.
template <class KT>
void small_decode(const PagedAttentionParams& p, const Task& t, float* partials) {
  switch (p.kv.head_dim) {
    case 32:
      small_decode_task<32, KT>(p, t, partials);
      break;
    case 64:
      small_decode_task<64, KT>(p, t, partials);
      break;
    default:
      small_decode_task<0, KT>(p, t, partials);
      break;
  }
}

}  // namespace

void paged_attention_avx2_path(const PagedAttentionParams& p, Avx2DecodePath path) {
  check_optimized_attention_params(p, count_query_rows(p.sequences), "avx2");
  // (FP8 KV: the generic task, which converts each tile with its head's scale.)
  const bool small = path != Avx2DecodePath::kGeneric && p.kv.dtype != DType::kF8E4M3 && p.kv.head_dim % 16 == 0 &&
                     (path == Avx2DecodePath::kSmallHeadDim || p.kv.head_dim <= kAvx2SmallDecodeMaxHeadDim);
  const Plan plan = make_plan(p, 32, /*decode_sized_token_tasks=*/small);
  const bool kv_bf16 = p.kv.dtype == DType::kBF16;
  run_plan(p, plan, [&](const Task& t, float* partials) {
    if (small && t.q_end - t.q_begin == 1) {
      if (kv_bf16) {
        small_decode<uint16_t>(p, t, partials);
      } else {
        small_decode<float>(p, t, partials);
      }
    } else {
      vector_task<Avx2>(p, t, partials, false);
    }
  });
}

void paged_attention_avx2(const PagedAttentionParams& p) { paged_attention_avx2_path(p, Avx2DecodePath::kAuto); }

}  // namespace spindle::kernels::cpu
