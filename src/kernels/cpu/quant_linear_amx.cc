// Quantized linear kernel with AMX-INT8 (tdpbusd) for prefill rows; the layout and the arithmetic
// are in quant_linear.h. Compiled with -mamx-tile -mamx-int8 and the AVX-512 flags.
//
// Per weight group (16 rows, the tile's N) and tile of up to 16 activation rows (its M), for every
// 32-element block b (Q6_K: each half of 16 on its own):
//   B tile = the block's 8 decoded vectors as they are (row kk = k 4kk..4kk+3 of the 16 weight
//            rows: exactly tdpbusd's B layout), signed quants (Q8_0 as stored; others 0..63);
//   A tile = the activations' int8 quants xor 0x80 (= x + 128, unsigned), M rows of 32 bytes;
//   C = A . B (int32 [M, 16]), then  isum = C - 128 * sum_k q  - offset * xsum  exactly, where
//   sum_k q per weight row comes from vpdpbusd(1, q) on the decoded vectors, and per output
//   acc += float(isum) * (scale * dx) - min * (dx * xsum)  in f32, in the same order as the
//   AVX-512 kernel (the same integers, so its outputs should equal that kernel's bit for bit).
// Status: compiled everywhere, run only where AMX-INT8 is usable; written and unit-tested for its
// skip reason on a machine without AMX (no AMX machine could be started that day), so its first run
// on an AMX CPU is tests/kernels/quant_linear_test.cc's amx_int8 cases.
// The tile configuration is loaded per tile and released at the end of each task.
#include <algorithm>

#include "kernels/cpu/amx_tile_config.h"
#include "kernels/cpu/quant_linear_avx512_decode.h"

namespace spindle::kernels::cpu {
namespace {

// Tiles: 0, 1 C (lo, hi halves for Q6_K; else only 0); 2, 3 A; 4, 5 B. kb: bytes of k per
// product (32, or 16 for Q6_K's halves).
void load_config(int rows, int kb) {
  AmxTileConfig cfg;
  for (int t = 0; t < 2; ++t) cfg.tile(t, rows, 64);
  for (int t = 2; t < 4; ++t) cfg.tile(t, rows, kb);
  for (int t = 4; t < 6; ++t) cfg.tile(t, kb / 4, 64);
  cfg.load();
}

template <QuantType T>
constexpr int32_t kOffset = T == QuantType::kQ4_0 ? 8 : T == QuantType::kQ5_0 ? 16 : T == QuantType::kQ6_K ? 32 : 0;

// Per-task scratch: the unsigned activation quants of a row chunk, the B tile, the C tiles.
struct Scratch {
  std::vector<uint8_t> xu;  // [rows of the chunk, k]
  alignas(64) uint8_t b[8 * 64];
  alignas(64) int32_t c[2][16 * 16];
};

// sum over the 4 vectors w[0..3] of q per weight row (int32 x 16).
inline __m512i quant_sums(const __m512i* w) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i s = _mm512_setzero_si512();
  for (int t = 0; t < 4; ++t) s = _mm512_dpbusd_epi32(s, ones, w[t]);
  return s;
}

// acc[i] (i < rows) += block b of activation rows i0 + i: c_lo/c_hi the tile products.
template <QuantType T>
void epilogue(const Block& blk, const QuantizedActivations& x, int64_t i0, int rows, int64_t b, const Scratch& s,
              __m512i qsum_lo, __m512i qsum_hi, __m512* acc) {
  const int64_t k = x.k, nb = k / kQuantBlock;
  for (int i = 0; i < rows; ++i) {
    const float dx = x.scale[(i0 + i) * nb + b];
    const int32_t* s16 = x.sum16.data() + (i0 + i) * (k / 16) + 2 * b;
    const __m512 vdx = _mm512_set1_ps(dx);
    if constexpr (T == QuantType::kQ6_K) {
      __m512i lo = _mm512_sub_epi32(_mm512_load_si512(s.c[0] + 16 * i), _mm512_slli_epi32(qsum_lo, 7));
      __m512i hi = _mm512_sub_epi32(_mm512_load_si512(s.c[1] + 16 * i), _mm512_slli_epi32(qsum_hi, 7));
      lo = _mm512_sub_epi32(lo, _mm512_set1_epi32(kOffset<T> * s16[0]));
      hi = _mm512_sub_epi32(hi, _mm512_set1_epi32(kOffset<T> * s16[1]));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(blk.scale_lo, vdx), acc[i]);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(blk.scale_hi, vdx), acc[i]);
    } else {
      __m512i sum = _mm512_sub_epi32(_mm512_load_si512(s.c[0] + 16 * i),
                                     _mm512_slli_epi32(_mm512_add_epi32(qsum_lo, qsum_hi), 7));
      if constexpr (kOffset<T> != 0) sum = _mm512_sub_epi32(sum, _mm512_set1_epi32(kOffset<T> * (s16[0] + s16[1])));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(blk.scale_lo, vdx), acc[i]);
      if constexpr (ql::kHasMin<T>) {
        acc[i] = _mm512_fnmadd_ps(blk.min, _mm512_set1_ps(dx * static_cast<float>(s16[0] + s16[1])), acc[i]);
      }
    }
  }
}

// y[i0 + i, 16 g + r] for i < rows (<= 16): xu holds the chunk's unsigned quants from row c0.
template <QuantType T>
void tile(const QuantGroupsParams& p, int64_t g, int64_t i0, int rows, Scratch& s, int64_t c0) {
  const PackedQuantWeight& w = *p.w;
  const QuantizedActivations& x = *p.x;
  const uint8_t* gw = w.data() + g * w.group_bytes;
  const int64_t k = w.k, nb = k / kQuantBlock;
  constexpr bool kHalves = T == QuantType::kQ6_K;
  load_config(rows, kHalves ? 16 : 32);
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  Block blk;
  blk.min = _mm512_setzero_ps();
  const uint8_t* a = s.xu.data() + (i0 - c0) * k;
  for (int64_t b = 0; b < nb; ++b) {
    decode<T, false>(gw, b, blk);
    for (int t = 0; t < 8; ++t) _mm512_store_si512(s.b + 64 * t, blk.w[t]);
    const __m512i qsum_lo = quant_sums(blk.w), qsum_hi = quant_sums(blk.w + 4);
    _tile_zero(0);
    if constexpr (kHalves) {
      _tile_zero(1);
      _tile_loadd(2, a + b * kQuantBlock, k);
      _tile_loadd(3, a + b * kQuantBlock + 16, k);
      _tile_loadd(4, s.b, 64);
      _tile_loadd(5, s.b + 256, 64);
      _tile_dpbusd(0, 2, 4);
      _tile_dpbusd(1, 3, 5);
      _tile_stored(0, s.c[0], 64);
      _tile_stored(1, s.c[1], 64);
    } else {
      _tile_loadd(2, a + b * kQuantBlock, k);
      _tile_loadd(4, s.b, 64);
      _tile_dpbusd(0, 2, 4);
      _tile_stored(0, s.c[0], 64);
    }
    epilogue<T>(blk, x, i0, rows, b, s, qsum_lo, qsum_hi, acc);
  }
  store_group(p, g, i0, rows, acc);
}

template <QuantType T>
void groups(const QuantGroupsParams& p, int64_t g0, int64_t g1) {
  thread_local Scratch s;
  const QuantizedActivations& x = *p.x;
  const int64_t m = x.m, k = x.k;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t c0 = 0; c0 < m; c0 += kQuantRowChunk) {
    const int64_t c1 = std::min(m, c0 + kQuantRowChunk);
    s.xu.resize(static_cast<size_t>((c1 - c0) * k));
    for (int64_t j = 0; j < (c1 - c0) * k; j += 64) {  // k is a multiple of 32: masked tail of 32
      const __mmask64 mk = (c1 - c0) * k - j >= 64 ? ~__mmask64{0} : __mmask64{0xffffffffu};
      const __m512i v = _mm512_maskz_loadu_epi8(mk, x.q.data() + c0 * k + j);
      _mm512_mask_storeu_epi8(s.xu.data() + j, mk, _mm512_xor_si512(v, flip));
    }
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t i = c0; i < c1; i += 16) tile<T>(p, g, i, static_cast<int>(std::min<int64_t>(16, c1 - i)), s, c0);
    }
  }
  _tile_release();
}

}  // namespace

void quant_linear_groups_amx(const QuantGroupsParams& p, int64_t group_begin, int64_t group_end) {
  with_quant_type(p.w->type, [&](auto t) { groups<decltype(t)::value>(p, group_begin, group_end); });
}

}  // namespace spindle::kernels::cpu
