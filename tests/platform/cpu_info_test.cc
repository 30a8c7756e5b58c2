// decode_cpu_features() from hand-written register values, plus a smoke test of the real probe.
#include "platform/cpu_info.h"

#include <gtest/gtest.h>

namespace spindle {
namespace {

// Register values written from the bit positions in the Intel SDM (CPUID leaves 1, 7.0, 7.1).
constexpr uint32_t kFma = 1u << 12, kOsxsave = 1u << 27, kAvx = 1u << 28, kF16c = 1u << 29;
constexpr uint32_t kAvx2 = 1u << 5, kAvx512f = 1u << 16, kAvx512bw = 1u << 30,
                   kAvx512vl = 1u << 31;
constexpr uint32_t kAmxBf16 = 1u << 22, kAvx512fp16 = 1u << 23, kAmxTile = 1u << 24,
                   kAmxInt8 = 1u << 25;
constexpr uint32_t kAvx512bf16 = 1u << 5, kAvxVnni = 1u << 4;  // leaf 7.1 EAX
constexpr uint32_t kAvx512vnni = 1u << 11;                       // leaf 7.0 ECX
constexpr uint64_t kXcr0Ymm = 0x7;          // x87, SSE, AVX
constexpr uint64_t kXcr0Zmm = 0xe0;         // opmask, ZMM_Hi256, Hi16_ZMM
constexpr uint64_t kXcr0Tile = 0x60000;     // XTILECFG, XTILEDATA

const AmxPermission kGranted{true, ""};
const AmxPermission kNoAmxCpu{false, "CPU does not report AMX-TILE"};

CpuInfo info_from(const CpuidRegisters& regs, const AmxPermission& amx) {
  CpuInfo info;
  info.features = decode_cpu_features(regs, amx);
  return info;
}

CpuidRegisters sapphire_rapids() {
  CpuidRegisters regs;
  regs.leaf1_ecx = kFma | kOsxsave | kAvx | kF16c;
  regs.leaf7_ebx = kAvx2 | kAvx512f | kAvx512bw | kAvx512vl;
  regs.leaf7_edx = kAmxBf16 | kAvx512fp16 | kAmxTile | kAmxInt8;
  regs.leaf7_ecx = kAvx512vnni;
  regs.leaf7_1_eax = kAvx512bf16 | kAvxVnni;
  regs.xcr0 = kXcr0Ymm | kXcr0Zmm | kXcr0Tile;
  return regs;
}

TEST(CpuInfoTest, ReportsEveryNameInOrder) {
  const std::vector<CpuFeature> features = decode_cpu_features(CpuidRegisters{}, kNoAmxCpu);
  const std::vector<std::string> expected = {"avx2",     "fma",         "f16c",
                                             "avx512f",  "avx512bw",    "avx512vl",
                                             "avx512_bf16", "avx512_fp16", "avx512_vnni",
                                             "avx_vnni",    "amx_tile",
                                             "amx_bf16", "amx_int8"};
  ASSERT_EQ(features.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(features[i].name, expected[i]);
    EXPECT_FALSE(features[i].present) << expected[i];
    EXPECT_FALSE(features[i].usable) << expected[i];
    EXPECT_EQ(features[i].reason, "") << expected[i];
  }
}

TEST(CpuInfoTest, Avx2MachineWithoutAvx512) {
  CpuidRegisters regs;
  regs.leaf1_ecx = kFma | kOsxsave | kAvx | kF16c;
  regs.leaf7_ebx = kAvx2;
  regs.xcr0 = kXcr0Ymm;
  const CpuInfo info = info_from(regs, kNoAmxCpu);
  for (const char* name : {"avx2", "fma", "f16c"}) {
    EXPECT_TRUE(info.has(name)) << name;
    EXPECT_EQ(info.find(name)->reason, "") << name;
  }
  for (const char* name : {"avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
                           "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8"}) {
    ASSERT_NE(info.find(name), nullptr) << name;
    EXPECT_FALSE(info.find(name)->present) << name;
    EXPECT_FALSE(info.has(name)) << name;
  }
}

TEST(CpuInfoTest, SapphireRapidsEverythingUsable) {
  const CpuInfo info = info_from(sapphire_rapids(), kGranted);
  for (const std::string_view name : kCpuFeatureNames) {
    const CpuFeature* feature = info.find(name);
    ASSERT_NE(feature, nullptr) << name;
    EXPECT_TRUE(feature->present) << name;
    EXPECT_TRUE(feature->usable) << name;
    EXPECT_EQ(feature->reason, "") << name;
  }
}

TEST(CpuInfoTest, Avx512WithoutZmmStateIsPresentButUnusable) {
  CpuidRegisters regs = sapphire_rapids();
  regs.leaf7_edx = kAvx512fp16;  // no AMX
  regs.xcr0 = kXcr0Ymm;          // OS saves YMM only
  const CpuInfo info = info_from(regs, kNoAmxCpu);
  EXPECT_TRUE(info.has("avx2"));
  EXPECT_TRUE(info.has("fma"));
  EXPECT_TRUE(info.has("avx_vnni"));  // VEX-encoded: needs YMM state only
  for (const char* name : {"avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16", "avx512_vnni"}) {
    const CpuFeature* feature = info.find(name);
    ASSERT_NE(feature, nullptr) << name;
    EXPECT_TRUE(feature->present) << name;
    EXPECT_FALSE(feature->usable) << name;
    EXPECT_FALSE(info.has(name)) << name;
    EXPECT_EQ(feature->reason, "OS does not save ZMM state (XCR0)") << name;
  }
}

TEST(CpuInfoTest, AmxDeniedByOs) {
  const AmxPermission denied{false, "arch_prctl ARCH_REQ_XCOMP_PERM failed: Operation not permitted"};
  const CpuInfo info = info_from(sapphire_rapids(), denied);
  EXPECT_TRUE(info.has("avx512f"));
  EXPECT_TRUE(info.has("avx512_bf16"));
  for (const char* name : {"amx_tile", "amx_bf16", "amx_int8"}) {
    const CpuFeature* feature = info.find(name);
    ASSERT_NE(feature, nullptr) << name;
    EXPECT_TRUE(feature->present) << name;
    EXPECT_FALSE(feature->usable) << name;
    EXPECT_NE(feature->reason.find("arch_prctl"), std::string::npos) << feature->reason;
    EXPECT_NE(feature->reason.find("OS denied AMX tile state"), std::string::npos)
        << feature->reason;
  }
}

TEST(CpuInfoTest, AmxWithoutTileStateInXcr0) {
  CpuidRegisters regs = sapphire_rapids();
  regs.xcr0 = kXcr0Ymm | kXcr0Zmm;
  const CpuInfo info = info_from(regs, kGranted);
  EXPECT_TRUE(info.has("avx512_fp16"));
  EXPECT_TRUE(info.find("amx_tile")->present);
  EXPECT_FALSE(info.has("amx_tile"));
  EXPECT_EQ(info.find("amx_int8")->reason, "OS does not enable AMX tile state (XCR0)");
}

TEST(CpuInfoTest, OsxsaveOffMakesAvxClassUnusable) {
  CpuidRegisters regs = sapphire_rapids();
  regs.leaf1_ecx &= ~kOsxsave;  // xcr0 is then not meaningful and must be ignored
  const CpuInfo info = info_from(regs, kGranted);
  for (const std::string_view name : kCpuFeatureNames) {
    const CpuFeature* feature = info.find(name);
    EXPECT_TRUE(feature->present) << name;
    EXPECT_FALSE(feature->usable) << name;
    EXPECT_NE(feature->reason.find("OSXSAVE"), std::string::npos) << name << ": " << feature->reason;
  }
}

TEST(CpuInfoTest, UnknownNames) {
  const CpuInfo info = info_from(sapphire_rapids(), kGranted);
  EXPECT_EQ(info.find("sse9"), nullptr);
  EXPECT_FALSE(info.has("sse9"));
}

TEST(CpuInfoTest, DetectOnThisMachine) {
  const CpuInfo info = detect_cpu_info();
  EXPECT_GE(info.num_logical_cores, 1);
  EXPECT_EQ(info.features.size(), std::size(kCpuFeatureNames));
#if defined(__x86_64__)
  EXPECT_FALSE(info.vendor.empty());
  // Whatever the machine, a usable feature is present, and a usable AVX-512 implies AVX2.
  for (const CpuFeature& feature : info.features) {
    if (feature.usable) {
      EXPECT_TRUE(feature.present) << feature.name;
    }
    if (feature.present && !feature.usable) {
      EXPECT_FALSE(feature.reason.empty()) << feature.name;
    }
  }
  if (info.has("avx512f")) {
    EXPECT_TRUE(info.has("avx2"));
  }
#endif
}

TEST(CpuInfoTest, AmxPermissionIsCached) {
  const AmxPermission first = request_amx_permission();
  const AmxPermission second = request_amx_permission();
  EXPECT_EQ(first.granted, second.granted);
  EXPECT_EQ(first.reason, second.reason);
  if (!first.granted) {
    EXPECT_FALSE(first.reason.empty());
  }
}

}  // namespace
}  // namespace spindle
