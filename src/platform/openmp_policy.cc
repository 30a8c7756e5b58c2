#include "platform/openmp_policy.h"

#include <unistd.h>

#include <cstdlib>

namespace spindle {

void default_openmp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (argv == nullptr || argv[0] == nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::setenv(kOpenMpPolicyMarker, "1", 1);
  ::execv("/proc/self/exe", argv);
  // Still here: the exec failed. This process keeps libgomp's defaults, so say nothing about them.
  ::unsetenv("OMP_WAIT_POLICY");
  ::unsetenv(kOpenMpPolicyMarker);
}

std::string openmp_wait_policy_summary() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (policy == nullptr && spin == nullptr) return "libgomp's default (workers poll 300,000 rounds before they sleep)";
  std::string line;
  if (policy != nullptr) line = std::string("OMP_WAIT_POLICY=") + policy;
  if (spin != nullptr) line += std::string(line.empty() ? "" : " ") + "GOMP_SPINCOUNT=" + spin;
  const char* marker = std::getenv(kOpenMpPolicyMarker);
  line += marker != nullptr && std::string(marker) == "1" ? " (Spindle's default)" : " (from the environment)";
  return line;
}

}  // namespace spindle
