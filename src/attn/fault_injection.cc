#include "attn/fault_injection.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>

#include "util/error.h"

namespace spindle::attn {

FaultMode parse_fault_for(std::string_view spec, std::string_view backend_name) {
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    const size_t eq = item.find('=');
    SPINDLE_CHECK(eq != std::string_view::npos, "{}: '{}' is not name=mode", kFaultEnvVar, item);
    if (item.substr(0, eq) != backend_name) continue;
    const std::string_view mode = item.substr(eq + 1);
    if (mode == "crash") return FaultMode::kCrash;
    if (mode == "hang") return FaultMode::kHang;
    if (mode == "wrong") return FaultMode::kWrong;
    SPINDLE_FAIL("{}: unknown mode '{}' (crash, hang, wrong)", kFaultEnvVar, mode);
  }
  return FaultMode::kNone;
}

FaultMode fault_for(std::string_view backend_name) {
  const char* spec = std::getenv(kFaultEnvVar);
  return spec ? parse_fault_for(spec, backend_name) : FaultMode::kNone;
}

void act_out_fatal_fault(FaultMode mode) {
  if (mode == FaultMode::kCrash) {
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
  }
  if (mode == FaultMode::kHang) {
    for (;;) ::pause();
  }
}

}  // namespace spindle::attn
