// Internal: the per-ISA entry points of the direct linear kernels (linear_avx2.cc,
// linear_avx512.cc), called by linear.cc after it has checked CpuInfo. Plain data and
// out-of-line functions only: nothing here may be inline code compiled with ISA flags.
#pragma once

#include <cstdint>

#include "util/dtype.h"

namespace spindle::kernels::cpu {

// One slice of y = x . W^T + bias: output columns [col_begin, col_end) of every row of x.
struct LinearSliceParams {
  const float* x = nullptr;     // [m, k]
  const void* w = nullptr;      // [n, k] of w_dtype (kF32 or kBF16)
  DType w_dtype = DType::kBF16;
  const float* bias = nullptr;  // [n] or null
  float* y = nullptr;           // [m, n]
  int64_t m = 0, n = 0, k = 0;
};

// Register-tiled dot products (f32 accumulation): every group of up to 4 rows (avx2: ceil(m / 4)
// groups of near-equal size; avx512: up to 5 rows, ceil(m / 5) groups) passes over each sub-block of W, which stays in
// L2 between groups, so W is read from memory once per call. Each output element is the same sum in the same order
// whatever m (a row's outputs equal those of a 1-row call, bit for bit). col_begin is a multiple
// of kLinearSliceAlign (except for the last slice's tail, which the kernels handle).
void linear_slice_avx2(const LinearSliceParams& p, int64_t col_begin, int64_t col_end);
void linear_slice_avx512(const LinearSliceParams& p, int64_t col_begin, int64_t col_end);

// AVX512-BF16 dot products (linear_avx512_bf16.cc), bf16 weights only: the same slices and row
// groups as linear_slice_avx512, with x given as x_bf16 ([m, k], x rounded to bf16; p.x unused)
// and f32 accumulation. Also row-independent: a row's outputs equal those of a 1-row call.
// linear_round_to_bf16_avx512 rounds count floats to bf16 (nearest even, denormals to zero).
void linear_round_to_bf16_avx512(const float* x, int64_t count, uint16_t* out);
void linear_slice_avx512_bf16(const LinearSliceParams& p, const uint16_t* x_bf16, int64_t col_begin, int64_t col_end);

// AMX-BF16 (linear_amx.cc), bf16 weights only. x (at most kLinearAmxMaxBlocks * kLinearAmxRows
// rows) is first split into `parts` bf16 parts (kLinearAmxParts = 3: x = hi + mid + lo, the
// f32-accurate "amx"; 1: x rounded to bf16, the "amx_bf16" of bf16 activations) and packed into B
// tiles: the tile of chunk c (k in [32c, 32c + 32)), part, row block mb starts at element
//   ((c * parts + part) * num_blocks + mb) * kLinearAmxTileElems,  num_blocks = ceil(m / 16),
// 16 rows (k pairs) x 16 columns (rows of x) x 2, zero past m and k. linear_amx_pack_x writes
// chunks [chunk_begin, chunk_end); linear_slice_amx then computes columns [col_begin, col_end)
// (col_begin a multiple of 16) for every row of x (columns past the last full 16 with the
// avx512 kernel on p.x: with parts = 1 the caller passes x already rounded to bf16 there).
inline constexpr int64_t kLinearAmxRows = 16;
inline constexpr int64_t kLinearAmxMaxBlocks = 4;
inline constexpr int64_t kLinearAmxChunk = 32;
inline constexpr int64_t kLinearAmxParts = 3;
inline constexpr int64_t kLinearAmxTileElems = 16 * 32;
void linear_amx_pack_x(const float* x, int64_t m, int64_t k, int64_t parts, uint16_t* packed, int64_t chunk_begin,
                       int64_t chunk_end);
void linear_slice_amx(const LinearSliceParams& p, int64_t parts, const uint16_t* packed, int64_t col_begin,
                      int64_t col_end);

// The avx2/avx512 kernels walk a slice in sub-blocks of this many columns, whose W rows stay in
// L2 while every group of 4 rows of x passes over them (24 x 8192 bf16 = 384 KiB).
inline constexpr int64_t kLinearSubBlockCols = 24;
// Software prefetch of W in the avx2 tiles: a tile of at most kLinearTileAheadMaxBytes of W
// prefetches the next tile's W into L1 as it runs; a larger one prefetches each of its rows
// kLinearAheadBytes ahead when asked (a whole tile ahead would be farther than L1 holds). Measured
// in bench/results/2026-12-02-cpu-smallm and 2026-12-03-spec-cpu. The avx512 and avx512_bf16
// tiles of up to 4 rows prefetch the next tile whatever its size (larger ones into L2), see their
// columns() and bench/results/2026-12-04-devvm-zen4, 2026-12-04-zen4-spec.
inline constexpr int64_t kLinearTileAheadMaxBytes = 16 << 10;
inline constexpr int64_t kLinearAheadBytes = 1024;
// Slices handed to the thread pool are multiples of this many output columns (a multiple of the
// sub-block and of the AMX tile's 16 columns).
inline constexpr int64_t kLinearSliceAlign = 48;

}  // namespace spindle::kernels::cpu
