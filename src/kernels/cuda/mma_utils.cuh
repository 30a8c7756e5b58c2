// Internal to the CUDA kernels: thin wrappers over the sm_80+ PTX that tensor-core kernels use
// (cp.async, ldmatrix, mma.sync m16n8k16 with f32 accumulation, packing to bf16x2 / f16x2).
//
// Fragment layouts are the PTX ISA's for mma.m16n8k16 with 16-bit inputs. With
// group = lane / 4 and quad = lane % 4, and each 32-bit register holding two consecutive
// elements (the lower column index in the low half):
//   A (16 x 16, row-major) a[4]: a0 (row group,   cols 2q, 2q+1)   a1 (row group+8, cols 2q, 2q+1)
//                                a2 (row group,   cols 8+2q, +1)   a3 (row group+8, cols 8+2q, +1)
//   B (16 x 8, k x n)      b[2]: b0 (k 2q, 2q+1, col group)        b1 (k 8+2q, 8+2q+1, col group)
//   C (16 x 8, f32)        c[4]: c0, c1 (row group, cols 2q, 2q+1) c2, c3 (row group+8, same cols)
// ldmatrix .x4: lanes 8i..8i+7 give the 16-byte row addresses of 8 x 8 matrix i; register i of a
// lane then holds matrix i's (row lane/4, cols 2(lane%4), +1), or with .trans its
// (rows 2(lane%4), +1 of column lane/4).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace spindle::kernels::cuda::detail::mma {

// Shared-state-space address of a pointer into shared memory.
__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// Asynchronous 16-byte copy global -> shared (L2 only, bypassing L1). Both addresses 16-byte
// aligned. When !valid nothing is read and the 16 destination bytes are zero-filled.
__device__ __forceinline__ void cp_async_16(uint32_t shared_dst, const void* global_src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_dst), "l"(global_src),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most kPending committed groups of this thread are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8 x 8 matrices of 16-bit elements (layout above).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t shared_src) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_src));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t shared_src) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_src));
}

// d += a * b on one 16 x 8 x 16 tile; inputs bf16 (kBf16) or f16, accumulator f32.
template <bool kBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to nearest even as bf16 (kBf16) or f16; lo lands in the low 16 bits.
template <bool kBf16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kBf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// 2^x (MUFU.EX2, relative error ~2^-22; -inf gives 0, denormal results flush to 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace spindle::kernels::cuda::detail::mma
