// Internal: the AVX-512 micro-kernels of the vector task (see paged_attention_tiled.h), included
// by paged_attention_avx512.cc and paged_attention_amx.cc (which falls back to them for decode).
// Needs -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16. head_dim is a multiple of 8:
// the last 16-lane chunk of a row may be half full and is read and written with a mask.
#pragma once

// GCC 12's AVX-512 headers trip these on their own _mm512_undefined_* (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "kernels/cpu/avx512_transpose.h"
#include "kernels/cpu/paged_attention_tiled.h"

namespace spindle::kernels::cpu {
namespace {

inline __mmask16 lane_mask(int count) {  // the first min(count, 16) lanes
  return count >= 16 ? __mmask16(0xffff) : __mmask16((1u << count) - 1);
}

inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const uint16_t* p, __mmask16 m) {
  const __m256i raw = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
// FP8 (E4M3FN) bytes as value / 2^8 exactly (the caller's scales carry the 2^8), the lanes past the
// mask 0: the f16 placement of paged_attention_tiled.h's fp8x8_widen, 16 lanes at a time. The byte
// sign-extended to 16 bits and shifted left by 7 has the sign in bit 15 (and bit 14) and the
// exponent and mantissa in bits 13..7; bits 14 and 6..0 cleared, that is the f16 of value / 2^8
// (subnormals included). The NaN codes (bits 6..0 all set) carry into bit 14 when 0x80 is added:
// that bit or-ed in gives the f16 exponent 31 over a nonzero mantissa, NaN. vcvtph2ps widens
// exactly (DAZ does not apply to it). Against a 256-entry table through vpermi2ps (4 two-table
// permutes, 3 blends, the sign) and a gather, in a 4 x 4 dot block on the dev VM's Zen 4: 18.4 us
// vs 20.4 us vs 41.5 us per 512 keys x 128 (a bf16 load: 17.5 us).
inline __m512 load16(const uint8_t* p, __mmask16 m) {
  const __m256i s = _mm256_cvtepi8_epi16(_mm_maskz_loadu_epi8(m, p));
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(s, 7), _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
  const __m256i carry = _mm256_add_epi16(h, _mm256_set1_epi16(0x80));
  // h | (carry & 0x4000): ternary-logic truth table 0xF8 (a | (b & c))
  return _mm512_cvtph_ps(_mm256_ternarylogic_epi32(h, carry, _mm256_set1_epi16(0x4000), 0xF8));
}

// Sum of a zmm folded to a ymm (lanes i and i + 8 added).
inline __m256 fold(__m512 v) {
  // (maskz extracts: GCC 12's _mm512_castps512_ps256 trips -Wuninitialized in its own header)
  const __m512d x = _mm512_castps_pd(v);
  return _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, x, 0)),
                       _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, x, 1)));
}

// The 8 horizontal sums of v[0..7], in order.
inline __m256 hsum8x(const __m256 v[8]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]);
  const __m256 t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]);
  const __m256 t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// e^x per lane, relative error ~2e-7; x below -87.3 (and -inf) gives exactly 0.
inline __m512 exp16(__m512 x) {
  const __mmask16 valid = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.0f / 5040);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 720));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 120));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 24));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 6));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(0.5f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(valid, _mm512_scalef_ps(y, n));
}

// Writes the R*J dot products of acc (row-major [R][J]) to s[r * s_stride + j]. Always inlined: out
// of line, acc's address escapes and the dot loops keep their accumulators in memory (GCC 12 stopped
// inlining it into vector_task once the FP8 row reads were instantiated too: the f32-math bf16
// decode ran 0.35 ms where it ran 0.23 ms inlined, bench_attention --cpu-time, 1024 keys).
template <int R, int J>
inline __attribute__((always_inline)) void store_dots(__m512 (&acc)[R][J], float* s, int s_stride) {
  constexpr int kN = R * J;
  alignas(32) float sums[(kN + 7) / 8 * 8];
  for (int base = 0; base < kN; base += 8) {
    __m256 v[8];
    for (int i = 0; i < 8; ++i) {
      const int idx = base + i;
      v[i] = idx < kN ? fold(acc[idx / J][idx % J]) : _mm256_setzero_ps();
    }
    _mm256_store_ps(sums + base, hsum8x(v));
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) s[r * s_stride + j] = sums[r * J + j];
}

// s[r][j] = q_r . k_j, f32 math (q f32, k f32, bf16 or FP8 as value / 2^8).
template <int R, int J, class KT>
inline void dot_block512(const float* q, int q_stride, const KT* const* k, int D, float* s, int s_stride) {
  __m512 acc[R][J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int d = 0; d < D; d += 16) {
    const __mmask16 m = lane_mask(D - d);
    __m512 kv[J];
    for (int j = 0; j < J; ++j) kv[j] = load16(k[j] + d, m);
    for (int r = 0; r < R; ++r) {
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + r * q_stride + d);
      for (int j = 0; j < J; ++j) acc[r][j] = _mm512_fmadd_ps(qv, kv[j], acc[r][j]);
    }
  }
  store_dots<R, J>(acc, s, s_stride);
}

// s[r][j] = q_r . k_j with bf16 pair dot products (q bf16, stride qs, zero padded to 32).
template <int R, int J>
inline void dot_block_bf16(const uint16_t* q, int qs, const uint16_t* const* k, int D, float* s, int s_stride) {
  __m512 acc[R][J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int d = 0; d < D; d += 32) {
    const int left = D - d;
    const __mmask32 m = left >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << left) - 1);
    __m512bh kv[J];
    for (int j = 0; j < J; ++j) kv[j] = (__m512bh)_mm512_maskz_loadu_epi16(m, k[j] + d);
    for (int r = 0; r < R; ++r) {
      const __m512bh qv = (__m512bh)_mm512_loadu_si512(q + r * qs + d);
      for (int j = 0; j < J; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], qv, kv[j]);
    }
  }
  store_dots<R, J>(acc, s, s_stride);
}

template <int R>
constexpr int keys_per_block512() {
  return R <= 2 ? 8 : 4;
}

template <int R, class KT>
inline void dot_rows512(const float* q, int q_stride, const KT* const* k, int n, int D, float* s, int s_stride) {
  constexpr int J = keys_per_block512<R>();
  int j = 0;
  for (; j + J <= n; j += J) dot_block512<R, J>(q, q_stride, k + j, D, s + j, s_stride);
  for (; j < n; ++j) dot_block512<R, 1>(q, q_stride, k + j, D, s + j, s_stride);
}

template <int R>
inline void dot_rows_bf16(const uint16_t* q, int qs, const uint16_t* const* k, int n, int D, float* s, int s_stride) {
  constexpr int J = keys_per_block512<R>();
  int j = 0;
  for (; j + J <= n; j += J) dot_block_bf16<R, J>(q, qs, k + j, D, s + j, s_stride);
  for (; j < n; ++j) dot_block_bf16<R, 1>(q, qs, k + j, D, s + j, s_stride);
}

// o[r][16 c0 .. 16 (c0 + NV)) = o * corr_r + sum_j p[r][j] v_j[...]; lanes past D masked.
template <int R, int NV, class VT>
inline void pv_block512(const float* pm, int p_stride, const VT* const* v, int n, int c0, float* o, int D,
                        const float* corr) {
  __m512 acc[R][NV];
  __mmask16 mask[NV];
  for (int i = 0; i < NV; ++i) mask[i] = lane_mask(D - 16 * (c0 + i));
  for (int r = 0; r < R; ++r) {
    const __m512 c = _mm512_set1_ps(corr[r]);
    for (int i = 0; i < NV; ++i)
      acc[r][i] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask[i], o + r * D + 16 * (c0 + i)), c);
  }
  for (int j = 0; j < n; ++j) {
    __m512 vv[NV];
    for (int i = 0; i < NV; ++i) vv[i] = load16(v[j] + 16 * (c0 + i), mask[i]);
    for (int r = 0; r < R; ++r) {
      const __m512 pb = _mm512_set1_ps(pm[r * p_stride + j]);
      for (int i = 0; i < NV; ++i) acc[r][i] = _mm512_fmadd_ps(pb, vv[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < NV; ++i) _mm512_mask_storeu_ps(o + r * D + 16 * (c0 + i), mask[i], acc[r][i]);
}

template <int R, class VT>
inline void pv_rows512(const float* pm, int p_stride, const VT* const* v, int n, int D, float* o,
                       const float* corr) {
  constexpr int NV = R <= 2 ? 8 : 4;
  const int chunks = (D + 15) / 16;
  int c = 0;
  for (; c + NV <= chunks; c += NV) pv_block512<R, NV>(pm, p_stride, v, n, c, o, D, corr);
  for (; c < chunks; ++c) pv_block512<R, 1>(pm, p_stride, v, n, c, o, D, corr);
}

// s[r][j .. j + 16 J) = q_r . k_j for R rows, K as Avx512::transpose_pairs wrote it (kt[i * ld + j]:
// the bf16 pair (2i, 2i + 1) of key j as 32 bits), q bf16 (stride qs, zero padded): per pair, the
// 16 J keys' pairs times q_r's pair broadcast, one vdpbf16ps per 16 keys. Each score is its pair
// products summed in pair order (an accumulation chain from 0), whatever R and J: no horizontal sum.
template <int R, int J>
inline void tdot_block_bf16(const uint16_t* q, int qs, const uint32_t* kt, int ld, int pairs, float* s,
                            int s_stride) {
  __m512 acc[R][J];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < J; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int i = 0; i < pairs; ++i) {
    __m512bh kv[J];
    for (int c = 0; c < J; ++c) kv[c] = (__m512bh)_mm512_loadu_si512(kt + int64_t{i} * ld + 16 * c);
    for (int r = 0; r < R; ++r) {
      uint32_t qp;
      std::memcpy(&qp, q + r * qs + 2 * i, sizeof(qp));
      const __m512bh qb = (__m512bh)_mm512_set1_epi32(static_cast<int>(qp));
      for (int c = 0; c < J; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], qb, kv[c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < J; ++c) _mm512_storeu_ps(s + r * s_stride + 16 * c, acc[r][c]);
}

template <int R>
inline void tdot_rows_bf16(const uint16_t* q, int qs, const uint32_t* kt, int ld, int n_pad, int pairs, float* s,
                           int s_stride) {
  int j = 0;
  for (; j + 64 <= n_pad; j += 64) tdot_block_bf16<R, 4>(q, qs, kt + j, ld, pairs, s + j, s_stride);
  for (; j + 32 <= n_pad; j += 32) tdot_block_bf16<R, 2>(q, qs, kt + j, ld, pairs, s + j, s_stride);
  for (; j < n_pad; j += 16) tdot_block_bf16<R, 1>(q, qs, kt + j, ld, pairs, s + j, s_stride);
}

struct Avx512 {
  static constexpr int kWidth = 16;
  static constexpr int kRowBlock = 4;
  static constexpr bool kTransposedScores = false;  // see vector_task
  // Prefill tasks with bf16 dot products take transpose_pairs and scores_transposed_bf16 (see
  // vector_task).
  static constexpr bool kTransposedBf16Dot = true;
  static constexpr bool kFp8Rows = true;  // load16 reads FP8 rows (value / 2^8)

  // dst[i * ld + j] = the bf16 pair (2i, 2i + 1) of K row j as 32 bits, for j < n_pad (rows from n
  // on read as zeros; n_pad a multiple of 16) and i < D / 2: 16 x 16 transposes of 32-bit elements.
  static void transpose_pairs(const uint16_t* const* src, int n, int n_pad, int D, uint32_t* dst, int ld) {
    static const uint16_t zeros[kCpuBackendMaxHeadDim] = {};
    for (int j0 = 0; j0 < n_pad; j0 += 16) {
      const uint16_t* rows[16];
      for (int i = 0; i < 16; ++i) rows[i] = j0 + i < n ? src[j0 + i] : zeros;
      for (int d = 0; d < D; d += 32) {
        const int left = D - d;
        const __mmask32 m = left >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << left) - 1);
        __m512i v[16];
        for (int i = 0; i < 16; ++i) v[i] = _mm512_maskz_loadu_epi16(m, rows[i] + d);
        transpose16x16(v);
        const int np = imin(16, left / 2);
        for (int i = 0; i < np; ++i) _mm512_storeu_si512(dst + int64_t{d / 2 + i} * ld + j0, v[i]);
      }
    }
  }

  // s[r][j] = q_r . k_j for r < rows, j < n_pad, K as transpose_pairs wrote it, q bf16 (stride qs).
  static void scores_transposed_bf16(const uint16_t* q, int qs, int rows, const uint32_t* kt, int ld, int n_pad,
                                     int D, float* s, int s_stride) {
    const int pairs = D / 2;
    int r = 0;
    for (; r + 4 <= rows; r += 4) tdot_rows_bf16<4>(q + r * qs, qs, kt, ld, n_pad, pairs, s + r * s_stride, s_stride);
    const uint16_t* qr = q + r * qs;
    float* sr = s + r * s_stride;
    switch (rows - r) {
      case 3: tdot_rows_bf16<3>(qr, qs, kt, ld, n_pad, pairs, sr, s_stride); break;
      case 2: tdot_rows_bf16<2>(qr, qs, kt, ld, n_pad, pairs, sr, s_stride); break;
      case 1: tdot_rows_bf16<1>(qr, qs, kt, ld, n_pad, pairs, sr, s_stride); break;
      default: break;
    }
  }

  template <class KT>
  static void scores(const float* q, int q_stride, int rows, const KT* const* k, int n, int D, float* s,
                     int s_stride) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) dot_rows512<4>(q + r * q_stride, q_stride, k, n, D, s + r * s_stride, s_stride);
    const float* qr = q + r * q_stride;
    float* sr = s + r * s_stride;
    switch (rows - r) {
      case 3: dot_rows512<3>(qr, q_stride, k, n, D, sr, s_stride); break;
      case 2: dot_rows512<2>(qr, q_stride, k, n, D, sr, s_stride); break;
      case 1: dot_rows512<1>(qr, q_stride, k, n, D, sr, s_stride); break;
      default: break;
    }
  }

  static void scores_bf16dot(const uint16_t* q, int qs, int rows, const uint16_t* const* k, int n, int D,
                             float* s, int s_stride) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) dot_rows_bf16<4>(q + r * qs, qs, k, n, D, s + r * s_stride, s_stride);
    const uint16_t* qr = q + r * qs;
    float* sr = s + r * s_stride;
    switch (rows - r) {
      case 3: dot_rows_bf16<3>(qr, qs, k, n, D, sr, s_stride); break;
      case 2: dot_rows_bf16<2>(qr, qs, k, n, D, sr, s_stride); break;
      case 1: dot_rows_bf16<1>(qr, qs, k, n, D, sr, s_stride); break;
      default: break;
    }
  }

  static void softmax_rows(float* s, int s_stride, int rows, int n_pad, float* m, float* l, float* corr) {
    for (int r = 0; r < rows; ++r) {
      float* row = s + r * s_stride;
      __m512 mx = _mm512_set1_ps(kNegInf);
      for (int j = 0; j < n_pad; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(row + j));
      const float tile_max = _mm512_reduce_max_ps(mx);
      const float m_new = tile_max > m[r] ? tile_max : m[r];
      const float m_use = m_new == kNegInf ? 0.0f : m_new;  // a row with nothing visible yet
      corr[r] = std::exp(m[r] - m_use);
      const __m512 mu = _mm512_set1_ps(m_use);
      __m512 sum = _mm512_setzero_ps();
      for (int j = 0; j < n_pad; j += 16) {
        const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), mu));
        _mm512_storeu_ps(row + j, e);
        sum = _mm512_add_ps(sum, e);
      }
      l[r] = l[r] * corr[r] + _mm512_reduce_add_ps(sum);
      m[r] = m_new;
    }
  }

  template <class VT>
  static void pv(const float* pm, int p_stride, int rows, const VT* const* v, int n, int D, float* o,
                 const float* corr) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) pv_rows512<4>(pm + r * p_stride, p_stride, v, n, D, o + r * D, corr + r);
    const float* pr = pm + r * p_stride;
    float* orow = o + r * D;
    switch (rows - r) {
      case 3: pv_rows512<3>(pr, p_stride, v, n, D, orow, corr + r); break;
      case 2: pv_rows512<2>(pr, p_stride, v, n, D, orow, corr + r); break;
      case 1: pv_rows512<1>(pr, p_stride, v, n, D, orow, corr + r); break;
      default: break;
    }
  }

  static void convert_rows(const uint16_t* const* src, int n, int D, float* dst) {
    for (int j = 0; j < n; ++j)
      for (int d = 0; d < D; d += 16) {
        const __mmask16 m = lane_mask(D - d);
        _mm512_mask_storeu_ps(dst + int64_t{j} * D + d, m, load16(src[j] + d, m));
      }
  }
};

}  // namespace
}  // namespace spindle::kernels::cpu
