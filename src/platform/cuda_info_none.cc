// probe_cuda_devices() for builds without CUDA.
#include "platform/cuda_info.h"
#include "util/error.h"

namespace spindle {

CudaProbe probe_cuda_devices() { return CudaProbe{{}, "built without CUDA"}; }

CudaMemory current_cuda_memory() { SPINDLE_FAIL("cannot read CUDA memory: this spindle was built without CUDA"); }

CudaDeviceInfo bind_cuda_device(int index) {
  SPINDLE_FAIL("cannot use CUDA device {}: this spindle was built without CUDA", index);
}

}  // namespace spindle
