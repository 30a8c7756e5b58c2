// device_fingerprint() stability and sensitivity, JSON shape, and the CUDA probe's safety.
#include "platform/device_info.h"

#include <gtest/gtest.h>

#include "util/build_info.h"

namespace spindle {
namespace {

CpuInfo sample_cpu() {
  CpuInfo cpu;
  cpu.vendor = "GenuineIntel";
  cpu.model_name = "Intel(R) Xeon(R) Platinum 8480+";
  cpu.num_logical_cores = 112;
  cpu.features = {{"avx2", true, true, ""},
                  {"avx512f", true, true, ""},
                  {"amx_tile", true, false, "OS denied AMX tile state (x)"}};
  return cpu;
}

TEST(DeviceInfoTest, FingerprintIsStableHex) {
  const std::string a = device_fingerprint(sample_cpu(), "build-1");
  const std::string b = device_fingerprint(sample_cpu(), "build-1");
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 16u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
}

TEST(DeviceInfoTest, FingerprintIgnoresCoreCountAndUnusableFeatures) {
  CpuInfo other = sample_cpu();
  other.num_logical_cores = 8;
  other.features[2].reason = "a different reason";
  EXPECT_EQ(device_fingerprint(other, "build-1"), device_fingerprint(sample_cpu(), "build-1"));
}

TEST(DeviceInfoTest, FingerprintChangesWithModelName) {
  CpuInfo other = sample_cpu();
  other.model_name = "Intel(R) Xeon(R) Platinum 8490H";
  EXPECT_NE(device_fingerprint(other, "build-1"), device_fingerprint(sample_cpu(), "build-1"));
}

TEST(DeviceInfoTest, FingerprintChangesWithUsableFlag) {
  CpuInfo granted = sample_cpu();
  granted.features[2].usable = true;
  EXPECT_NE(device_fingerprint(granted, "build-1"), device_fingerprint(sample_cpu(), "build-1"));
  CpuInfo lost = sample_cpu();
  lost.features[1].usable = false;
  EXPECT_NE(device_fingerprint(lost, "build-1"), device_fingerprint(sample_cpu(), "build-1"));
}

TEST(DeviceInfoTest, FingerprintChangesWithBuildId) {
  EXPECT_NE(device_fingerprint(sample_cpu(), "build-1"),
            device_fingerprint(sample_cpu(), "build-2"));
  EXPECT_EQ(device_fingerprint(sample_cpu()), device_fingerprint(sample_cpu(), build_id()));
}

TEST(DeviceInfoTest, FingerprintFieldBoundariesMatter) {
  CpuInfo a = sample_cpu();
  a.vendor = "Genuine";
  a.model_name = "Intel";
  CpuInfo b = sample_cpu();
  b.vendor = "GenuineIntel";
  b.model_name = "";
  EXPECT_NE(device_fingerprint(a, "x"), device_fingerprint(b, "x"));
}

TEST(DeviceInfoTest, CudaProbeNeverThrows) {
  std::vector<CudaDeviceInfo> devices;
  EXPECT_NO_THROW(devices = detect_cuda_devices());
  std::string reason;
  EXPECT_NO_THROW(reason = cuda_unavailable_reason());
  EXPECT_EQ(devices.empty(), !reason.empty()) << reason;
  if (!built_with_cuda()) {
    EXPECT_EQ(reason, "built without CUDA");
  }
  for (const CudaDeviceInfo& device : devices) {
    EXPECT_FALSE(device.name.empty());
    EXPECT_GT(device.num_sms, 0);
    EXPECT_GT(device.total_bytes, 0u);
    EXPECT_LE(device.free_bytes, device.total_bytes);
  }
}

TEST(DeviceInfoTest, DetectAndJson) {
  const DeviceInfo info = detect_device_info();
  EXPECT_FALSE(info.cuda_status.empty());
  const nlohmann::json json = to_json(info);
  EXPECT_EQ(json["cpu"]["features"].size(), info.cpu.features.size());
  EXPECT_EQ(json["cpu"]["num_logical_cores"], info.cpu.num_logical_cores);
  EXPECT_EQ(json["memory"]["usable_bytes"], info.memory.usable_bytes);
  EXPECT_EQ(json["memory"]["bound"], info.memory.bound);
  EXPECT_EQ(json["cuda_devices"].size(), info.cuda_devices.size());
  EXPECT_EQ(json["cuda_status"], info.cuda_status);
}

TEST(DeviceInfoTest, MemoryJsonUsesNullForUnset) {
  MemoryInfo memory;
  memory.total_bytes = 100;
  memory.cgroup_usage_bytes = 7;
  const nlohmann::json json = to_json(memory);
  EXPECT_TRUE(json["cgroup_limit_bytes"].is_null());
  EXPECT_EQ(json["cgroup_usage_bytes"], 7);
  EXPECT_EQ(json["total_bytes"], 100);
}

TEST(DeviceInfoTest, CudaDeviceJson) {
  const CudaDeviceInfo device{0, "NVIDIA H200", 9, 0, 132, 150000000000ull, 140000000000ull};
  const nlohmann::json json = to_json(device);
  EXPECT_EQ(json["compute_capability"], "9.0");
  EXPECT_EQ(json["num_sms"], 132);
  EXPECT_EQ(json["free_bytes"], 140000000000ull);
}

}  // namespace
}  // namespace spindle
