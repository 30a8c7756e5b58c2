// Device helpers of RMSNorm shared by the kernels that must give the same bits: model_ops.cu's
// row_norm_vec_kernel and gemv16.cu's product with the residual add and norm after it
// (launch_gemv16_add_rms_norm). Include from .cu files only.
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

// Virtual warps of row_norm_vec_kernel's block that one warp of block_add_rms_norm_row stands in for.
inline constexpr int kNormWarpsPerWarp = 8;

// hidden += delta, then out = RMSNorm(hidden) * weight (o16: its 16-bit copy), one row of `cols`
// (a multiple of 4; float4-aligned rows) by the whole calling block, with the bits
// row_norm_vec_kernel gives with `vthreads` threads (row_norm_vec_threads' count), for rows of at
// most vthreads float4 (each of its threads holds one): the block's warps stand in for that
// kernel's vthreads / 32 warps (at most kNormWarpsPerWarp each: vthreads <= 8 blockDim.x), each
// virtual thread's square sum the same, the warp sums the same shuffles, the per-warp partials
// summed in warp order. Every load (hidden, delta, weight) is issued before the first add, so the
// row costs one round trip to memory. partial: shared memory of vthreads / 32 doubles. Every
// thread of the block must call it (it synchronises the block). delta is read through L2 only
// (__ldcg): other blocks of the grid may have written it just before (after a __threadfence).
static __device__ __noinline__ void block_add_rms_norm_row(float* __restrict__ hidden, const float* __restrict__ delta,
                                                           float* __restrict__ out, uint16_t* __restrict__ out16,
                                                           bool out16_bf16, int64_t cols, const void* weight,
                                                           WeightType type, float eps, int vthreads, double* partial) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  const int vwarps = vthreads / 32;
  const int64_t vecs = cols / 4;
  float4* h4 = reinterpret_cast<float4*>(hidden);
  const float4* d4 = reinterpret_cast<const float4*>(delta);
  float4 h[kNormWarpsPerWarp], d[kNormWarpsPerWarp], w[kNormWarpsPerWarp];
#pragma unroll
  for (int m = 0; m < kNormWarpsPerWarp; ++m) {
    const int64_t i = int64_t{warp + m * warps} * 32 + lane;  // virtual thread i's vector
    if (i < vecs) {
      h[m] = h4[i];
      d[m] = __ldcg(d4 + i);
      w[m] = load_weight4(weight, type, 4 * i);
    }
  }
  double sums[kNormWarpsPerWarp];
#pragma unroll
  for (int m = 0; m < kNormWarpsPerWarp; ++m) {
    const int64_t i = int64_t{warp + m * warps} * 32 + lane;
    sums[m] = 0.0;
    if (i < vecs) {
      h[m] = add4(h[m], d[m]);
      h4[i] = h[m];
      sums[m] = sum_squares4(sums[m], h[m]);
    }
  }
  // warp_sum of each, the shuffles of the 8 interleaved (each value's own order is warp_sum's).
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
    for (int m = 0; m < kNormWarpsPerWarp; ++m) sums[m] += __shfl_xor_sync(0xffffffffu, sums[m], offset);
  }
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < kNormWarpsPerWarp; ++m) {
      if (warp + m * warps < vwarps) partial[warp + m * warps] = sums[m];
    }
  }
  __syncthreads();
  double total = 0.0;
  for (int v = 0; v < vwarps; ++v) total += partial[v];  // row_norm_vec_kernel's order
  const float inv_rms = inverse_rms(total, cols, eps);
  float4* o = reinterpret_cast<float4*>(out);
  uint2* o16 = reinterpret_cast<uint2*>(out16);
#pragma unroll
  for (int m = 0; m < kNormWarpsPerWarp; ++m) {
    const int64_t i = int64_t{warp + m * warps} * 32 + lane;
    if (i < vecs) store_normed4(h[m], w[m], inv_rms, i, o, o16, out16_bf16);
  }
  __syncthreads();  // partial may be reused
}

}  // namespace spindle::kernels::cuda
