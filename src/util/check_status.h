// The verdict of a validation child (attn/select: attention backends; kernels/cpu/select: linear
// kernels): the status both layers record, print, and cache, and the reading of a child's run
// (util/child_process.h) into its report or the reason it gave none.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "util/child_process.h"

namespace spindle {

// kPass: within tolerance. kMismatch: ran, answered wrongly. kCrash: ended by a signal (SIGILL,
// SIGSEGV). kTimeout: no answer before the deadline; killed. kError: no answer to read, or one that
// names an error.
enum class CheckStatus { kPass, kMismatch, kCrash, kTimeout, kError };

// "pass", "mismatch", "crash", "timeout", "error".
std::string_view check_status_name(CheckStatus status);
// The inverse of check_status_name; throws spindle::Error naming `name` and the five names.
CheckStatus check_status_from_name(std::string_view name);
// Whether a verdict may be cached: pass, mismatch and crash are the kernel's on this build and
// device; a timeout or an error may be the moment's (a loaded machine) and is asked again.
bool check_status_cacheable(CheckStatus status);

struct CheckVerdict {
  CheckStatus status = CheckStatus::kError;
  std::string detail;  // "no answer within 30 s; killed", "crashed with SIGILL (Illegal instruction)"
  bool operator==(const CheckVerdict&) const = default;
};

// A run that timed out (killed at timeout_s: kTimeout) or was ended by a signal (kCrash); nullopt
// when it exited (its report is to be read).
std::optional<CheckVerdict> abnormal_end(const ChildRun& run, double timeout_s);
// kError for a run that exited without a report `parse` accepts: its exit status and the last line
// of its stderr (of its stdout when stderr is empty).
CheckVerdict missing_report(const ChildRun& run);

// Reads the child's report from its last JSON line (report = parse(line); parse throws on a line
// that is not one). Returns the verdict instead when there is none: abnormal_end or missing_report.
template <class Report, class Parse>
std::optional<CheckVerdict> read_child_report(const ChildRun& run, double timeout_s, Parse&& parse, Report& report) {
  if (auto verdict = abnormal_end(run, timeout_s)) return verdict;
  try {
    report = parse(last_json_line(run.out));
  } catch (const std::exception&) {
    return missing_report(run);
  }
  return std::nullopt;
}

}  // namespace spindle
