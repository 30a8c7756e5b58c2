// The OpenMP wait policy of Spindle's processes.
//
// On the CPU two thread teams share the cores: oneDNN (the f32 products of more than 64 rows, and
// its bf16 products on AVX512-BF16 CPUs without AMX) runs on libgomp's OpenMP threads, everything
// else (attention, norms, the direct linear kernels) on Spindle's ThreadPool, each one thread per
// core. Under libgomp's default policy an OpenMP worker polls for GOMP_SPINCOUNT = 300,000 rounds
// (each with a PAUSE) after every parallel region before it sleeps, so right after each oneDNN
// product the cores that the pool's next kernel needs stay busy for milliseconds. With
// OMP_WAIT_POLICY=PASSIVE they sleep at once (and the next product wakes them, a futex each).
// Measured on 2 Zen 3 cores, one process, alternating: a 981-token prefill of a 6.8M model 7,960-8,410
// -> 11,120-11,190 tok/s at head_dim 32 and 8,120-9,060 -> 10,730-11,600 at head_dim 64; decode
// (no oneDNN) unchanged (bench/results/2026-12-05-zen3-openmp-passive).
//
// libgomp reads OMP_WAIT_POLICY once, in a shared library initializer that runs before main (and
// glibc resets the environment after an executable's .preinit_array, so not even that reaches it):
// the policy cannot be changed from inside a running process. Hence the re-execution below.
#pragma once

#include <string>

namespace spindle {

// The environment variable, set next to OMP_WAIT_POLICY, that says Spindle chose the policy.
inline constexpr const char* kOpenMpPolicyMarker = "SPINDLE_OMP_WAIT_POLICY_DEFAULTED";

// Call first in main(), after config::resolve_process_switches() (it reads switches()) and before
// any thread exists. Where neither OMP_WAIT_POLICY nor
// GOMP_SPINCOUNT is set (a user's setting is kept), sets OMP_WAIT_POLICY=PASSIVE and
// kOpenMpPolicyMarker=1 and re-executes /proc/self/exe with the same argv (same process id, open
// files kept); returns only where that exec fails (no /proc: libgomp's defaults stay, the marker is
// removed). Returns at once when either variable is set, e.g. in the re-executed process and in
// the children that Spindle starts.
void default_openmp_wait_policy(char** argv);

// One line for `spindle info`: the OMP_WAIT_POLICY / GOMP_SPINCOUNT in force and who set them.
std::string openmp_wait_policy_summary();

}  // namespace spindle
