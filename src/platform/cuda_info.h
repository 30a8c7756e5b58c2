// CUDA devices visible to this process (honours CUDA_VISIBLE_DEVICES).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spindle {

struct CudaDeviceInfo {
  int index = 0;  // CUDA runtime ordinal
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int num_sms = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;  // cudaMemGetInfo at probe time
};

// devices is empty exactly when unavailable_reason is non-empty: "built without CUDA",
// "no CUDA driver: <cudaGetErrorString>", "no devices" or "CUDA device <i>: <error>".
struct CudaProbe {
  std::vector<CudaDeviceInfo> devices;
  std::string unavailable_reason;
};

// Never throws. With CUDA compiled in this initialises the CUDA runtime and creates the primary
// context of every visible device (to read free memory), so call it only in a process that may
// use CUDA and will not fork afterwards. The calling thread's current device is restored.
// Each call probes again (free_bytes is current).
CudaProbe probe_cuda_devices();

// probe_cuda_devices().devices.
std::vector<CudaDeviceInfo> detect_cuda_devices();

// probe_cuda_devices().unavailable_reason: empty when at least one device was found.
std::string cuda_unavailable_reason();

// Makes CUDA device `index` current on the calling thread (cudaSetDevice) and describes it, its
// free memory read now (cudaMemGetInfo). Throws spindle::Error naming the device and the reason
// when it cannot ("built without CUDA", no such device, driver error).
CudaDeviceInfo bind_cuda_device(int index);

// cudaMemGetInfo of the calling thread's current device, read now. Throws spindle::Error (also in
// builds without CUDA).
struct CudaMemory {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};
CudaMemory current_cuda_memory();

}  // namespace spindle
