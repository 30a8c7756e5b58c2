// Device helpers of model_ops.cu's RMSNorm kernels (row_norm_vec_kernel). Include from .cu files
// only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/round16.cuh"

namespace spindle::kernels::cuda {

// row_norm_vec_kernel: each thread holds up to kRowVecs float4 of the row, at most
// kRowMaxThreads threads per row.
inline constexpr int kRowVecs = 4;
inline constexpr int kRowMaxThreads = 1024;

__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// 1 / sqrt(mean of squares + eps), as kernels::cpu::rms_norm computes it.
__device__ __forceinline__ float inverse_rms(double sum, int64_t cols, float eps) {
  const float mean = static_cast<float>(sum / static_cast<double>(cols));
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

// Four consecutive weights as f32 (i a multiple of 4; the weight slot is 8-byte aligned).
__device__ __forceinline__ float4 load_weight4(const void* w, WeightType type, int64_t i) {
  if (type == WeightType::kF32) return reinterpret_cast<const float4*>(w)[i / 4];
  const uint2 bits = reinterpret_cast<const uint2*>(w)[i / 4];
  if (type == WeightType::kBF16) {
    return make_float4(__uint_as_float(bits.x << 16), __uint_as_float(bits.x & 0xffff0000u),
                       __uint_as_float(bits.y << 16), __uint_as_float(bits.y & 0xffff0000u));
  }
  return make_float4(__half2float(__ushort_as_half(static_cast<uint16_t>(bits.x & 0xffffu))),
                     __half2float(__ushort_as_half(static_cast<uint16_t>(bits.x >> 16))),
                     __half2float(__ushort_as_half(static_cast<uint16_t>(bits.y & 0xffffu))),
                     __half2float(__ushort_as_half(static_cast<uint16_t>(bits.y >> 16))));
}

__device__ __forceinline__ double sum_squares4(double sum, float4 a) {
  sum += static_cast<double>(a.x) * static_cast<double>(a.x);
  sum += static_cast<double>(a.y) * static_cast<double>(a.y);
  sum += static_cast<double>(a.z) * static_cast<double>(a.z);
  return sum + static_cast<double>(a.w) * static_cast<double>(a.w);
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
}

// Columns 4 i .. 4 i + 3 of a normalised row: out = (x * inv_rms) * w (the weights there), and (o16 not null)
// the same rounded to 16 bits (bf16 when `bf16`, else f16).
__device__ __forceinline__ void store_normed4(float4 x, float4 w, float inv_rms, int64_t i, float4* out, uint2* o16,
                                              bool bf16) {
  const float4 y = make_float4(__fmul_rn(__fmul_rn(x.x, inv_rms), w.x), __fmul_rn(__fmul_rn(x.y, inv_rms), w.y),
                               __fmul_rn(__fmul_rn(x.z, inv_rms), w.z), __fmul_rn(__fmul_rn(x.w, inv_rms), w.w));
  out[i] = y;
  if (o16 != nullptr) {
    float unused;
    const uint32_t a = round_16bit(y.x, bf16, &unused), b = round_16bit(y.y, bf16, &unused);
    const uint32_t c = round_16bit(y.z, bf16, &unused), d = round_16bit(y.w, bf16, &unused);
    o16[i] = make_uint2(a | (b << 16), c | (d << 16));
  }
}

}  // namespace spindle::kernels::cuda
