// Device conversions around FP8 products (issue 47): an FP8 weight dequantized to bf16 for the
// cuBLAS path of many-row products, and the sum of a split product's two halves.
//
// C++17 (included by .cu files). Every pointer is device memory of the current device.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/gemv_fp8.h"

namespace spindle::kernels::cuda {

// out[o, i] = bf16(e4m3(w[o, i]) * s) (s per gemv_fp8.h's modes), [out, in] row-major: one
// rounding of the f32 product to bf16 (nearest even), so within 2^-9 relative of the dequantized
// weight (exact where s is a power of two).
void launch_fp8_dequantize_bf16(const uint8_t* w, const float* scale, Fp8Scale mode, int64_t out, int64_t in,
                                uint16_t* w_bf16, cudaStream_t stream);

// y[r, c] = a[r, c] + a[rows + r, c] (+ bias[c] when bias is not null), a [2 rows, cols], y [rows, cols].
void launch_add_row_halves(const float* a, int64_t rows, int64_t cols, const float* bias, float* y,
                           cudaStream_t stream);

}  // namespace spindle::kernels::cuda
