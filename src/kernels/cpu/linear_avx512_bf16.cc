// Direct linear kernel with AVX512-BF16 dot products (vdpbf16ps); see linear_isa.h. bf16 weights
// and x already rounded to bf16 (linear_round_to_bf16_avx512): one instruction multiplies 32 bf16
// pairs and adds them, two by two, into 16 f32 lanes, straight from the stored weights (no
// widening). That is half the instructions per W byte of linear_avx512.cc's widen + FMA, and a
// quarter of its arithmetic per output at m rows: the f32 kernel turns compute-bound from a few rows
// (a 16-row 1B decode step at ~20% of the read bandwidth on 2 Zen 4 cores,
// bench/results/2026-12-04-devvm-zen4), this one much later.
//
// Compiled with the AVX-512 flags of kernels/CMakeLists.txt. The same tiling as linear_avx512.cc
// (up to 5 rows per pass over 24-column sub-blocks of W kept in L2; rows in ceil(m / 5) near-equal
// groups), 32 k per step, the k tail by masked loads (zeros add nothing); its own prefetch rule
// (columns() below).
//
// Every output element is the same sum in the same order whatever m: lane l accumulates the pairs
// (t, t + 1), t = 2l, 2l + 32, ... in order by vdpbf16ps, then linear_avx512.cc's reduction tree,
// then + bias. So a row's outputs equal those of a 1-row call bit for bit (a speculative verify
// gives the decode step's logits). vdpbf16ps treats bf16 denormals as zero and flushes denormal
// results (as the hardware defines it); x's rounding (VCVTNEPS2BF16) is round-to-nearest-even with
// denormal inputs as zero.

#include "kernels/cpu/linear_avx512_isa.h"

namespace spindle::kernels::cpu {
namespace {

inline __m512bh load32(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
inline __m512bh load32(const uint16_t* p, __mmask32 m) { return (__m512bh)_mm512_maskz_loadu_epi16(m, p); }

// y[i, j0 + r] for i < MR, r < NR. x: [MR, k] bf16 (row stride k); w: NR rows of W from column j0;
// next: the W the caller runs next, prefetched while this tile runs, or null; ahead: prefetch this
// tile's rows ahead instead. Each step reads one 64-byte line of every W row.
template <int MR, int NR>
void tile(const uint16_t* x, const uint16_t* w, int64_t k, float* y, int64_t ldy, const float* bias,
          const uint16_t* next, bool ahead) {
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  const char* pf = reinterpret_cast<const char*>(next);
  int64_t t = 0;
  for (; t + 32 <= k; t += 32) {
    if (next) {
      // NR lines of the next tile per step, into L2: all of it by the end of this one.
      for (int b = 0; b < NR * 64; b += 64) _mm_prefetch(pf + t * NR * 2 + b, _MM_HINT_T1);
    } else if (ahead) {
      for (int r = 0; r < NR; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w + r * k + t) + kLinearAheadBytes, _MM_HINT_T0);
    }
    __m512bh xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = load32(x + i * k + t);
    for (int r = 0; r < NR; ++r) {
      const __m512bh wv = load32(w + r * k + t);
      for (int i = 0; i < MR; ++i) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv[i], wv);
    }
  }
  if (t < k) {
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (k - t)) - 1);
    __m512bh xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = load32(x + i * k + t, mask);
    for (int r = 0; r < NR; ++r) {
      const __m512bh wv = load32(w + r * k + t, mask);
      for (int i = 0; i < MR; ++i) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv[i], wv);
    }
  }
  store_sums<MR, NR>(acc, y, ldy, bias);
}

// Columns [c0, c1) for MR rows of x from row i0 (linear_avx512.cc's columns(), bf16 x).
template <int MR, int NR>
void columns(const LinearSliceParams& p, const uint16_t* xb, int64_t i0, int64_t c0, int64_t c1, bool rows_ahead) {
  const uint16_t* w = static_cast<const uint16_t*>(p.w);
  const uint16_t* x = xb + i0 * p.k;
  float* y = p.y + i0 * p.n;
  // Passes of up to 4 rows prefetch the next tile (NR contiguous rows of W) into L2 whatever its
  // size; 5-row passes prefetch their own rows ahead. Unlike linear_avx512.cc's rule (next tile into
  // L1 only when it is <= kLinearTileAheadMaxBytes), measured on 2 Zen 4 cores (1B shape, 4 rounds
  // alternating, bench/results/2026-12-04-devvm-zen4): decode batch 1 median 111.8 -> 93.5 ms,
  // batch 16 249.8 -> 225.4 ms. (Each 1B W row is one 4 KiB page, so the hardware prefetcher
  // restarts on every row of a tile.) 5-row passes over rows shorter than 2 * kLinearAheadBytes
  // (kjv-tiny's 768 bytes, where "ahead" lands in the tile's own next row) prefetch the next tile
  // too: a kjv-tiny 5-row verify 2.37-2.49x -> 1.70-1.79x a 1-row step
  // (bench/results/2026-12-04-zen4-spec).
  const bool tile_ahead = MR < 5 || p.k * 2 < 2 * kLinearAheadBytes;
  for_each_tile<NR>(c0, c1, tile_ahead, rows_ahead && !tile_ahead, rows_ahead,
                    [&](auto cols, int64_t j, bool next_ahead, bool ahead) {
                      constexpr int kCols = decltype(cols)::value;
                      tile<MR, kCols>(x, w + j * p.k, p.k, y + j, p.n, p.bias ? p.bias + j : nullptr,
                                      next_ahead ? w + (j + kCols) * p.k : nullptr, ahead);
                    });
}

// Rows [i0, i0 + rows) over columns [c0, c1), rows <= kLinearAvx512PassRows. Registers: MR * NR
// accumulators + MR x vectors + one W vector <= 29.
void pass(const LinearSliceParams& p, const uint16_t* xb, int64_t i0, int64_t rows, int64_t c0, int64_t c1) {
  switch (rows) {
    case 1:
      columns<1, 12>(p, xb, i0, c0, c1, true);
      break;
    case 2:
      columns<2, 12>(p, xb, i0, c0, c1, true);
      break;
    case 3:
      columns<3, 8>(p, xb, i0, c0, c1, true);
      break;
    case 4:
      columns<4, 6>(p, xb, i0, c0, c1, true);
      break;
    default:
      columns<5, 4>(p, xb, i0, c0, c1, true);
      break;
  }
}

}  // namespace

void linear_round_to_bf16_avx512(const float* x, int64_t count, uint16_t* out) {
  int64_t e = 0;
  for (; e + 32 <= count; e += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + e + 16), _mm512_loadu_ps(x + e));
    _mm512_storeu_si512(out + e, (__m512i)v);
  }
  for (; e < count; e += 16) {
    const int64_t n = min64(16, count - e);
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + e));
    _mm256_mask_storeu_epi16(out + e, m, (__m256i)v);
  }
}

void linear_slice_avx512_bf16(const LinearSliceParams& p, const uint16_t* x_bf16, int64_t col_begin,
                              int64_t col_end) {
  for_each_pass(p.m, col_begin, col_end,
                [&](int64_t i0, int64_t rows, int64_t c0, int64_t c1) { pass(p, x_bf16, i0, rows, c0, c1); });
}

}  // namespace spindle::kernels::cpu
