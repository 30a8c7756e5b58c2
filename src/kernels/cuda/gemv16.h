// Small-batch products with 16-bit weights: y [rows, out] = x [rows, in] . W^T (+ bias), W [out,
// in] bf16 or f16 row-major, x [rows, in] of the same 16-bit type, products and sums in f32 (the
// arithmetic of CublasLinear's rounding mode, in another order of the sums).
//
// Why: at 1-2 rows a product is a read of W and nothing else; in an 8B decode step on an H200
// cuBLAS reads the 4096x4096 and 14336->4096 weights at 56-85% of the copy bandwidth, with split-K
// and its reduction kernel (ncu, bench/results/2026-12-01-h200-decode-profile). Here one warp owns
// one output row (or 2 or 4 of them, so that each x load serves that many weight vectors: with one
// row per warp, past ~4 batch rows the x loads per weight vector made it slower than cuBLAS,
// bench/results/2026-12-01-h200-gemv16) and streams them with 16-byte loads, several in flight;
// x is read through the cache. CublasLinear uses it only where it measured faster (bench_gemv16).
//
// C++17 (included by .cu files). Every pointer is device memory of the current device.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/model_ops.h"

namespace spindle::kernels::cuda {

inline constexpr int64_t kGemv16MaxRows = 8;

// True when launch_gemv16 takes this shape: 1 <= rows <= kGemv16MaxRows, in % 8 == 0, and w, x
// 16-byte aligned (rows of W and x then are too).
bool gemv16_supports(int64_t rows, int64_t in, const void* w, const void* x);

// y[r, o] = sum_i x[r, i] w[o, i] (+ bias[o] when bias is not null), f32. bf16: the type of w and
// x (else f16). outs_per_warp: output rows per warp, 1, 2 or 4 (0: gemv16_outs_per_warp(...));
// it changes the speed only: each y[r, o] has the same bits whatever outs_per_warp and rows are.
// Throws (spindle::Error) when !gemv16_supports(...) or outs_per_warp is none of those.
void launch_gemv16(const void* w, const void* x, int64_t rows, int64_t in, int64_t out, bool bf16, const float* bias,
                   float* y, cudaStream_t stream, int outs_per_warp = 0);

// The output rows per warp launch_gemv16 uses when not told, from bench_gemv16 on an H200 with
// the 8B decode shapes (bench/results/2026-12-04-h200-gemv16-outs): 1 for 1-2 rows; for 3-4, 2
// where out > in (qkv, gate_up: 61% and 84% of the copy bandwidth against 50% and 74% with 1) and
// 1 otherwise (o, down: 2 per warp was 2-4% slower); 4 for 5-8 (fastest of the three there, yet
// slower than cuBLAS on most shapes, so CublasLinear does not send those rows here).
int gemv16_outs_per_warp(int64_t rows, int64_t out, int64_t in);

// The two fused forms below take 1 to kGemv16FusedMaxRows rows; each reads its two weight rows per
// warp, so from 3 rows on it does the x loads of gemv16 with 2 outputs per warp (bench_gemv16: at
// 5 rows and more cuBLAS is faster, so they stop at 4). Their callers (CublasLinear::forward_swiglu,
// CudaOps' q/k/v) use them up to gemv16_fused_use_max_rows() = kGemv16FusedMaxRows rows.
inline constexpr int64_t kGemv16FusedMaxRows = 4;
int64_t gemv16_fused_use_max_rows();

// The gate/up product of a SwiGLU MLP and its activation in one launch, for 1 to
// kGemv16SwigluMaxRows rows: w = [gate; up], [2 im, in] (a joined gate_up weight), and
//   act[r, j] = swiglu(x[r] . w[j], x[r] . w[im + j])   for j < im   (round16.cuh's swiglu)
// with the bits of launch_gemv16 over w followed by launch_silu_mul (model_ops.h) over its two
// halves; act16 (not null): act [rows, im] also rounded to 16 bits (bf16 when act16_bf16, else
// f16) as Out16 rounds it. Saves the [rows, 2 im] f32 round trip and the activation's launch.
inline constexpr int64_t kGemv16SwigluMaxRows = kGemv16FusedMaxRows;
bool gemv16_swiglu_supports(int64_t rows, int64_t in, const void* w, const void* x);
void launch_gemv16_swiglu(const void* w, const void* x, int64_t rows, int64_t in, int64_t im, bool bf16, float* act,
                          void* act16, bool act16_bf16, cudaStream_t stream);

// The joined q/k/v product (w = [q heads; k heads; v heads] x [in], bias optional) and
// launch_split_qkv_norm_rope's work without q/k norms, in one launch, for 1 to
// kGemv16QkvRopeMaxRows tokens: q [rows, num_heads, D], k and v [rows, num_kv_heads, D] get the
// bits of launch_gemv16 then launch_split_qkv_norm_rope (RoPE of q and k at `positions`; kv: the
// K/V page write as there). Saves the split's launch and the [rows, Q + 2K] f32 round trip.
struct QkvRopeParams {
  float* q = nullptr;
  float* k = nullptr;
  float* v = nullptr;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  const int64_t* positions = nullptr;  // [rows] device
  const float* table = nullptr;        // rope table [table_positions, head_dim] (cos halves, sin halves)
  int64_t table_positions = 0;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  KvPagesOut kv;
};
inline constexpr int64_t kGemv16QkvRopeMaxRows = kGemv16FusedMaxRows;
bool gemv16_qkv_rope_supports(int64_t rows, int64_t in, const void* w, const void* x, int head_dim);
void launch_gemv16_qkv_rope(const void* w, const void* x, int64_t rows, int64_t in, bool bf16, const float* bias,
                            const QkvRopeParams& p, cudaStream_t stream);

}  // namespace spindle::kernels::cuda
