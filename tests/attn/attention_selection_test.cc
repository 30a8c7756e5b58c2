// Backend selection on fake machines with a fake validator (speeds and verdicts written by hand),
// and once end to end with the real child and injected faults.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>

#include "attn/fault_injection.h"
#include "attn/select/attention_selection.h"
#include "support/fake_machines.h"
#include "support/spindle_binary.h"
#include "util/switches.h"
#include "util/error.h"

namespace spindle::attn {
namespace {

using attn::ValidationOutcome;
using ::testing::HasSubstr;

const attn::AttentionShape kShape{32, 8, 128, 0.0884f, DType::kBF16, 16};

struct FakeResult {
  CheckStatus status = CheckStatus::kPass;
  double prefill = 0;  // tokens/s
  double decode = 0;
  double latency = 0;  // batch-1 decode tokens/s (0: not timed)
};

// Answers from a table; records which backends were asked.
struct FakeValidator {
  std::map<std::string, FakeResult> table;
  std::vector<std::string> asked;

  BackendValidator fn() {
    return [this](const std::string& name, const attn::AttentionShape&, bool timing) {
      asked.push_back(name);
      ValidationOutcome o;
      const FakeResult r = table.count(name) ? table.at(name) : FakeResult{};
      o.status = r.status;
      o.detail = std::string(check_status_name(r.status));
      o.report.backend = name;
      o.report.timed = timing;
      o.report.prefill_tokens_per_s = timing ? r.prefill : 0;
      o.report.decode_tokens_per_s = timing ? r.decode : 0;
      o.report.decode_latency_tokens_per_s = timing ? r.latency : 0;
      return o;
    };
  }
};

// Typical relative speeds: each ISA faster than the last.
FakeValidator typical() {
  FakeValidator v;
  v.table = {{"reference", {CheckStatus::kPass, 100, 10}},
             {"cpu_avx2", {CheckStatus::kPass, 3000, 400}},
             {"cpu_avx512", {CheckStatus::kPass, 6000, 600}},
             {"cpu_amx", {CheckStatus::kPass, 20000, 610}}};
  return v;
}

TEST(AttentionSelectionTest, NoAvx512PicksAvx2) {
  auto v = typical();
  const auto s = select_attention_backends(testing::avx2_machine(), kShape, {}, v.fn());
  EXPECT_EQ(s.prefill_backend, "cpu_avx2");
  EXPECT_EQ(s.decode_backend, "cpu_avx2");
  EXPECT_THAT(v.asked, ::testing::UnorderedElementsAre("cpu_avx2", "reference"));  // each validated once
  EXPECT_TRUE(s.warnings.empty());
}

TEST(AttentionSelectionTest, AmxDeniedByTheOsPicksAvx512) {
  auto v = typical();
  const auto s = select_attention_backends(testing::sapphire_rapids_machine(false), kShape, {}, v.fn());
  EXPECT_EQ(s.prefill_backend, "cpu_avx512");
  EXPECT_EQ(s.decode_backend, "cpu_avx512");
  for (const auto& row : s.rows) {
    if (row.backend == "cpu_amx") {
      EXPECT_THAT(row.unsupported_reasons.front(), HasSubstr("arch_prctl"));
    }
  }
}

TEST(AttentionSelectionTest, PhasesAreChosenSeparatelyAndPriorityBreaksTies) {
  auto v = typical();
  // Decode: amx 610 vs avx512 600 is within 3%: a tie, and cpu_amx has the higher priority.
  auto s = select_attention_backends(testing::sapphire_rapids_machine(true), kShape, {}, v.fn());
  EXPECT_EQ(s.prefill_backend, "cpu_amx");
  EXPECT_EQ(s.decode_backend, "cpu_amx");
  // Now avx512 decodes clearly faster: phases differ.
  v.table["cpu_avx512"].decode = 900;
  s = select_attention_backends(testing::sapphire_rapids_machine(true), kShape, {}, v.fn());
  EXPECT_EQ(s.prefill_backend, "cpu_amx");
  EXPECT_EQ(s.decode_backend, "cpu_avx512");
}

TEST(AttentionSelectionTest, DecodeWeighsTheBatchOneStepAsMuchAsTheLargeOne) {
  // avx512 reads the large step's KV 10% faster, amx takes the batch-1 step in 2/3 of the time:
  // sqrt(660 * 2000) = 1149 < sqrt(600 * 3000) = 1342, so amx decodes (as cuda_flash vs cudnn_sdpa on
  // an H200, bench/results/2026-12-01-h200-e2e.md run -7).
  auto v = typical();
  v.table["cpu_avx512"].decode = 660;
  v.table["cpu_avx512"].latency = 2000;
  v.table["cpu_amx"].decode = 600;
  v.table["cpu_amx"].latency = 3000;
  auto s = select_attention_backends(testing::sapphire_rapids_machine(true), kShape, {}, v.fn());
  EXPECT_EQ(s.decode_backend, "cpu_amx");
  v.table["cpu_amx"].latency = 1000;  // now slower at both
  s = select_attention_backends(testing::sapphire_rapids_machine(true), kShape, {}, v.fn());
  EXPECT_EQ(s.decode_backend, "cpu_avx512");
}

TEST(AttentionSelectionTest, EverythingFailingFallsBackToReferenceLoudly) {
  auto v = typical();
  v.table["cpu_avx2"].status = CheckStatus::kCrash;
  v.table["cpu_avx512"].status = CheckStatus::kMismatch;
  v.table["cpu_amx"].status = CheckStatus::kTimeout;
  const auto s = select_attention_backends(testing::sapphire_rapids_machine(true), kShape, {}, v.fn());
  EXPECT_EQ(s.prefill_backend, "reference");
  EXPECT_EQ(s.decode_backend, "reference");
  ASSERT_EQ(s.warnings.size(), 2u);
  EXPECT_THAT(s.warnings[0], HasSubstr("failed validation"));
  int rejected = 0;
  for (const auto& row : s.rows) {
    if (row.why.rfind("rejected", 0) == 0) ++rejected;
  }
  EXPECT_EQ(rejected, 6);  // three backends, two phases, each keeps its reason
}

TEST(AttentionSelectionTest, PriorityPolicySkipsTimingAndPicksHighestPriority) {
  auto v = typical();
  AttentionSelectionOptions o;
  o.policy = BackendPolicy::kPriority;
  v.table["cpu_avx2"].prefill = 1e9;  // would win a benchmark
  const auto s = select_attention_backends(testing::sapphire_rapids_machine(false), kShape, o, v.fn());
  EXPECT_EQ(s.prefill_backend, "cpu_avx512");
}

TEST(AttentionSelectionTest, ExplicitFlagsWinAndFailLoudly) {
  auto v = typical();
  AttentionSelectionOptions o;
  o.attention_backend = "cpu_avx2";
  o.decode_attention_backend = "reference";
  auto s = select_attention_backends(testing::sapphire_rapids_machine(true), kShape, o, v.fn());
  EXPECT_EQ(s.prefill_backend, "cpu_avx2");
  EXPECT_EQ(s.decode_backend, "reference");

  o = {};
  o.attention_backend = "cpu_avx512";
  try {
    select_attention_backends(testing::avx2_machine(), kShape, o, v.fn());
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--attention-backend cpu_avx512 is unavailable here: cpu lacks avx512f"));
  }

  o.attention_backend = "cpu_avx2";
  v.table["cpu_avx2"].status = CheckStatus::kMismatch;
  try {
    select_attention_backends(testing::avx2_machine(), kShape, o, v.fn());
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--attention-backend cpu_avx2 failed validation"));
  }

  o.prefill_attention_backend = "flash_attn";
  EXPECT_THROW(select_attention_backends(testing::avx2_machine(), kShape, o, v.fn()), Error);
}

TEST(AttentionSelectionTest, SkipValidationTrustsPriority) {
  auto v = typical();
  AttentionSelectionOptions o;
  o.skip_validation = true;
  const auto s = select_attention_backends(testing::sapphire_rapids_machine(true), kShape, o, v.fn());
  EXPECT_EQ(s.prefill_backend, "cpu_amx");
  EXPECT_TRUE(v.asked.empty());
}

TEST(AttentionSelectionTest, NoAvxAtAllLeavesOnlyReference) {
  auto v = typical();
  const auto s = select_attention_backends(testing::sse_only_machine(), kShape, {}, v.fn());
  EXPECT_EQ(s.prefill_backend, "reference");
  EXPECT_TRUE(s.warnings.empty());  // nothing failed: reference was the only candidate
}

// End to end: the real child and injected faults on this machine's first optimized backend.
class FaultySelectionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FaultySelectionTest, FaultyBackendIsRejectedAndTheNextChosen) {
  const DeviceInfo device = testing::this_cpu();
  if (!attn::attention_registry().get("cpu_avx2").unsupported_reasons(device, kShape).empty()) {
    GTEST_SKIP() << "cpu_avx2 does not run on this machine";
  }
  std::string spec;
  for (const char* name : {"cpu_avx2", "cpu_avx512", "cpu_amx"}) {
    spec += std::string(spec.empty() ? "" : ",") + name + "=" + GetParam();
  }
  Switches values = switches();
  values.attn_fault = spec;  // the registry's value reaches each child on its command line
  const ScopedSwitches scoped(values);
  attn::ChildOptions child;
  child.executable = testing::spindle_binary();
  // Small shape so `reference` validates and times quickly even on a loaded machine; only the
  // hang case needs a short timeout.
  const attn::AttentionShape shape{8, 2, 64, 0.125f, DType::kBF16, 16};
  child.timeout_s = GetParam() == "hang" ? 5 : 120;
  const auto s = select_attention_backends(device, shape, {}, [&](const std::string& name, const auto& shape, bool timing) {
    child.timing = timing;
    return attn::validate_in_child(name, shape, child);
  });
  EXPECT_EQ(s.prefill_backend, "reference");
  EXPECT_EQ(s.decode_backend, "reference");
  EXPECT_FALSE(s.warnings.empty());
  for (const auto& row : s.rows) {
    if (row.backend == "cpu_avx2") {
      ASSERT_TRUE(row.validation.has_value());
      EXPECT_NE(row.validation->status, CheckStatus::kPass);
      EXPECT_THAT(row.why, HasSubstr("rejected"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultySelectionTest, ::testing::Values("crash", "hang", "wrong"));

}  // namespace
}  // namespace spindle::attn
