// Fake machines for selection and config tests, built through the real cpuid decoder from
// hand-written register values (bits as in the Intel SDM, vol. 2A, CPUID leaf 1 and leaf 7).
#pragma once

#include <string>

#include "platform/cpu_info.h"
#include "platform/device_info.h"

namespace spindle::testing {

inline constexpr uint32_t kLeaf1Fma = 1u << 12, kLeaf1Osxsave = 1u << 27, kLeaf1Avx = 1u << 28,
                          kLeaf1F16c = 1u << 29;
inline constexpr uint32_t kLeaf7EbxAvx2 = 1u << 5, kLeaf7EbxAvx512f = 1u << 16,
                          kLeaf7EbxAvx512bw = 1u << 30, kLeaf7EbxAvx512vl = 1u << 31;
inline constexpr uint32_t kLeaf7EdxAmxBf16 = 1u << 22, kLeaf7EdxAvx512fp16 = 1u << 23,
                          kLeaf7EdxAmxTile = 1u << 24, kLeaf7EdxAmxInt8 = 1u << 25;
inline constexpr uint32_t kLeaf71EaxAvx512bf16 = 1u << 5;
inline constexpr uint64_t kXcr0Avx = 0x7, kXcr0Avx512 = 0xe7, kXcr0Amx = 0x600e7;

inline DeviceInfo make_machine(const std::string& model, const CpuidRegisters& regs, const AmxPermission& amx,
                               int cores) {
  DeviceInfo d;
  d.cpu.vendor = "GenuineIntel";
  d.cpu.model_name = model;
  d.cpu.num_logical_cores = cores;
  d.cpu.features = decode_cpu_features(regs, amx);
  d.memory.total_bytes = d.memory.mem_available_bytes = d.memory.usable_bytes = 64ull << 30;
  d.memory.bound = "MemAvailable";
  d.memory.cgroup_version = "none";
  d.cuda_status = "built without CUDA";
  return d;
}

// A desktop with AVX2 but no AVX-512 (e.g. a Zen 3 or an Alder Lake).
inline DeviceInfo avx2_machine(int cores = 8) {
  CpuidRegisters r{};
  r.leaf1_ecx = kLeaf1Fma | kLeaf1Osxsave | kLeaf1Avx | kLeaf1F16c;
  r.leaf7_ebx = kLeaf7EbxAvx2;
  r.xcr0 = kXcr0Avx;
  return make_machine("Fake AVX2 desktop", r, {false, "cpu lacks amx_tile"}, cores);
}

// A Sapphire Rapids server: AVX-512 with BF16 and FP16, AMX; permission granted or denied.
inline DeviceInfo sapphire_rapids_machine(bool amx_granted, int cores = 56) {
  CpuidRegisters r{};
  r.leaf1_ecx = kLeaf1Fma | kLeaf1Osxsave | kLeaf1Avx | kLeaf1F16c;
  r.leaf7_ebx = kLeaf7EbxAvx2 | kLeaf7EbxAvx512f | kLeaf7EbxAvx512bw | kLeaf7EbxAvx512vl;
  r.leaf7_edx = kLeaf7EdxAmxBf16 | kLeaf7EdxAvx512fp16 | kLeaf7EdxAmxTile | kLeaf7EdxAmxInt8;
  r.leaf7_1_eax = kLeaf71EaxAvx512bf16;
  r.xcr0 = kXcr0Amx;
  AmxPermission amx{amx_granted, amx_granted ? "" : "arch_prctl ARCH_REQ_XCOMP_PERM failed: Operation not permitted"};
  return make_machine(amx_granted ? "Fake Xeon (AMX)" : "Fake Xeon (AMX denied)", r, amx, cores);
}

// An x86-64 baseline machine with no AVX at all.
inline DeviceInfo sse_only_machine() {
  CpuidRegisters r{};
  return make_machine("Fake SSE-only", r, {false, "cpu lacks amx_tile"}, 4);
}

}  // namespace spindle::testing

namespace spindle::testing {

// This machine's CPU (no memory or CUDA probing), for skipping tests whose hardware is missing.
inline DeviceInfo this_cpu() {
  DeviceInfo d;
  d.cpu = detect_cpu_info();
  return d;
}

}  // namespace spindle::testing
