// Internal: a 16 x 16 transpose of 32-bit elements in AVX-512 registers, included by the files
// compiled with AVX-512 flags that need it (paged_attention_amx.cc, linear_amx.cc). It sits in
// an unnamed namespace so no shared (weak) symbol compiled with these flags can be linked into
// baseline code.
#pragma once

// GCC 12's AVX-512 headers trip these on their own _mm512_undefined_* (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

namespace spindle::kernels::cpu {
namespace {

// In-place transpose of a 16 x 16 matrix of 32-bit elements (row i in r[i]).
inline void transpose16x16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // u[4i + k], 128-bit lane L: column 4L + k of rows 4i .. 4i + 3
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int k = 0; k < 4; ++k) {  // row 4L + k = lane L of u[k], u[4 + k], u[8 + k], u[12 + k]
    const __m512i s0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44);
    const __m512i s1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xee);
    const __m512i s2 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44);
    const __m512i s3 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xee);
    r[k] = _mm512_shuffle_i32x4(s0, s2, 0x88);
    r[4 + k] = _mm512_shuffle_i32x4(s0, s2, 0xdd);
    r[8 + k] = _mm512_shuffle_i32x4(s1, s3, 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(s1, s3, 0xdd);
  }
}

}  // namespace
}  // namespace spindle::kernels::cpu
