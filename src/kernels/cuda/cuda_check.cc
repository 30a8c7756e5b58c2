#include "kernels/cuda/cuda_check.h"

#include <fmt/format.h>

#include "util/error.h"

namespace spindle::kernels::cuda {

void throw_cuda_error(cudaError_t error, const char* expr, const char* file, int line) {
  throw Error(fmt::format("CUDA error: {} ({}: {}) at {}:{}", cudaGetErrorString(error),
                          cudaGetErrorName(error), expr, file, line),
              SPINDLE_CURRENT_LOCATION());
}

}  // namespace spindle::kernels::cuda
