// Direct linear kernel with AMX-BF16 tiles, bf16 weights, f32 activations; see linear_isa.h.
// Compiled with the AMX flags of kernels/CMakeLists.txt; everything ISA-specific stays here.
//
// The product is computed transposed, y^T [n, m] = W [n, k] . x^T [k, m], so the weights are
// the A operand and are read straight from their rows (16 rows x 32 k per tile, row stride
// 2k bytes): nothing repacks W. x is the B operand, packed once per forward by
// linear_amx_pack_x into pair-interleaved (VNNI) tiles.
//
// Exactness: each x is split into three bf16 parts, x = hi + mid + lo, with
// hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid) (round to nearest even; the
// differences are exact in f32), so |x - (hi + mid + lo)| <= 2^-27 |x|. bf16 x bf16 products are
// exact in f32 and the tiles accumulate in f32: the result is an f32-accurate x . W^T (not the
// bf16-activation product of onednn_bf16), at three tile products per A tile, which AMX does in
// far less time than the A tile takes to arrive from memory. Denormal parts are flushed to zero
// by the tile unit (values below ~1e-38 relative to nothing: immaterial). Non-finite x give what
// f32 gives: mid and lo are zero where x - hi is not a number.
//
// With parts = 1 (the "amx_bf16" kernel of bf16 activations, LinearOptions::allow_bf16_activations)
// only hi = bf16(x) is packed and multiplied: the product of x rounded to bf16 with W, f32
// accumulation, like oneDNN's bf16 matmul, at a third of the tile work.
//
// Tiles: 0-3 C (y^T of up to four 16-row blocks of x), 4 A (W), 5-7 B (hi, mid, lo parts of
// one 16-row block of x). The configuration is loaded at the start of every slice and released
// at its end (other AMX users, oneDNN or attention, may run on the same thread between calls).

// GCC 12's AVX-512 headers trip these on their own _mm512_undefined_* (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/amx_tile_config.h"
#include "kernels/cpu/avx512_transpose.h"
#include "kernels/cpu/linear_isa.h"

namespace spindle::kernels::cpu {
namespace {

inline __mmask16 lane_mask(int64_t count) {  // the first min(max(count, 0), 16) lanes
  return count >= 16 ? __mmask16(0xffff) : count <= 0 ? __mmask16(0) : __mmask16((1u << count) - 1);
}

// bf16 bits (in the low 16 of each of 32 words) back to f32: halves [0, 16) and [16, 32).
inline __m512 widen_lo(__m512i b) {
  const __m256i half = _mm512_extracti64x4_epi64(b, 0);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}
inline __m512 widen_hi(__m512i b) {
  const __m256i half = _mm512_extracti64x4_epi64(b, 1);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

// 32 bf16 of (a0, a1) in order, then the f32 remainders a - bf16(a) (zero where not a number).
inline __m512i split_step(__m512& a0, __m512& a1) {
  const __m512i b = (__m512i)_mm512_cvtne2ps_pbh(a1, a0);  // words [0, 16) from a0, [16, 32) from a1
  const __m512 r0 = _mm512_sub_ps(a0, widen_lo(b));
  const __m512 r1 = _mm512_sub_ps(a1, widen_hi(b));
  a0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r0, r0, _CMP_ORD_Q), r0);
  a1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r1, r1, _CMP_ORD_Q), r1);
  return b;
}

}  // namespace

namespace {

template <int Parts>
void pack_x(const float* x, int64_t m, int64_t k, uint16_t* packed, int64_t chunk_begin, int64_t chunk_end) {
  const int64_t nmb = (m + kLinearAmxRows - 1) / kLinearAmxRows;
  for (int64_t c = chunk_begin; c < chunk_end; ++c) {
    const int64_t k0 = c * kLinearAmxChunk;
    const __mmask16 m0 = lane_mask(k - k0), m1 = lane_mask(k - k0 - 16);
    for (int64_t mb = 0; mb < nmb; ++mb) {
      __m512i parts[Parts][16];  // [part][row of x]: 16 dwords = 16 (k, k + 1) pairs
      for (int r = 0; r < 16; ++r) {
        const int64_t row = mb * kLinearAmxRows + r;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        if (row < m) {
          a0 = _mm512_maskz_loadu_ps(m0, x + row * k + k0);
          a1 = _mm512_maskz_loadu_ps(m1, x + row * k + k0 + 16);
        }
        for (int part = 0; part < Parts; ++part) parts[part][r] = split_step(a0, a1);
      }
      for (int part = 0; part < Parts; ++part) {
        transpose16x16(parts[part]);  // row i: pair i of every x row
        uint16_t* tile = packed + ((c * Parts + part) * nmb + mb) * kLinearAmxTileElems;
        for (int i = 0; i < 16; ++i) _mm512_storeu_si512(tile + i * 32, parts[part][i]);
      }
    }
  }
}

}  // namespace

void linear_amx_pack_x(const float* x, int64_t m, int64_t k, int64_t parts, uint16_t* packed, int64_t chunk_begin,
                       int64_t chunk_end) {
  if (parts == 1) {
    pack_x<1>(x, m, k, packed, chunk_begin, chunk_end);
  } else {
    pack_x<kLinearAmxParts>(x, m, k, packed, chunk_begin, chunk_end);
  }
}

// One 16-row block of x (tile C = MB) against the A tile in tile 4: all three parts, or hi alone.
#define SPINDLE_AMX_BLOCK(MB)                                         \
  do {                                                                \
    if constexpr (Parts == 3) {                                       \
      _tile_loadd(5, b + (0 * nmb + (MB)) * kLinearAmxTileElems, 64); \
      _tile_loadd(6, b + (1 * nmb + (MB)) * kLinearAmxTileElems, 64); \
      _tile_loadd(7, b + (2 * nmb + (MB)) * kLinearAmxTileElems, 64); \
      _tile_dpbf16ps(MB, 4, 7);                                       \
      _tile_dpbf16ps(MB, 4, 6);                                       \
      _tile_dpbf16ps(MB, 4, 5);                                       \
    } else {                                                          \
      _tile_loadd(5, b + (MB)*kLinearAmxTileElems, 64);               \
      _tile_dpbf16ps(MB, 4, 5);                                       \
    }                                                                 \
  } while (0)

namespace {

template <int Parts>
void slice_amx(const LinearSliceParams& p, const uint16_t* packed, int64_t col_begin, int64_t col_end) {
  static_assert(Parts == 1 || Parts == 3, "SPINDLE_AMX_BLOCK spells out one or three parts");
  const int64_t k = p.k, m = p.m, n = p.n;
  const int64_t nmb = (m + kLinearAmxRows - 1) / kLinearAmxRows;  // 1 .. 4
  const int64_t nchunks = (k + kLinearAmxChunk - 1) / kLinearAmxChunk;
  const int64_t k_tail = k % kLinearAmxChunk;
  const uint16_t* w = static_cast<const uint16_t*>(p.w);
  constexpr int64_t kPrefetchChunks = 8;  // 512 bytes ahead in each of the 16 W rows
  alignas(64) uint16_t a_tail[16 * kLinearAmxChunk];
  alignas(64) float ct[kLinearAmxMaxBlocks][16 * 16];

  load_full_amx_tiles(8);
  int64_t j = col_begin;
  for (; j + 16 <= col_end; j += 16) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const uint16_t* wj = w + j * k;
    for (int64_t c = 0; c < nchunks; ++c) {
      const int64_t k0 = c * kLinearAmxChunk;
      if (c + kPrefetchChunks < nchunks) {
        for (int r = 0; r < 16; ++r) _mm_prefetch(reinterpret_cast<const char*>(wj + r * k + k0 + kPrefetchChunks * kLinearAmxChunk), _MM_HINT_T0);
      }
      if (k_tail != 0 && c == nchunks - 1) {
        // The last chunk is partial: a zero-padded copy (a full tile would read past the row, and
        // past the end of W for the last row).
        std::memset(a_tail, 0, sizeof(a_tail));
        for (int r = 0; r < 16; ++r) std::memcpy(a_tail + r * kLinearAmxChunk, wj + r * k + k0, size_t(k_tail) * 2);
        _tile_loadd(4, a_tail, kLinearAmxChunk * 2);
      } else {
        _tile_loadd(4, wj + k0, k * 2);
      }
      const uint16_t* b = packed + c * Parts * nmb * kLinearAmxTileElems;
      SPINDLE_AMX_BLOCK(0);
      if (nmb > 1) SPINDLE_AMX_BLOCK(1);
      if (nmb > 2) SPINDLE_AMX_BLOCK(2);
      if (nmb > 3) SPINDLE_AMX_BLOCK(3);
    }
    _tile_stored(0, ct[0], 64);
    if (nmb > 1) _tile_stored(1, ct[1], 64);
    if (nmb > 2) _tile_stored(2, ct[2], 64);
    if (nmb > 3) _tile_stored(3, ct[3], 64);
    // ct[mb][r][i] = y[mb * 16 + i][j + r]
    for (int64_t mb = 0; mb < nmb; ++mb) {
      for (int64_t i = 0; i < 16 && mb * 16 + i < m; ++i) {
        float* yrow = p.y + (mb * 16 + i) * n + j;
        for (int r = 0; r < 16; ++r) yrow[r] = ct[mb][r * 16 + i] + (p.bias ? p.bias[j + r] : 0.0f);
      }
    }
  }
  _tile_release();
  // Fewer than 16 columns left: the AVX-512 kernel (same exact f32 products).
  if (j < col_end) linear_slice_avx512(p, j, col_end);
}

}  // namespace

void linear_slice_amx(const LinearSliceParams& p, int64_t parts, const uint16_t* packed, int64_t col_begin,
                      int64_t col_end) {
  if (parts == 1) {
    slice_amx<1>(p, packed, col_begin, col_end);
  } else {
    slice_amx<kLinearAmxParts>(p, packed, col_begin, col_end);
  }
}

#undef SPINDLE_AMX_BLOCK

}  // namespace spindle::kernels::cpu
