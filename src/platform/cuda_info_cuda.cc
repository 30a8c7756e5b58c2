// probe_cuda_devices() through the CUDA runtime (builds with SPINDLE_WITH_CUDA).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <exception>

#include "platform/cuda_info.h"
#include "util/error.h"

namespace spindle {
namespace {

std::string describe(cudaError_t err) {
  return fmt::format("{} ({})", cudaGetErrorString(err), cudaGetErrorName(err));
}

// Fills info for device `index`; returns the failure description, empty on success.
std::string query_device(int index, CudaDeviceInfo& info) {
  cudaDeviceProp props{};
  cudaError_t err = cudaGetDeviceProperties(&props, index);
  if (err != cudaSuccess) return describe(err);
  info.index = index;
  info.name = props.name;
  info.cc_major = props.major;
  info.cc_minor = props.minor;
  info.num_sms = props.multiProcessorCount;
  info.total_bytes = props.totalGlobalMem;
  err = cudaSetDevice(index);
  if (err != cudaSuccess) return describe(err);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) return describe(err);
  info.free_bytes = free_bytes;
  info.total_bytes = total_bytes;
  return "";
}

CudaProbe probe() {
  CudaProbe result;
  int num_devices = 0;
  cudaError_t err = cudaGetDeviceCount(&num_devices);
  if (err == cudaErrorNoDevice || (err == cudaSuccess && num_devices == 0)) {
    cudaGetLastError();
    result.unavailable_reason = "no devices";
    return result;
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    result.unavailable_reason = "no CUDA driver: " + describe(err);
    return result;
  }
  int previous = 0;
  const bool restore = cudaGetDevice(&previous) == cudaSuccess;
  for (int i = 0; i < num_devices; ++i) {
    CudaDeviceInfo info;
    const std::string error = query_device(i, info);
    if (!error.empty()) {
      cudaGetLastError();
      result.devices.clear();
      result.unavailable_reason = fmt::format("CUDA device {}: {}", i, error);
      break;
    }
    result.devices.push_back(std::move(info));
  }
  if (restore) cudaSetDevice(previous);
  return result;
}

}  // namespace

CudaMemory current_cuda_memory() {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    SPINDLE_FAIL("cudaMemGetInfo failed: {}", describe(err));
  }
  return {free_bytes, total_bytes};
}

CudaDeviceInfo bind_cuda_device(int index) {
  int num_devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&num_devices);
  if (err != cudaSuccess) {
    cudaGetLastError();
    SPINDLE_FAIL("cannot use CUDA device {}: {}", index, describe(err));
  }
  SPINDLE_CHECK(index >= 0 && index < num_devices, "cannot use CUDA device {}: this machine has {} (0 to {})", index,
                num_devices, num_devices - 1);
  CudaDeviceInfo info;
  const std::string error = query_device(index, info);  // leaves the device current
  if (!error.empty()) {
    cudaGetLastError();
    SPINDLE_FAIL("cannot use CUDA device {}: {}", index, error);
  }
  return info;
}

CudaProbe probe_cuda_devices() {
  try {
    return probe();
  } catch (const std::exception& e) {
    return CudaProbe{{}, std::string("CUDA probe failed: ") + e.what()};
  }
}

}  // namespace spindle
