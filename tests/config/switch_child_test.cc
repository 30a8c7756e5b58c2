// A value a test sets in the registry (not in the environment) reaches a validation child: the
// parent passes it on the child's command line (`spindle __check-attention ... --switch`).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "attn/attention_backend.h"
#include "attn/select/validation.h"
#include "platform/device_info.h"
#include "support/fake_machines.h"
#include "support/spindle_binary.h"
#include "util/switches.h"

namespace spindle {
namespace {

const attn::AttentionShape kShape{8, 2, 64, 0.125f, DType::kBF16, 16};

// An optimized CPU backend this machine runs (the fault must hit the candidate, not `reference`,
// which the child compares it with).
std::string optimized_backend_here() {
  const DeviceInfo device = testing::this_cpu();
  for (const char* name : {"cpu_avx2", "cpu_avx512", "cpu_amx"}) {
    if (attn::attention_registry().get(name).unsupported_reasons(device, kShape).empty()) return name;
  }
  return "";
}

attn::ChildOptions options() {
  attn::ChildOptions o;
  o.executable = testing::spindle_binary();
  o.timeout_s = 60;
  o.timing = false;
  return o;
}

TEST(SwitchChildTest, AFaultSetInTheRegistryReachesTheChild) {
  ASSERT_TRUE(read_process_environment().count("SPINDLE_ATTN_FAULT") == 0) << "run without SPINDLE_ATTN_FAULT";
  const std::string backend = optimized_backend_here();
  if (backend.empty()) GTEST_SKIP() << "no optimized CPU backend runs here";
  // Without the value the candidate passes.
  ASSERT_EQ(attn::validate_in_child(backend, kShape, options()).status, CheckStatus::kPass);
  Switches values = switches();
  values.attn_fault = backend + "=wrong";  // the candidate's output is moved by 0.5
  const ScopedSwitches scoped(values);
  const attn::ValidationOutcome outcome = attn::validate_in_child(backend, kShape, options());
  EXPECT_EQ(outcome.status, CheckStatus::kMismatch) << outcome.detail;
}

TEST(SwitchChildTest, AMalformedValueIsTheChildsNamedError) {
  Switches values = switches();
  values.attn_fault = "reference";  // not name=mode: the child's fault parser names the variable
  const ScopedSwitches scoped(values);
  const attn::ValidationOutcome outcome = attn::validate_in_child("reference", kShape, options());
  EXPECT_EQ(outcome.status, CheckStatus::kError);
  EXPECT_THAT(outcome.detail, ::testing::HasSubstr("SPINDLE_ATTN_FAULT"));
}

}  // namespace
}  // namespace spindle
