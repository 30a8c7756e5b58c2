// Device helpers of the q/k/v split with RoPE and the K/V page write, shared by the kernels that
// must give the same bits (model_ops.cu split_qkv_norm_rope_kernel, gemv16.cu's fused product).
// Include from .cu files only.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/round16.cuh"

namespace spindle::kernels::cuda {

// The RoPE angle's cos and sin for pair i at position p (rope_kernel's arithmetic): from the
// table while p < table_positions, else computed in f64 from inv_freq.
__device__ __forceinline__ void rope_cos_sin(int64_t p, int i, int half, int head_dim, const float* table,
                                             int64_t table_positions, const float* inv_freq, float* c, float* s) {
  if (p < table_positions) {
    *c = table[p * head_dim + i];
    *s = table[p * head_dim + half + i];
  } else {
    const float angle = __fmul_rn(inv_freq[i], static_cast<float>(p));
    *c = static_cast<float>(cos(static_cast<double>(angle)));
    *s = static_cast<float>(sin(static_cast<double>(angle)));
  }
}

// The rotated pair (a, b) = (x[i], x[i + half]) at angle (c, s).
__device__ __forceinline__ void rope_rotate(float a, float b, float c, float s, float* out_a, float* out_b) {
  *out_a = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  *out_b = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

// One K or V value into its page element, rounded as write_kv_kernel rounds
// (paged_attention_reference.cu).
__device__ __forceinline__ void store_kv_value(void* pages, KvPagesOut::Type type, int64_t offset, float x) {
  if (type == KvPagesOut::kBF16) {
    static_cast<uint16_t*>(pages)[offset] = float_to_bf16_bits(x);
  } else if (type == KvPagesOut::kF16) {
    static_cast<__half*>(pages)[offset] = __float2half_rn(x);
  } else {
    static_cast<float*>(pages)[offset] = x;
  }
}

}  // namespace spindle::kernels::cuda
