#include "platform/cuda_info.h"

namespace spindle {

std::vector<CudaDeviceInfo> detect_cuda_devices() { return probe_cuda_devices().devices; }

std::string cuda_unavailable_reason() { return probe_cuda_devices().unavailable_reason; }

}  // namespace spindle
