#include "attn/fault_injection.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>

#include "util/error.h"
#include "util/switches.h"

namespace spindle::attn {

FaultMode parse_fault_for(std::string_view spec, std::string_view backend_name, int dp_rank) {
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    const size_t eq = item.find('=');
    SPINDLE_CHECK(eq != std::string_view::npos, "{}: '{}' is not name=mode", kFaultEnvVar, item);
    if (item.substr(0, eq) != backend_name) continue;
    std::string_view mode = item.substr(eq + 1);
    if (const size_t at = mode.find('@'); at != std::string_view::npos) {
      const std::string rank_text(mode.substr(at + 1));
      mode = mode.substr(0, at);
      char* end = nullptr;
      const long rank = std::strtol(rank_text.c_str(), &end, 10);
      SPINDLE_CHECK(!rank_text.empty() && end && *end == '\0' && rank >= 0, "{}: '{}' is not a DP rank in '{}'",
                    kFaultEnvVar, rank_text, item);
      if (rank != dp_rank) continue;
    }
    if (mode == "crash") return FaultMode::kCrash;
    if (mode == "hang") return FaultMode::kHang;
    if (mode == "wrong") return FaultMode::kWrong;
    if (mode == "throw") return FaultMode::kThrow;
    SPINDLE_FAIL("{}: unknown mode '{}' (crash, hang, wrong, throw)", kFaultEnvVar, mode);
  }
  return FaultMode::kNone;
}

FaultMode fault_for(std::string_view backend_name, int dp_rank) {
  const std::string& spec = switches().attn_fault;
  return spec.empty() ? FaultMode::kNone : parse_fault_for(spec, backend_name, dp_rank);
}

void act_out_fatal_fault(FaultMode mode) {
  if (mode == FaultMode::kCrash) {
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
  }
  if (mode == FaultMode::kHang) {
    for (;;) ::pause();
  }
  SPINDLE_CHECK(mode != FaultMode::kThrow, "fault injected ({}=throw): this step fails", kFaultEnvVar);
}

}  // namespace spindle::attn
