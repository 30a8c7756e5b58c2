// What this CPU can run: cpuid feature bits, whether the OS saves the matching register state
// (xgetbv/XCR0), and for AMX whether Linux granted this process the tile data state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spindle {

// One ISA extension. present: the CPU reports it (cpuid). usable: present and the OS enables
// its state, so instructions from it will not fault. reason: why a present feature is unusable
// (empty otherwise).
struct CpuFeature {
  std::string name;
  bool present = false;
  bool usable = false;
  std::string reason;
};

struct CpuInfo {
  std::string vendor;      // cpuid leaf 0, e.g. "GenuineIntel"; empty off x86-64
  std::string model_name;  // brand string (leaves 0x80000002..4), whitespace trimmed
  int num_logical_cores = 1;  // logical CPUs this process may run on (affinity mask), >= 1
  // Always one entry per name in kCpuFeatureNames, in that order (absent ones too).
  std::vector<CpuFeature> features;

  // True when the feature is present and usable; false for unknown names.
  bool has(std::string_view name) const;
  // nullptr for unknown names.
  const CpuFeature* find(std::string_view name) const;
};

// Every feature name decode_cpu_features() reports, in report order.
inline constexpr std::string_view kCpuFeatureNames[] = {
    "avx2",        "fma",         "f16c",                                  // AVX class
    "avx512f",     "avx512bw",    "avx512vl", "avx512_bf16", "avx512_fp16",  // AVX-512
    "avx512_vnni", "avx_vnni",                                               // int8 dot products
    "amx_tile",    "amx_bf16",    "amx_int8",                              // AMX
};

// Raw cpuid/xgetbv values decode_cpu_features() reads. Zero for leaves the CPU does not have.
// xcr0 is meaningful only when leaf1_ecx has OSXSAVE (bit 27) set.
struct CpuidRegisters {
  uint32_t leaf1_ecx = 0;    // CPUID.(EAX=1):ECX
  uint32_t leaf7_ebx = 0;    // CPUID.(EAX=7,ECX=0):EBX
  uint32_t leaf7_ecx = 0;    // CPUID.(EAX=7,ECX=0):ECX
  uint32_t leaf7_edx = 0;    // CPUID.(EAX=7,ECX=0):EDX
  uint32_t leaf7_1_eax = 0;  // CPUID.(EAX=7,ECX=1):EAX
  uint64_t xcr0 = 0;         // XGETBV(ECX=0)
};

// Outcome of asking Linux for the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM).
// reason: why it was not granted (empty when granted).
struct AmxPermission {
  bool granted = false;
  std::string reason;
};

// Pure decoding of register values into kCpuFeatureNames features (no system calls).
// AVX-class features need OSXSAVE and XCR0 bits 1,2; AVX-512 additionally XCR0 bits 5,6,7;
// AMX needs XCR0 bits 17,18 and amx.granted.
std::vector<CpuFeature> decode_cpu_features(const CpuidRegisters& regs, const AmxPermission& amx);

// Reads this CPU's registers (zeros off x86-64).
CpuidRegisters read_cpuid_registers();

// Requests AMX tile data permission for this process once (later calls return the cached
// result). Only issues the syscall when the CPU reports AMX-TILE; otherwise not granted.
AmxPermission request_amx_permission();

// Probes this machine: registers, AMX permission (only when amx_tile is present), vendor,
// brand string and logical core count. Off x86-64: empty vendor, every feature absent.
CpuInfo detect_cpu_info();

}  // namespace spindle
