// Internal to the MoE kernels (moe_kernels.cu, moe_fused.cu): the device helpers both compute
// with, so that the general and the small-step paths give the same bits where they share a step
// (the router's dot products, the top-k and its weights). Include from .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace spindle::kernels::cuda::detail::moe {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

// Eight consecutive values at p (16-byte aligned) as f32.
__device__ __forceinline__ void load8(const float* p, float (&f)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&f)[8]) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void load8(const __half* p, float (&f)[8]) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    f[2 * i] = a.x;
    f[2 * i + 1] = a.y;
  }
}

// (v, i) ranks before (bv, bi): a real index over none; a number over a NaN; the larger value;
// on a tie (two NaNs included) the lower index. A strict total order over distinct indices.
__device__ __forceinline__ bool ranks_before(float v, int i, float bv, int bi) {
  if (i < 0) return false;
  if (bi < 0) return true;
  const bool n = isnan(v), bn = isnan(bv);
  if (n != bn) return bn;
  if (!n && v != bv) return v > bv;
  return i < bi;
}

// Warp 0's part of the route kernel: the top k of logits [E] (shared), their weights, written to
// experts / weights [k].
__device__ inline void top_k_warp(const float* logits, unsigned char* taken, int num_experts, int k, bool norm,
                           int32_t* experts, float* weights) {
  const int lane = threadIdx.x & 31;
  int my_id = -1;
  float my_logit = 0.0f;
  for (int j = 0; j < k; ++j) {
    float best = 0.0f;
    int bi = -1;
    for (int e = lane; e < num_experts; e += 32) {
      if (!taken[e] && ranks_before(logits[e], e, best, bi)) best = logits[e], bi = e;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(kFullMask, best, off);
      const int oi = __shfl_xor_sync(kFullMask, bi, off);
      if (ranks_before(ov, oi, best, bi)) best = ov, bi = oi;
    }
    __syncwarp();  // every lane has read taken[] this round (an explicit barrier for racecheck)
    if (lane == 0) taken[bi] = 1;
    if (lane == j) my_id = bi, my_logit = best;
    __syncwarp();
  }
  const float max = __shfl_sync(kFullMask, my_logit, 0);
  float sum = 0.0f;
  for (int e = lane; e < num_experts; e += 32) sum += expf(logits[e] - max);
  sum = warp_sum(sum);
  float w = lane < k ? expf(my_logit - max) / sum : 0.0f;
  if (norm) {
    float top = 0.0f;
    for (int j = 0; j < k; ++j) top += __shfl_sync(kFullMask, w, j);  // slot order
    w /= top;
  }
  if (lane < k) {
    experts[lane] = my_id;
    weights[lane] = w;
  }
}

}  // namespace spindle::kernels::cuda::detail::moe
