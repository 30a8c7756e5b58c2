// Kernels of fp8_convert.h: one thread per element, grid-stride.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_convert.h"

namespace spindle::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks)); }

__global__ void codes_bf16_kernel(const uint8_t* __restrict__ w, int64_t n, __nv_bfloat16* __restrict__ dst) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    __nv_fp8_e4m3 code;
    code.__x = w[e];
    dst[e] = __float2bfloat16_rn(static_cast<float>(code));  // exact
  }
}

__global__ void dequantize_split_kernel(const uint8_t* __restrict__ w, const float* __restrict__ scale, Fp8Scale mode,
                                        int64_t out, int64_t in, __nv_bfloat16* __restrict__ hi,
                                        __nv_bfloat16* __restrict__ lo) {
  const int64_t n = out * in;
  const int64_t blocks_per_row = (in + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = e / in, i = e % in;
    const float s = mode == Fp8Scale::kPerTensor    ? scale[0]
                    : mode == Fp8Scale::kPerChannel ? scale[o]
                                                    : scale[(o / kFp8ScaleBlock) * blocks_per_row + i / kFp8ScaleBlock];
    __nv_fp8_e4m3 code;
    code.__x = w[e];
    const float d = static_cast<float>(code) * s;
    const __nv_bfloat16 h = __float2bfloat16_rn(d);
    hi[e] = h;
    lo[e] = __float2bfloat16_rn(d - __bfloat162float(h));  // d - h is exact in f32
  }
}

__global__ void scale_columns_kernel(float* __restrict__ y, int64_t rows, int64_t out, const float* __restrict__ scale,
                                     Fp8Scale mode, const float* __restrict__ bias) {
  const int64_t n = rows * out;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = e % out;
    const float v = y[e] * (mode == Fp8Scale::kPerTensor ? scale[0] : scale[o]);
    y[e] = bias != nullptr ? v + bias[o] : v;
  }
}

__global__ void add_row_halves_kernel(const float* __restrict__ a, int64_t rows, int64_t cols,
                                      const float* __restrict__ bias, float* __restrict__ y) {
  const int64_t n = rows * cols;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const float v = a[e] + a[n + e];
    y[e] = bias != nullptr ? v + bias[e % cols] : v;
  }
}

}  // namespace

void launch_fp8_codes_bf16(const uint8_t* w, int64_t out, int64_t in, uint16_t* codes_bf16, cudaStream_t stream) {
  if (out <= 0 || in <= 0) return;
  codes_bf16_kernel<<<blocks_for(out * in), kThreads, 0, stream>>>(w, out * in,
                                                                  reinterpret_cast<__nv_bfloat16*>(codes_bf16));
  CUDA_CHECK_LAUNCH();
}

void launch_fp8_dequantize_bf16_split(const uint8_t* w, const float* scale, Fp8Scale mode, int64_t out, int64_t in,
                                      uint16_t* hi, uint16_t* lo, cudaStream_t stream) {
  if (out <= 0 || in <= 0) return;
  dequantize_split_kernel<<<blocks_for(out * in), kThreads, 0, stream>>>(
      w, scale, mode, out, in, reinterpret_cast<__nv_bfloat16*>(hi), reinterpret_cast<__nv_bfloat16*>(lo));
  CUDA_CHECK_LAUNCH();
}

void launch_scale_columns(float* y, int64_t rows, int64_t out, const float* scale, Fp8Scale mode, const float* bias,
                          cudaStream_t stream) {
  if (rows <= 0 || out <= 0) return;
  scale_columns_kernel<<<blocks_for(rows * out), kThreads, 0, stream>>>(y, rows, out, scale, mode, bias);
  CUDA_CHECK_LAUNCH();
}

void launch_add_row_halves(const float* a, int64_t rows, int64_t cols, const float* bias, float* y,
                           cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  add_row_halves_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(a, rows, cols, bias, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda
