#include "platform/openmp_policy.h"

#include <unistd.h>

#include <cstdlib>

#include "util/switches.h"

namespace spindle {

void default_openmp_wait_policy(char** argv) {
  const Switches& env = switches();
  if (env.omp_wait_policy || env.gomp_spincount) return;
  if (argv == nullptr || argv[0] == nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::setenv(kOpenMpPolicyMarker, "1", 1);
  ::execv("/proc/self/exe", argv);
  // Still here: the exec failed. This process keeps libgomp's defaults, so say nothing about them.
  ::unsetenv("OMP_WAIT_POLICY");
  ::unsetenv(kOpenMpPolicyMarker);
}

std::string openmp_wait_policy_summary() {
  const Switches& env = switches();
  if (!env.omp_wait_policy && !env.gomp_spincount) {
    return "libgomp's default (workers poll 300,000 rounds before they sleep)";
  }
  std::string line;
  if (env.omp_wait_policy) line = "OMP_WAIT_POLICY=" + *env.omp_wait_policy;
  if (env.gomp_spincount) line += std::string(line.empty() ? "" : " ") + "GOMP_SPINCOUNT=" + *env.gomp_spincount;
  line += env.openmp_policy_defaulted ? " (Spindle's default)" : " (from the environment)";
  return line;
}

}  // namespace spindle
