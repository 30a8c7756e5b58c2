// Internal: the per-ISA entry points of the direct linear kernels (linear_avx2.cc,
// linear_avx512.cc), called by linear.cc after it has checked CpuInfo. Plain data and
// out-of-line functions only: nothing here may be inline code compiled with ISA flags.
#pragma once

#include <cstdint>

#include "util/dtype.h"

namespace spindle::kernels::cpu {

// One slice of y = x . W^T + bias: output columns [col_begin, col_end) of every row of x.
struct LinearSliceParams {
  const float* x = nullptr;     // [m, k]
  const void* w = nullptr;      // [n, k] of w_dtype (kF32 or kBF16)
  DType w_dtype = DType::kBF16;
  const float* bias = nullptr;  // [n] or null
  float* y = nullptr;           // [m, n]
  int64_t m = 0, n = 0, k = 0;
};

// Register-tiled dot products (f32 accumulation), W read once per slice for all m rows when
// m <= 4, once per group of 4 rows otherwise. col_begin is a multiple of kLinearSliceAlign
// (except for the last slice's tail, which the kernels handle).
void linear_slice_avx2(const LinearSliceParams& p, int64_t col_begin, int64_t col_end);
void linear_slice_avx512(const LinearSliceParams& p, int64_t col_begin, int64_t col_end);

// Slices handed to the thread pool are multiples of this many output columns (every tile width
// of both kernels divides it).
inline constexpr int64_t kLinearSliceAlign = 24;

}  // namespace spindle::kernels::cpu
