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

__global__ void dequantize_bf16_kernel(const uint8_t* __restrict__ w, const float* __restrict__ scale, Fp8Scale mode,
                                       int64_t out, int64_t in, __nv_bfloat16* __restrict__ dst) {
  const int64_t n = out * in;
  const int64_t blocks_per_row = (in + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = e / in, i = e % in;
    const float s = mode == Fp8Scale::kPerTensor    ? scale[0]
                    : mode == Fp8Scale::kPerChannel ? scale[o]
                                                    : scale[(o / kFp8ScaleBlock) * blocks_per_row + i / kFp8ScaleBlock];
    __nv_fp8_e4m3 code;
    code.__x = w[e];
    dst[e] = __float2bfloat16_rn(static_cast<float>(code) * s);
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

void launch_fp8_dequantize_bf16(const uint8_t* w, const float* scale, Fp8Scale mode, int64_t out, int64_t in,
                                uint16_t* w_bf16, cudaStream_t stream) {
  if (out <= 0 || in <= 0) return;
  dequantize_bf16_kernel<<<blocks_for(out * in), kThreads, 0, stream>>>(w, scale, mode, out, in,
                                                                        reinterpret_cast<__nv_bfloat16*>(w_bf16));
  CUDA_CHECK_LAUNCH();
}

void launch_add_row_halves(const float* a, int64_t rows, int64_t cols, const float* bias, float* y,
                           cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  add_row_halves_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(a, rows, cols, bias, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda
