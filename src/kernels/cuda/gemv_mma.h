// Small-batch products with 16-bit weights on the tensor cores: y [rows, out] = x [rows, in] . W^T
// (+ bias), W [out, in] bf16 or f16 row-major, x [rows, in] of the same 16-bit type, products
// exact and sums in f32 (mma.sync m16n8k16; the sums in yet another order than cuBLAS's and
// gemv16's).
//
// Why: from 3 to 16 rows (a 5-token speculative verify, decode at batch 4-16) a product is still a
// read of W, but gemv16 turns instruction-bound (every 16-byte weight vector is unpacked and
// FMA'd once per row) and cuBLAS's kernels read the 8B decode shapes at 45-80% of the copy
// bandwidth (bench/results/2026-12-01-h200-gemv16). Here the weights go to the tensor cores as
// loaded: one 16-byte load of W per lane feeds two m16n8k16 products for up to 8 rows, so the
// instruction count per weight byte does not grow with the rows.
//
// Measured (bench/results/2026-12-03-h200-gemv-mma): correct, but it reads W at only 39-57% of
// the copy bandwidth at every row count, 1 to 16 (gemv16: 77-84% at 1 row on gate_up/down), so
// CublasLinear runs it only when asked (SPINDLE_CUDA_GEMV_MMA=1). Not yet known why; the suspects:
// each load instruction touches 8 rows x 64 bytes (gemv16's: 512 contiguous bytes of one row),
// and nothing is in flight across a warp's iterations. The next attempt: cp.async a contiguous
// [16 x 256] tile per warp into shared memory, ldmatrix the fragments, two stages in flight.
//
// C++17 (included by .cu files). Every pointer is device memory of the current device.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace spindle::kernels::cuda {

inline constexpr int64_t kGemvMmaMaxRows = 16;

// True when launch_gemv_mma takes this shape: 1 <= rows <= kGemvMmaMaxRows, in % 8 == 0, and w, x
// 16-byte aligned (rows of W and x then are too).
bool gemv_mma_supports(int64_t rows, int64_t in, const void* w, const void* x);

// y[r, o] = sum_i x[r, i] w[o, i] (+ bias[o] when bias is not null), f32. bf16: the type of w and
// x (else f16). Throws (spindle::Error) when !gemv_mma_supports(...). Each of y's values is
// written once (no atomics): the result does not depend on the launch's timing.
void launch_gemv_mma(const void* w, const void* x, int64_t rows, int64_t in, int64_t out, bool bf16, const float* bias,
                     float* y, cudaStream_t stream);

}  // namespace spindle::kernels::cuda
