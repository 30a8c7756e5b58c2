#include "kernels/cuda/pdl.h"

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>

#include "kernels/cuda/cuda_check.h"

namespace spindle::kernels::cuda {

bool pdl_enabled() {
  // Per device: 0 unknown, 1 off, 2 on (a process may drive GPUs of different generations).
  static std::array<std::atomic<int>, 64> state{};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= static_cast<int>(state.size())) return false;
  int s = state[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (s == 0) {
    int major = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    s = major >= 9 ? 2 : 1;
    state[static_cast<size_t>(device)].store(s, std::memory_order_relaxed);
  }
  return s == 2;
}

}  // namespace spindle::kernels::cuda
