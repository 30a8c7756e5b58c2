#include "platform/cpu_info.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <spdlog/spdlog.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace spindle {
namespace {

// CPUID.(EAX=1):ECX
constexpr uint32_t kLeaf1EcxFma = 1u << 12;
constexpr uint32_t kLeaf1EcxOsxsave = 1u << 27;
constexpr uint32_t kLeaf1EcxF16c = 1u << 29;
// CPUID.(EAX=7,ECX=0):EBX
constexpr uint32_t kLeaf7EbxAvx2 = 1u << 5;
constexpr uint32_t kLeaf7EbxAvx512f = 1u << 16;
constexpr uint32_t kLeaf7EbxAvx512bw = 1u << 30;
constexpr uint32_t kLeaf7EbxAvx512vl = 1u << 31;
// CPUID.(EAX=7,ECX=0):ECX
constexpr uint32_t kLeaf7EcxAvx512vnni = 1u << 11;
// CPUID.(EAX=7,ECX=0):EDX
constexpr uint32_t kLeaf7EdxAmxBf16 = 1u << 22;
constexpr uint32_t kLeaf7EdxAvx512fp16 = 1u << 23;
constexpr uint32_t kLeaf7EdxAmxTile = 1u << 24;
constexpr uint32_t kLeaf7EdxAmxInt8 = 1u << 25;
// CPUID.(EAX=7,ECX=1):EAX
constexpr uint32_t kLeaf71EaxAvxVnni = 1u << 4;
constexpr uint32_t kLeaf71EaxAvx512bf16 = 1u << 5;
// XCR0 state components.
constexpr uint64_t kXcr0Ymm = (1ull << 1) | (1ull << 2);                  // SSE, AVX
constexpr uint64_t kXcr0Zmm = (1ull << 5) | (1ull << 6) | (1ull << 7);    // opmask, ZMM_Hi256, Hi16_ZMM
constexpr uint64_t kXcr0Tile = (1ull << 17) | (1ull << 18);               // XTILECFG, XTILEDATA

enum class StateClass { kAvx, kAvx512, kAmx };

CpuFeature make_feature(std::string_view name, bool present, StateClass state,
                        const CpuidRegisters& regs, const AmxPermission& amx) {
  CpuFeature feature{std::string(name), present, false, ""};
  if (!present) return feature;
  const bool osxsave = (regs.leaf1_ecx & kLeaf1EcxOsxsave) != 0;
  const uint64_t xcr0 = osxsave ? regs.xcr0 : 0;
  if (!osxsave) {
    feature.reason = "OS has not enabled XSAVE (CPUID.1:ECX.OSXSAVE is 0)";
  } else if (state != StateClass::kAmx && (xcr0 & kXcr0Ymm) != kXcr0Ymm) {
    feature.reason = "OS does not save YMM state (XCR0)";
  } else if (state == StateClass::kAvx512 && (xcr0 & kXcr0Zmm) != kXcr0Zmm) {
    feature.reason = "OS does not save ZMM state (XCR0)";
  } else if (state == StateClass::kAmx && (xcr0 & kXcr0Tile) != kXcr0Tile) {
    feature.reason = "OS does not enable AMX tile state (XCR0)";
  } else if (state == StateClass::kAmx && !amx.granted) {
    feature.reason = "OS denied AMX tile state (" + amx.reason + ")";
  } else {
    feature.usable = true;
  }
  return feature;
}

int count_logical_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

#if defined(__x86_64__)

std::string trim(std::string s) {
  const auto is_space = [](unsigned char c) { return c == ' ' || c == '\t' || c == '\0'; };
  while (!s.empty() && is_space(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t start = 0;
  while (start < s.size() && is_space(static_cast<unsigned char>(s[start]))) ++start;
  return s.substr(start);
}

uint64_t read_xcr0() {
  uint32_t eax = 0;
  uint32_t edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

std::string read_vendor() {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return "";
  char vendor[13] = {};
  std::memcpy(vendor + 0, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return vendor;
}

std::string read_brand() {
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000004u) return "";
  char brand[49] = {};
  for (uint32_t i = 0; i < 3; ++i) {
    uint32_t regs[4] = {};
    __get_cpuid(0x80000002u + i, &regs[0], &regs[1], &regs[2], &regs[3]);
    std::memcpy(brand + 16 * i, regs, sizeof(regs));
  }
  return trim(brand);
}

#endif  // __x86_64__

}  // namespace

bool CpuInfo::has(std::string_view name) const {
  const CpuFeature* feature = find(name);
  return feature != nullptr && feature->present && feature->usable;
}

const CpuFeature* CpuInfo::find(std::string_view name) const {
  for (const CpuFeature& feature : features) {
    if (feature.name == name) return &feature;
  }
  return nullptr;
}

std::vector<CpuFeature> decode_cpu_features(const CpuidRegisters& regs, const AmxPermission& amx) {
  const auto bit = [](uint32_t reg, uint32_t mask) { return (reg & mask) != 0; };
  struct Entry {
    std::string_view name;
    bool present;
    StateClass state;
  };
  const Entry entries[] = {
      {"avx2", bit(regs.leaf7_ebx, kLeaf7EbxAvx2), StateClass::kAvx},
      {"fma", bit(regs.leaf1_ecx, kLeaf1EcxFma), StateClass::kAvx},
      {"f16c", bit(regs.leaf1_ecx, kLeaf1EcxF16c), StateClass::kAvx},
      {"avx512f", bit(regs.leaf7_ebx, kLeaf7EbxAvx512f), StateClass::kAvx512},
      {"avx512bw", bit(regs.leaf7_ebx, kLeaf7EbxAvx512bw), StateClass::kAvx512},
      {"avx512vl", bit(regs.leaf7_ebx, kLeaf7EbxAvx512vl), StateClass::kAvx512},
      {"avx512_bf16", bit(regs.leaf7_1_eax, kLeaf71EaxAvx512bf16), StateClass::kAvx512},
      {"avx512_fp16", bit(regs.leaf7_edx, kLeaf7EdxAvx512fp16), StateClass::kAvx512},
      {"avx512_vnni", bit(regs.leaf7_ecx, kLeaf7EcxAvx512vnni), StateClass::kAvx512},
      {"avx_vnni", bit(regs.leaf7_1_eax, kLeaf71EaxAvxVnni), StateClass::kAvx},
      {"amx_tile", bit(regs.leaf7_edx, kLeaf7EdxAmxTile), StateClass::kAmx},
      {"amx_bf16", bit(regs.leaf7_edx, kLeaf7EdxAmxBf16), StateClass::kAmx},
      {"amx_int8", bit(regs.leaf7_edx, kLeaf7EdxAmxInt8), StateClass::kAmx},
  };
  static_assert(std::size(entries) == std::size(kCpuFeatureNames));
  std::vector<CpuFeature> features;
  features.reserve(std::size(entries));
  for (const Entry& entry : entries) {
    features.push_back(make_feature(entry.name, entry.present, entry.state, regs, amx));
  }
  return features;
}

CpuidRegisters read_cpuid_registers() {
  CpuidRegisters regs;
#if defined(__x86_64__)
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  const uint32_t max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf >= 1 && __get_cpuid(1, &eax, &ebx, &ecx, &edx)) regs.leaf1_ecx = ecx;
  if (max_leaf >= 7 && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    const uint32_t max_subleaf = eax;
    regs.leaf7_ebx = ebx;
    regs.leaf7_ecx = ecx;
    regs.leaf7_edx = edx;
    if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) regs.leaf7_1_eax = eax;
  }
  if ((regs.leaf1_ecx & kLeaf1EcxOsxsave) != 0) regs.xcr0 = read_xcr0();
#endif
  return regs;
}

AmxPermission request_amx_permission() {
  static const AmxPermission cached = [] {
    AmxPermission result;
#if defined(__x86_64__) && defined(__linux__)
    if ((read_cpuid_registers().leaf7_edx & kLeaf7EdxAmxTile) == 0) {
      result.reason = "CPU does not report AMX-TILE";
      return result;
    }
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) {
      result.granted = true;
    } else {
      const int err = errno;
      result.reason = std::string("arch_prctl ARCH_REQ_XCOMP_PERM failed: ") + std::strerror(err);
      spdlog::warn("AMX unusable: {}", result.reason);
    }
#else
    result.reason = "AMX permission request is only implemented for Linux x86-64";
#endif
    return result;
  }();
  return cached;
}

CpuInfo detect_cpu_info() {
  CpuInfo info;
  info.num_logical_cores = count_logical_cores();
  const CpuidRegisters regs = read_cpuid_registers();
#if defined(__x86_64__)
  info.vendor = read_vendor();
  info.model_name = read_brand();
#endif
  const bool amx_tile = (regs.leaf7_edx & kLeaf7EdxAmxTile) != 0;
  const AmxPermission amx =
      amx_tile ? request_amx_permission() : AmxPermission{false, "CPU does not report AMX-TILE"};
  info.features = decode_cpu_features(regs, amx);
  return info;
}

}  // namespace spindle
