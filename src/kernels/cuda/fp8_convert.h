// Device conversions around FP8 products (issue 47): an FP8 weight converted to bf16 for the cuBLAS
// path of many-row products (without rounding: the codes alone, or the dequantized weight as an
// exact-to-2^-16 pair hi + lo), the scale epilogue, and the sum of a split product's two halves.
//
// C++17 (included by .cu files). Every pointer is device memory of the current device.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/gemv_fp8.h"

namespace spindle::kernels::cuda {

// codes[o, i] = bf16(e4m3(w[o, i])), [out, in]: exact (every E4M3 value, subnormals included, is a
// bf16 value), the scale left for launch_scale_columns.
void launch_fp8_codes_bf16(const uint8_t* w, int64_t out, int64_t in, uint16_t* codes_bf16, cudaStream_t stream);

// The dequantized weight d = f32(e4m3(w) * s) as two bf16 weights: hi = bf16(d), lo = bf16(d - hi)
// (round to nearest even): |hi + lo - d| <= 2^-9 |d - hi| <= 2^-18 |d|, so x . hi^T + x . lo^T
// is the product with the f32 weight to ~2^-16 relative per term. Any mode (block scales above all).
void launch_fp8_dequantize_bf16_split(const uint8_t* w, const float* scale, Fp8Scale mode, int64_t out, int64_t in,
                                      uint16_t* hi, uint16_t* lo, cudaStream_t stream);

// y[r, o] = y[r, o] * s(o) (+ bias[o] when bias is not null), y f32 [rows, out], s = scale[0]
// (kPerTensor) or scale[o] (kPerChannel): the scale applied in f32 to a product of the codes.
void launch_scale_columns(float* y, int64_t rows, int64_t out, const float* scale, Fp8Scale mode, const float* bias,
                          cudaStream_t stream);

// y[r, c] = a[r, c] + a[rows + r, c] (+ bias[c] when bias is not null), a [2 rows, cols], y [rows, cols].
void launch_add_row_halves(const float* a, int64_t rows, int64_t cols, const float* bias, float* y,
                           cudaStream_t stream);

}  // namespace spindle::kernels::cuda
