// Internal to the CUDA products (gemv16.cu, gemv_fp8.cu): a run-time row count turned into the
// compile-time one their kernels are instantiated for, and their alignment check.
#pragma once

#include <cstdint>
#include <type_traits>

namespace spindle::kernels::cuda::detail {

// f(std::integral_constant<int, rows>{}) for rows in 1..kMax (the callers checked the range;
// only those row counts are instantiated).
template <int kMax, int kRows = 1, typename F>
void with_rows(int64_t rows, F f) {
  if constexpr (kRows == kMax) {
    f(std::integral_constant<int, kRows>{});
  } else {
    if (rows == kRows) return f(std::integral_constant<int, kRows>{});
    with_rows<kMax, kRows + 1>(rows, f);
  }
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace spindle::kernels::cuda::detail
