// Internal to the CUDA kernels: the streaming 16-byte read of a weight that a product reads once
// (gemv16): through the non-coherent path, not kept in L1. p 16-byte aligned.
#pragma once

#include <cuda_runtime.h>

namespace spindle::kernels::cuda::detail {

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

}  // namespace spindle::kernels::cuda::detail
