#include "platform/device_info.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "util/build_info.h"

namespace spindle {
namespace {

class Fnv1a64 {
 public:
  // Each field is followed by a 0 byte so that ("ab", "c") and ("a", "bc") differ.
  void add_field(std::string_view field) {
    for (const char c : field) add_byte(static_cast<uint8_t>(c));
    add_byte(0);
  }
  uint64_t value() const { return hash_; }

 private:
  static constexpr uint64_t kOffsetBasis = 14695981039346656037ull;
  static constexpr uint64_t kPrime = 1099511628211ull;

  void add_byte(uint8_t byte) {
    hash_ ^= byte;
    hash_ *= kPrime;
  }

  uint64_t hash_ = kOffsetBasis;
};

template <typename T>
nlohmann::json optional_json(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

DeviceInfo detect_device_info() {
  DeviceInfo info;
  info.cpu = detect_cpu_info();
  info.memory = read_memory_info("/");
  CudaProbe cuda = probe_cuda_devices();
  info.cuda_devices = std::move(cuda.devices);
  info.cuda_status = info.cuda_devices.empty()
                         ? cuda.unavailable_reason
                         : fmt::format("{} CUDA device(s)", info.cuda_devices.size());
  return info;
}

std::string device_fingerprint(const CpuInfo& cpu, std::string_view build_id) {
  std::vector<std::string_view> usable;
  for (const CpuFeature& feature : cpu.features) {
    if (feature.present && feature.usable) usable.push_back(feature.name);
  }
  std::sort(usable.begin(), usable.end());
  Fnv1a64 hash;
  hash.add_field(cpu.vendor);
  hash.add_field(cpu.model_name);
  hash.add_field(fmt::format("{}", usable.size()));
  for (const std::string_view name : usable) hash.add_field(name);
  hash.add_field(build_id);
  return fmt::format("{:016x}", hash.value());
}

std::string device_fingerprint(const CpuInfo& cpu) { return device_fingerprint(cpu, build_id()); }

nlohmann::json to_json(const CpuFeature& feature) {
  nlohmann::json json = {
      {"name", feature.name}, {"present", feature.present}, {"usable", feature.usable}};
  if (!feature.reason.empty()) json["reason"] = feature.reason;
  return json;
}

nlohmann::json to_json(const CpuInfo& cpu) {
  nlohmann::json features = nlohmann::json::array();
  for (const CpuFeature& feature : cpu.features) features.push_back(to_json(feature));
  return {{"vendor", cpu.vendor},
          {"model_name", cpu.model_name},
          {"num_logical_cores", cpu.num_logical_cores},
          {"features", std::move(features)}};
}

nlohmann::json to_json(const MemoryInfo& memory) {
  return {{"total_bytes", memory.total_bytes},
          {"mem_available_bytes", memory.mem_available_bytes},
          {"cgroup_version", memory.cgroup_version},
          {"cgroup_path", memory.cgroup_path},
          {"cgroup_limit_bytes", optional_json(memory.cgroup_limit_bytes)},
          {"cgroup_usage_bytes", optional_json(memory.cgroup_usage_bytes)},
          {"usable_bytes", memory.usable_bytes},
          {"bound", memory.bound},
          {"transparent_hugepage", memory.transparent_hugepage}};
}

nlohmann::json to_json(const CudaDeviceInfo& device) {
  return {{"index", device.index},
          {"name", device.name},
          {"compute_capability", fmt::format("{}.{}", device.cc_major, device.cc_minor)},
          {"cc_major", device.cc_major},
          {"cc_minor", device.cc_minor},
          {"num_sms", device.num_sms},
          {"total_bytes", device.total_bytes},
          {"free_bytes", device.free_bytes}};
}

nlohmann::json to_json(const DeviceInfo& device) {
  nlohmann::json cuda_devices = nlohmann::json::array();
  for (const CudaDeviceInfo& cuda : device.cuda_devices) cuda_devices.push_back(to_json(cuda));
  return {{"cpu", to_json(device.cpu)},
          {"memory", to_json(device.memory)},
          {"cuda_devices", std::move(cuda_devices)},
          {"cuda_status", device.cuda_status}};
}

}  // namespace spindle
