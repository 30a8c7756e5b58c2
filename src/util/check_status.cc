#include "util/check_status.h"

#include <fmt/format.h>

#include "util/error.h"

namespace spindle {

std::string_view check_status_name(CheckStatus status) {
  switch (status) {
    case CheckStatus::kPass: return "pass";
    case CheckStatus::kMismatch: return "mismatch";
    case CheckStatus::kCrash: return "crash";
    case CheckStatus::kTimeout: return "timeout";
    case CheckStatus::kError: return "error";
  }
  return "?";
}

CheckStatus check_status_from_name(std::string_view name) {
  for (auto s : {CheckStatus::kPass, CheckStatus::kMismatch, CheckStatus::kCrash, CheckStatus::kTimeout,
                 CheckStatus::kError}) {
    if (check_status_name(s) == name) return s;
  }
  SPINDLE_FAIL("unknown check status '{}' (pass, mismatch, crash, timeout, error)", name);
}

bool check_status_cacheable(CheckStatus status) {
  return status == CheckStatus::kPass || status == CheckStatus::kMismatch || status == CheckStatus::kCrash;
}

std::optional<CheckVerdict> abnormal_end(const ChildRun& run, double timeout_s) {
  if (run.timed_out) return CheckVerdict{CheckStatus::kTimeout, fmt::format("no answer within {:g} s; killed", timeout_s)};
  if (run.signaled) return CheckVerdict{CheckStatus::kCrash, "crashed with " + signal_description(run.signal)};
  return std::nullopt;
}

CheckVerdict missing_report(const ChildRun& run) {
  const std::string last = last_line(run.err).empty() ? last_line(run.out) : last_line(run.err);
  return {CheckStatus::kError, fmt::format("child exited with status {} without a report: {}", run.exit_status, last)};
}

}  // namespace spindle
