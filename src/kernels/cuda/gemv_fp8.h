// Small-batch products with FP8 E4M3 weights (issue 47, the decode half): y [rows, out] =
// x [rows, in] . dequant(W)^T (+ bias), W [out, in] e4m3 bytes row-major (util/fp8.h), x bf16
// [rows, in], products and sums in f32, the weight converted in registers (cvt e4m3x2 -> f16x2,
// exact) and never written back: a decode step reads 1 byte per weight instead of bf16's 2.
//
// Scales (dequant(W)[o, i] = W[o, i] * s):
//   kPerTensor   s = scale[0]
//   kPerChannel  s = scale[o]                                 (compressed-tensors "channel")
//   kBlock128    s = scale[(o / 128) * ceil(in / 128) + i / 128]  (quant_method "fp8",
//                weight_block_size [128, 128]; `weight_scale_inv` is this multiplier)
//
// Shape of the work: gemv16.h's (one warp per output row, 16-byte streaming loads of W, several in
// flight, x through the cache), 16 weights per load. Per-tensor and per-channel scales multiply the
// warp's sum once; a block scale multiplies each 16-weight partial sum (16 weights never straddle
// a 128-column block). Each y[r, o] has the same bits whatever `rows` is (row r's sums do not
// depend on the other rows).
//
// C++17 (included by .cu files). Every pointer is device memory of the current device.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace spindle::kernels::cuda {

enum class Fp8Scale { kPerTensor, kPerChannel, kBlock128 };

inline constexpr int64_t kGemvFp8MaxRows = 8;
inline constexpr int64_t kFp8ScaleBlock = 128;

// The floats `scale` holds for a weight [out, in] in `mode`.
int64_t fp8_scale_count(Fp8Scale mode, int64_t out, int64_t in);

// True when launch_gemv_fp8 takes this shape: 1 <= rows <= kGemvFp8MaxRows, in % 16 == 0, w and x
// 16-byte aligned.
bool gemv_fp8_supports(int64_t rows, int64_t in, const void* w, const void* x);

// y[r, o] = sum_i x[r, i] * dequant(W)[o, i] (+ bias[o] when bias is not null), f32 [rows, out].
// Throws spindle::Error (a CUDA error) when !gemv_fp8_supports(...) or out <= 0.
void launch_gemv_fp8(const uint8_t* w, const float* scale, Fp8Scale mode, const uint16_t* x_bf16, int64_t rows,
                     int64_t in, int64_t out, const float* bias, float* y, cudaStream_t stream);

}  // namespace spindle::kernels::cuda
