// Everything the rest of Spindle asks about this machine, in one value, plus its JSON form
// (for `spindle doctor`/`info`) and the fingerprint that keys on-disk caches.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "platform/cpu_info.h"
#include "platform/cuda_info.h"
#include "platform/memory_info.h"

namespace spindle {

struct DeviceInfo {
  CpuInfo cpu;
  MemoryInfo memory;
  std::vector<CudaDeviceInfo> cuda_devices;
  // "<n> CUDA device(s)" when cuda_devices is non-empty, otherwise why there are none.
  std::string cuda_status;
};

// Probes CPU, host memory (read_memory_info("/")) and CUDA devices (see probe_cuda_devices()
// for the CUDA side effects). Throws only when /proc/meminfo or a cgroup file is malformed.
DeviceInfo detect_device_info();

// 16 lowercase hex digits: 64-bit FNV-1a over vendor, model name, the sorted names of the
// usable features and build_id. Equal inputs give equal output across runs and builds.
std::string device_fingerprint(const CpuInfo& cpu, std::string_view build_id);
// device_fingerprint(cpu, spindle::build_id()).
std::string device_fingerprint(const CpuInfo& cpu);

nlohmann::json to_json(const CpuFeature& feature);
nlohmann::json to_json(const CpuInfo& cpu);
nlohmann::json to_json(const MemoryInfo& memory);  // unset optionals are null
nlohmann::json to_json(const CudaDeviceInfo& device);
nlohmann::json to_json(const DeviceInfo& device);

}  // namespace spindle
