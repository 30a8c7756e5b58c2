// The validation protocol end to end: the real spindle binary as the child, and fault injection
// (the registry's attn_fault, SPINDLE_ATTN_FAULT, set in this process: it reaches the child on
// its command line) proving that a crash, a hang and wrong values are each caught.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <limits>
#include <cmath>
#include <stdlib.h>

#include "attn/attention_backend.h"
#include "attn/fault_injection.h"
#include "attn/select/validation.h"
#include "platform/device_info.h"
#include "support/fake_machines.h"
#include "support/spindle_binary.h"
#include "util/error.h"
#include "util/switches.h"

namespace spindle::attn {
namespace {

using ::testing::HasSubstr;

// A model-like shape: 32 query heads over 8 KV heads, head_dim 128 (Llama-3-8B).
const AttentionShape kShape{32, 8, 128, 0.08838834764831845f, DType::kBF16, 16};

// The first optimized backend this machine can run (fault tests need a backend other than the
// reference it is compared with).
std::string optimized_backend_here() {
  const DeviceInfo device = testing::this_cpu();
  for (const char* name : {"cpu_avx2", "cpu_avx512", "cpu_amx"}) {
    if (attention_registry().get(name).unsupported_reasons(device, kShape).empty()) return name;
  }
  return "";
}

ChildOptions child_options(double timeout_s = 60, bool timing = false) {
  ChildOptions o;
  o.executable = testing::spindle_binary();
  o.timeout_s = timeout_s;
  o.timing = timing;
  return o;
}

// The fault in the registry only (not in the environment) for the scope.
Switches with_fault(const std::string& spec) {
  Switches values = switches();
  values.attn_fault = spec;
  return values;
}
class FaultEnv {
 public:
  explicit FaultEnv(const std::string& spec) : scoped_(with_fault(spec)) {}

 private:
  ScopedSwitches scoped_;
};

TEST(ValidationTest, ToleranceIsStatedPerDtype) {
  EXPECT_LT(tolerance_for(DType::kF32).max_abs_error, tolerance_for(DType::kBF16).max_abs_error);
}

TEST(ValidationTest, ReferenceInProcessPasses) {
  const CheckReport r = run_backend_check("reference", {4, 1, 64, 0.125f, DType::kF32, 1}, false);
  EXPECT_TRUE(r.passed) << r.error;
  EXPECT_EQ(r.prefill_max_abs_error, 0.0);
}

TEST(ValidationTest, UnknownBackendIsAnErrorNotACrash) {
  const auto outcome = validate_in_child("flashinfer", kShape, child_options());
  EXPECT_EQ(outcome.status, CheckStatus::kError);
  EXPECT_THAT(outcome.detail, HasSubstr("unknown attention backend"));
}

TEST(ValidationTest, OptimizedBackendPassesInAChildWithinMemoryLimits) {
  const std::string backend = optimized_backend_here();
  if (backend.empty()) GTEST_SKIP() << "no optimized CPU backend runs on this machine";
  const auto outcome = validate_in_child(backend, kShape, child_options());
  ASSERT_EQ(outcome.status, CheckStatus::kPass) << outcome.detail;
  EXPECT_LE(outcome.report.prefill_max_abs_error, tolerance_for(DType::kBF16).max_abs_error);
  EXPECT_GT(outcome.report.peak_rss_bytes, 0);
  EXPECT_LT(outcome.report.peak_rss_bytes, 64ll << 20) << "validation must stay under 64 MiB";
  EXPECT_FALSE(outcome.report.timed);

  const auto timed = validate_in_child(backend, kShape, child_options(120, true));
  ASSERT_EQ(timed.status, CheckStatus::kPass) << timed.detail;
  EXPECT_TRUE(timed.report.timed);
  EXPECT_GT(timed.report.prefill_tokens_per_s, 0);
  EXPECT_GT(timed.report.decode_tokens_per_s, 0);
  EXPECT_GT(timed.report.decode_latency_tokens_per_s, 0);
  EXPECT_LT(timed.report.peak_rss_bytes, 256ll << 20) << "timing must stay under 256 MiB";
}

TEST(ValidationTest, InjectedCrashIsCaughtWithTheSignalName) {
  const std::string backend = optimized_backend_here();
  if (backend.empty()) GTEST_SKIP() << "no optimized CPU backend runs on this machine";
  FaultEnv fault(backend + "=crash");
  const auto outcome = validate_in_child(backend, kShape, child_options());
  EXPECT_EQ(outcome.status, CheckStatus::kCrash);
  EXPECT_THAT(outcome.detail, HasSubstr("SIGSEGV"));
}

TEST(ValidationTest, InjectedHangIsKilledAtTheTimeout) {
  const std::string backend = optimized_backend_here();
  if (backend.empty()) GTEST_SKIP() << "no optimized CPU backend runs on this machine";
  FaultEnv fault(backend + "=hang");
  const auto outcome = validate_in_child(backend, kShape, child_options(2.0));
  EXPECT_EQ(outcome.status, CheckStatus::kTimeout);
  EXPECT_THAT(outcome.detail, HasSubstr("2 s"));
}

TEST(ValidationTest, InjectedWrongValuesAreAMismatch) {
  const std::string backend = optimized_backend_here();
  if (backend.empty()) GTEST_SKIP() << "no optimized CPU backend runs on this machine";
  FaultEnv fault(backend + "=wrong");
  const auto outcome = validate_in_child(backend, kShape, child_options());
  EXPECT_EQ(outcome.status, CheckStatus::kMismatch);
  EXPECT_NEAR(outcome.report.prefill_max_abs_error, 0.5, 0.02);
  EXPECT_THAT(outcome.detail, HasSubstr("> tolerance"));
}

TEST(ValidationTest, FaultSpecParsing) {
  EXPECT_EQ(parse_fault_for("a=crash,b=wrong", "b"), FaultMode::kWrong);
  EXPECT_EQ(parse_fault_for("a=crash", "b"), FaultMode::kNone);
  EXPECT_EQ(parse_fault_for("", "b"), FaultMode::kNone);
  EXPECT_THROW(parse_fault_for("b=explode", "b"), Error);
  EXPECT_THROW(parse_fault_for("b", "b"), Error);
  // throw, and @R: only the backends of DP rank R.
  EXPECT_EQ(parse_fault_for("b=throw", "b"), FaultMode::kThrow);
  EXPECT_EQ(parse_fault_for("b=throw@1", "b", 1), FaultMode::kThrow);
  EXPECT_EQ(parse_fault_for("b=throw@1", "b", 0), FaultMode::kNone);
  EXPECT_EQ(parse_fault_for("b=throw@1", "b"), FaultMode::kNone);
  EXPECT_EQ(parse_fault_for("b=wrong@0,b=throw@1", "b", 1), FaultMode::kThrow);
  EXPECT_THROW(parse_fault_for("b=throw@x", "b", 0), Error);
  EXPECT_THROW(parse_fault_for("b=throw@", "b", 0), Error);
  EXPECT_THROW(act_out_fatal_fault(FaultMode::kThrow), Error);
  EXPECT_NO_THROW(act_out_fatal_fault(FaultMode::kWrong));
}

TEST(ValidationTest, OutcomeJsonRoundTrip) {
  ValidationOutcome o;
  o.status = CheckStatus::kCrash;
  o.detail = "crashed with SIGILL";
  o.report.backend = "cpu_amx";
  o.report.decode_kv_gb_per_s = 12.5;
  o.report.decode_latency_tokens_per_s = 3000;
  const auto back = validation_outcome_from_json(to_json(o));
  EXPECT_EQ(back.status, CheckStatus::kCrash);
  EXPECT_EQ(back.detail, o.detail);
  EXPECT_EQ(back.report.backend, "cpu_amx");
  EXPECT_EQ(back.report.decode_kv_gb_per_s, 12.5);
  EXPECT_EQ(back.report.decode_latency_tokens_per_s, 3000);
}

TEST(ValidationTest, DecodeSelectionSpeedIsTheGeometricMeanOfBothDecodeShapes) {
  CheckReport r;
  r.decode_tokens_per_s = 160000;  // 16 sequences of 4096 tokens
  EXPECT_EQ(decode_selection_speed(r), 160000) << "no latency timing (an older cache entry): the large step alone";
  r.decode_latency_tokens_per_s = 2500;  // one sequence of 512 tokens: 400 us
  EXPECT_DOUBLE_EQ(decode_selection_speed(r), 20000);
}

TEST(ValidationTest, NonFiniteErrorsSurviveJson) {
  // A kernel that writes NaN gives an infinite error; JSON carries it as null.
  CheckReport r;
  r.backend = "cudnn_sdpa";
  r.prefill_max_abs_error = std::numeric_limits<double>::infinity();
  r.decode_max_rel_error = std::numeric_limits<double>::quiet_NaN();
  const CheckReport back = check_report_from_json(nlohmann::json::parse(to_json(r).dump()));
  EXPECT_TRUE(std::isinf(back.prefill_max_abs_error));
  EXPECT_TRUE(std::isinf(back.decode_max_rel_error));
  EXPECT_EQ(back.decode_max_abs_error, 0.0);
}

}  // namespace
}  // namespace spindle::attn
