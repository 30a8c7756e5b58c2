// probe_cuda_devices() for builds without CUDA.
#include "platform/cuda_info.h"

namespace spindle {

CudaProbe probe_cuda_devices() { return CudaProbe{{}, "built without CUDA"}; }

}  // namespace spindle
