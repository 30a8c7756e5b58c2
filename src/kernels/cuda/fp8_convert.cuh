// FP8 (E4M3FN) to f16 conversion shared by the attention kernels that read an FP8 KV cache
// (flash_decode.cu, flash_prefill.cu). Include from .cu files only.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace spindle::kernels::cuda::detail {

// 8 FP8 (E4M3FN) bytes -> 8 f16 (exact: every E4M3FN value is an f16), in order, as one 16-byte
// chunk: byte i of `bytes` (x first, low byte first) becomes 16-bit element i of the result.
__device__ __forceinline__ uint4 fp8x8_to_half8(uint2 bytes) {
  uint32_t h[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = i < 2 ? bytes.x : bytes.y;
    const auto pair = static_cast<__nv_fp8x2_storage_t>((word >> (16 * (i & 1))) & 0xffffu);
    const __half2_raw two = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
    h[i] = static_cast<uint32_t>(two.x) | (static_cast<uint32_t>(two.y) << 16);
  }
  return make_uint4(h[0], h[1], h[2], h[3]);
}

}  // namespace spindle::kernels::cuda::detail
