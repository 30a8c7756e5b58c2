// Device helpers of bench_attention_cuda (declared in attention_cuda.cc): hash-based pseudo-random
// fills (value i depends only on (seed, i), so any chunk can be recomputed) and a 16-byte
// vectorized copy kernel, the yardstick for memory bandwidth.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"

namespace spindle::bench {
namespace {

constexpr int kThreads = 256;

// splitmix64 finalizer of (seed, index): 24 high bits -> uniform in [-1, 1).
__device__ __forceinline__ float hash_uniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + index + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// Nearest-even rounding, as util/half.h float_to_bf16_bits (inputs here are finite).
__device__ __forceinline__ uint16_t to_bf16_bits(float value) {
  const uint32_t u = __float_as_uint(value);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__global__ void fill_f32_kernel(float* p, size_t n, uint64_t seed) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) p[i] = hash_uniform(seed, i);
}

__global__ void fill_bf16_kernel(uint16_t* p, size_t n, uint64_t seed) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = to_bf16_bits(hash_uniform(seed, i));
  }
}

// dst[i] = src[i] over n 16-byte words; four independent loads in flight per thread.
__global__ void copy_vec16_kernel(int4* __restrict__ dst, const int4* __restrict__ src, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const int4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

int grid_for(size_t n, int num_sms) {
  const size_t wanted = (n + kThreads - 1) / kThreads;
  const size_t cap = size_t(num_sms > 0 ? num_sms : 132) * 8;
  return int(wanted < cap ? (wanted > 0 ? wanted : 1) : cap);
}

}  // namespace

void fill_uniform_f32(float* p, size_t n, uint64_t seed, int num_sms, cudaStream_t stream) {
  fill_f32_kernel<<<grid_for(n, num_sms), kThreads, 0, stream>>>(p, n, seed);
  CUDA_CHECK_LAUNCH();
}

void fill_uniform_bf16(uint16_t* p, size_t n, uint64_t seed, int num_sms, cudaStream_t stream) {
  fill_bf16_kernel<<<grid_for(n, num_sms), kThreads, 0, stream>>>(p, n, seed);
  CUDA_CHECK_LAUNCH();
}

// bytes must be a multiple of 16 and both pointers 16-byte aligned (cudaMalloc's are).
void copy_vec16(void* dst, const void* src, size_t bytes, int num_sms, cudaStream_t stream) {
  const size_t n = bytes / 16;
  copy_vec16_kernel<<<grid_for(n, num_sms), kThreads, 0, stream>>>(static_cast<int4*>(dst),
                                                                   static_cast<const int4*>(src), n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::bench
