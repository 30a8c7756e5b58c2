// Device helpers shared by the kernels that must give the same bits (model_ops.cu, gemv16.cu,
// moe_fused.cu): unpacking and rounding the 16-bit types and SwiGLU's product. Include from .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace spindle::kernels::cuda {

// Two 16-bit values of one 32-bit word as f32 (low half first): bf16 when kBf16, else f16.
template <bool kBf16>
__device__ __forceinline__ float2 unpack2(uint32_t word) {
  if constexpr (kBf16) {
    return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xffff0000u));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&word));
  }
}

// A 16-byte vector of 8 16-bit values as f32 (unpack2's order: element 0 first).
template <bool kBf16>
__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = unpack2<kBf16>(words[i]);
    f[2 * i] = a.x;
    f[2 * i + 1] = a.y;
  }
}

// util/half.h float_to_bf16_bits: nearest even, NaN kept quiet with its sign.
__device__ __forceinline__ uint16_t float_to_bf16_bits(float value) {
  const uint32_t u = __float_as_uint(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}

// Rounds to the 16-bit type (bf16 when `bf16`, else f16); *back receives the rounded value as f32.
__device__ __forceinline__ uint16_t round_16bit(float x, bool bf16, float* back) {
  if (bf16) {
    const uint16_t bits = float_to_bf16_bits(x);
    *back = __uint_as_float(static_cast<uint32_t>(bits) << 16);
    return bits;
  }
  const __half h = __float2half_rn(x);
  *back = __half2float(h);
  return __half_as_ushort(h);
}

// silu(g) * u with silu(g) = g / (1 + expf(-g)), the _rn intrinsics so nvcc never contracts it
// (kernels/cpu/ops.cc's silu_mul order).
__device__ __forceinline__ float swiglu(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

}  // namespace spindle::kernels::cuda
