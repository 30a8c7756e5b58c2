// Kernels of fp8_activation.h. Per token: one block per row (max reduction, then the codes); per
// token and 128 columns: one warp per (row, block).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_activation.h"

namespace spindle::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kE4m3Max = 448.0f;

__device__ __forceinline__ float scale_of(float amax) { return amax > 0.0f ? amax / kE4m3Max : 1.0f; }

__device__ __forceinline__ uint8_t encode(float v, float scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v / scale, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// fmaxf ignores a NaN: the scale comes from the finite values, the NaN's own code is NaN.
__device__ __forceinline__ float abs_of(float v) { return fabsf(v); }

__global__ void per_token_kernel(const float* __restrict__ x, int64_t in, uint8_t* __restrict__ codes,
                                 float* __restrict__ scales) {
  __shared__ float partial[kThreads / 32];
  const int64_t r = blockIdx.x;
  const float* row = x + r * in;
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < in; i += blockDim.x) m = fmaxf(m, abs_of(row[i]));
  m = warp_max(m);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = m;
  __syncthreads();
  float amax = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) amax = fmaxf(amax, partial[w]);
  const float s = scale_of(amax);
  for (int64_t i = threadIdx.x; i < in; i += blockDim.x) codes[r * in + i] = encode(row[i], s);
  if (threadIdx.x == 0) scales[r] = s;
}

__global__ void per_token128_kernel(const float* __restrict__ x, int64_t rows, int64_t in,
                                    uint8_t* __restrict__ codes, float* __restrict__ scales) {
  const int64_t blocks_per_row = in / kFp8ActBlock;
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= rows * blocks_per_row) return;
  const int64_t r = warp / blocks_per_row, kb = warp % blocks_per_row;
  const float* src = x + r * in + kb * kFp8ActBlock;
  float v[kFp8ActBlock / 32];
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < kFp8ActBlock / 32; ++j) {
    v[j] = src[lane + 32 * j];
    m = fmaxf(m, abs_of(v[j]));
  }
  const float s = scale_of(warp_max(m));
  uint8_t* dst = codes + r * in + kb * kFp8ActBlock;
#pragma unroll
  for (int j = 0; j < kFp8ActBlock / 32; ++j) dst[lane + 32 * j] = encode(v[j], s);
  if (lane == 0) scales[kb * rows + r] = s;
}

__global__ void broadcast_kernel(const float* __restrict__ scale, int64_t n, float* __restrict__ dst) {
  const float v = *scale;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    dst[e] = v;
  }
}

__global__ void bf16_to_f32_bias_kernel(const __nv_bfloat16* __restrict__ in, int64_t rows, int64_t cols,
                                        const float* __restrict__ bias, float* __restrict__ y) {
  const int64_t n = rows * cols;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const float v = __bfloat162float(in[e]);
    y[e] = bias != nullptr ? v + bias[e % cols] : v;
  }
}

int grid_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)); }

}  // namespace

void launch_broadcast_scale(const float* scale, int64_t n, float* dst, cudaStream_t stream) {
  if (n <= 0) return;
  broadcast_kernel<<<grid_for(n), kThreads, 0, stream>>>(scale, n, dst);
  CUDA_CHECK_LAUNCH();
}

void launch_bf16_to_f32_bias(const uint16_t* in, int64_t rows, int64_t cols, const float* bias, float* y,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  bf16_to_f32_bias_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(in), rows, cols, bias, y);
  CUDA_CHECK_LAUNCH();
}

int64_t fp8_activation_scale_count(Fp8ActScale mode, int64_t rows, int64_t in) {
  switch (mode) {
    case Fp8ActScale::kPerToken: return rows;
    case Fp8ActScale::kPerToken128: return rows * ((in + kFp8ActBlock - 1) / kFp8ActBlock);
  }
  return 0;
}

void launch_quantize_fp8_activations(const float* x, int64_t rows, int64_t in, Fp8ActScale mode, uint8_t* codes,
                                     float* scales, cudaStream_t stream) {
  if (rows <= 0 || in <= 0 || rows > INT32_MAX || (mode == Fp8ActScale::kPerToken128 && in % kFp8ActBlock != 0)) {
    throw_cuda_error(cudaErrorInvalidValue,
                     "launch_quantize_fp8_activations: empty x, more than 2^31 rows, or in % 128 != 0 with per-128 "
                     "scales",
                     __FILE__, __LINE__);
  }
  switch (mode) {
    case Fp8ActScale::kPerToken:
      per_token_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, in, codes, scales);
      break;
    case Fp8ActScale::kPerToken128: {
      const int64_t threads = rows * (in / kFp8ActBlock) * 32;
      per_token128_kernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
          x, rows, in, codes, scales);
      break;
    }
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda
