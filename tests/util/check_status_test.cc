// util/check_status: the five status names and their inverse (an unknown name is an error that
// names it), which verdicts may be cached, and the reading of a child run: a timeout, a signal, an
// exit without a JSON line, a report read from the last JSON line (a library may print after it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "util/check_status.h"
#include "util/error.h"

namespace spindle {
namespace {

using ::testing::HasSubstr;

constexpr CheckStatus kAll[] = {CheckStatus::kPass, CheckStatus::kMismatch, CheckStatus::kCrash,
                                CheckStatus::kTimeout, CheckStatus::kError};

// parse for read_child_report: the value of {"n": N} (throws on anything else).
int parse_n(const std::string& line) {
  const auto at = line.find("\"n\": ");
  if (line.empty() || line.front() != '{' || at == std::string::npos) throw std::runtime_error("no report");
  return std::stoi(line.substr(at + 5));
}

TEST(CheckStatusTest, NamesRoundTrip) {
  EXPECT_EQ(check_status_name(CheckStatus::kPass), "pass");
  EXPECT_EQ(check_status_name(CheckStatus::kMismatch), "mismatch");
  EXPECT_EQ(check_status_name(CheckStatus::kCrash), "crash");
  EXPECT_EQ(check_status_name(CheckStatus::kTimeout), "timeout");
  EXPECT_EQ(check_status_name(CheckStatus::kError), "error");
  for (CheckStatus s : kAll) EXPECT_EQ(check_status_from_name(check_status_name(s)), s);
}

TEST(CheckStatusTest, UnknownNameIsAnErrorNamingIt) {
  try {
    check_status_from_name("skipped");
    FAIL() << "accepted an unknown status";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'skipped'"));
  }
}

TEST(CheckStatusTest, OnlyTheKernelsOwnVerdictsAreCacheable) {
  EXPECT_TRUE(check_status_cacheable(CheckStatus::kPass));
  EXPECT_TRUE(check_status_cacheable(CheckStatus::kMismatch));
  EXPECT_TRUE(check_status_cacheable(CheckStatus::kCrash));
  EXPECT_FALSE(check_status_cacheable(CheckStatus::kTimeout));
  EXPECT_FALSE(check_status_cacheable(CheckStatus::kError));
}

// read_child_report's verdict on `run` (nullopt: its report was read; n holds it).
std::optional<CheckVerdict> verdict(const ChildRun& run, double timeout_s, int& n) {
  return read_child_report(run, timeout_s, parse_n, n);
}

TEST(CheckStatusTest, TimeoutAndSignalEndTheRunWithoutReadingIt) {
  int n = 0;
  ChildRun timed_out;
  timed_out.timed_out = true;
  timed_out.out = "{\"n\": 1}\n";
  EXPECT_EQ(verdict(timed_out, 2.5, n), (CheckVerdict{CheckStatus::kTimeout, "no answer within 2.5 s; killed"}));
  EXPECT_EQ(n, 0);
  ChildRun crashed;
  crashed.signaled = true;
  crashed.signal = SIGILL;
  const auto v = verdict(crashed, 30, n);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->status, CheckStatus::kCrash);
  EXPECT_THAT(v->detail, HasSubstr("crashed with SIGILL"));
}

TEST(CheckStatusTest, ExitWithoutAReportNamesTheStatusAndTheLastLine) {
  int n = 0;
  ChildRun run;
  run.exit_status = 2;
  run.out = "starting\n";
  run.err = "warming up\nbad shape 0x0\n";
  EXPECT_EQ(verdict(run, 30, n),
            (CheckVerdict{CheckStatus::kError, "child exited with status 2 without a report: bad shape 0x0"}));
  run.err.clear();  // no stderr: stdout's last line
  EXPECT_EQ(missing_report(run).detail, "child exited with status 2 without a report: starting");
}

TEST(CheckStatusTest, ReportIsTheLastJsonLine) {
  int n = 0;
  ChildRun run;
  run.exit_status = 1;  // a mismatch exits 1 and still reports
  run.out = "{\"n\": 3}\n{\"n\": 7}\nlibrary says goodbye\n";
  EXPECT_EQ(verdict(run, 30, n), std::nullopt);
  EXPECT_EQ(n, 7);
}

}  // namespace
}  // namespace spindle
