// Error checking for CUDA runtime calls and kernel launches.
//
//   CUDA_CHECK(cudaMalloc(&p, n));   throws spindle::Error "CUDA error: <string> (<expr>) at file:line"
//   kernel<<<grid, block>>>(...);
//   CUDA_CHECK_LAUNCH();             cudaGetLastError after every launch
//
// Safe to include from .cu files: the throwing helper is defined in cuda_check.cc (host compiler).
#pragma once

#include <cuda_runtime_api.h>

namespace spindle::kernels::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t error, const char* expr, const char* file, int line);

}  // namespace spindle::kernels::cuda

#define CUDA_CHECK(expr)                                                                   \
  do {                                                                                     \
    const cudaError_t spindle_cuda_status_ = (expr);                                       \
    if (spindle_cuda_status_ != cudaSuccess) [[unlikely]] {                                \
      ::spindle::kernels::cuda::throw_cuda_error(spindle_cuda_status_, #expr, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
