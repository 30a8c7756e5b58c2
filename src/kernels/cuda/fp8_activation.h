// Activations quantized to FP8 E4M3 on the device, for the FP8 tensor-core products
// (fp8_lt_linear.h). x f32 [rows, in] row-major -> codes e4m3 [rows, in] and f32 scales with
// x[r, i] ~= e4m3(codes[r, i]) * scale, scale = amax / 448 over the scale's group (1 when the
// group's amax is 0), codes = e4m3(x / scale) rounded to nearest even and saturated (E4M3FN has no
// infinity: util/fp8.h; a non-finite x gives a NaN code and poisons its row as it would in bf16).
//
// Groups and the scales' layout (the layouts cuBLASLt reads for matrix B). Every group lies in one
// row, so a row's codes never depend on the other rows of the batch (one scale over the whole batch
// would make each request's precision depend on its neighbours' magnitudes):
//   kPerToken      one per row                                scales[r]              (OUTER_VEC_32F)
//   kPerToken128   one per row and 128 columns (in % 128 == 0) scales[kb * rows + r] (VEC128_32F,
//                  "outer-dimension major": the rows of one column block are contiguous)
//
// C++17 (included by .cu files). Every pointer is device memory of the current device.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace spindle::kernels::cuda {

enum class Fp8ActScale { kPerToken, kPerToken128 };

inline constexpr int64_t kFp8ActBlock = 128;

// The floats `scales` holds.
int64_t fp8_activation_scale_count(Fp8ActScale mode, int64_t rows, int64_t in);

// Throws spindle::Error (a CUDA error) when rows or in is not positive, or in % 128 != 0 for kPerToken128.
void launch_quantize_fp8_activations(const float* x, int64_t rows, int64_t in, Fp8ActScale mode, uint8_t* codes,
                                     float* scales, cudaStream_t stream);

// dst[i] = *scale for i < n: a per-tensor weight scale as cuBLASLt's OUTER_VEC_32F vector.
void launch_broadcast_scale(const float* scale, int64_t n, float* dst, cudaStream_t stream);

// y[r, c] = f32(in[r, c]) (+ bias[c] when bias is not null): in bf16 [rows, cols], y f32.
void launch_bf16_to_f32_bias(const uint16_t* in, int64_t rows, int64_t cols, const float* bias, float* y,
                             cudaStream_t stream);

}  // namespace spindle::kernels::cuda
