// Choosing the linear kernels (kernels/cpu/select/linear_selection.h): the choice per row count
// from given timings, explicit names, rejection of failed kernels, the on-disk cache, and the real
// validation child (`spindle __check-linear`) rejecting a crashing (SIGILL) and a wrong kernel
// while the parent survives.
#include "kernels/cpu/select/linear_selection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "platform/cpu_info.h"
#include "util/error.h"
#include "util/switches.h"

namespace spindle::kernels::cpu {
namespace {

using ::testing::HasSubstr;

const LinearShape kSquare{64, 64, DType::kBF16};
const LinearShape kWide{256, 64, DType::kBF16};

// Three made-up kernels (they compute with the reference): "fast_small" is fastest up to 4 rows,
// "fast_large" from 8, "prefill_only" (not row-independent) fastest at the prefill rows; "f32_only"
// says it cannot run bf16 weights.
LinearRegistry made_up_registry() {
  LinearRegistry r;
  auto any = [](const CpuInfo&, const LinearShape&, const LinearOptions&) { return std::vector<std::string>{}; };
  auto ref = [](const LinearWeight& w) { return make_reference_linear_kernel(w); };
  r.register_kernel({"fast_small", "", false, true, 10, 10, any, ref});
  r.register_kernel({"fast_large", "", false, true, 20, 20, any, ref});
  r.register_kernel({"prefill_only", "", false, false, 0, 30, any, ref});
  r.register_kernel({"f32_only", "", false, true, 99, 99,
                     [](const CpuInfo&, const LinearShape& s, const LinearOptions&) {
                       return s.dtype == DType::kF32 ? std::vector<std::string>{} : std::vector<std::string>{"f32 weights only"};
                     },
                     ref});
  return r;
}

// Seconds per product: fast_small 1 us per row up to 4 rows then 10 us per row; fast_large 3 us
// per row; prefill_only 1 us per row (but it may not serve decode rows).
double made_up_seconds(const std::string& kernel, int64_t rows) {
  if (kernel == "fast_small") return (rows <= 4 ? 1e-6 : 1e-5) * rows;
  if (kernel == "fast_large") return 3e-6 * rows;
  return 1e-6 * rows;
}

struct MadeUpValidator {
  std::map<std::string, CheckStatus> status;  // default pass
  int calls = 0;
  std::map<LinearShape, LinearOutcome> operator()(const std::string& kernel, const std::vector<LinearShape>& shapes,
                                                  const std::vector<int64_t>& rows) {
    ++calls;
    std::map<LinearShape, LinearOutcome> out;
    for (const auto& s : shapes) {
      LinearOutcome o;
      o.status = status.count(kernel) ? status[kernel] : CheckStatus::kPass;
      o.detail = std::string(check_status_name(o.status));
      o.report.shape = s.to_string();
      o.report.passed = o.status == CheckStatus::kPass;
      for (int64_t r : rows) o.report.seconds.emplace_back(r, made_up_seconds(kernel, r));
      out[s] = o;
    }
    return out;
  }
};

LinearSelectionOptions options_of(std::vector<int64_t> decode_rows, int64_t prefill_rows) {
  LinearSelectionOptions o;
  o.decode_rows = std::move(decode_rows);
  o.prefill_rows = prefill_rows;
  return o;
}

TEST(LinearSelectionTest, TheFastestPerRowCountMakesTheTable) {
  const LinearRegistry registry = made_up_registry();
  MadeUpValidator v;
  const auto s = select_linear_kernels(detect_cpu_info(), {kSquare, kWide}, options_of({1, 2, 4, 8, 16}, 512),
                                       std::ref(v), registry);
  ASSERT_EQ(s.choices.size(), 2u);
  const std::vector<LinearRowChoice> want = {{1, "fast_small"}, {8, "fast_large"}, {17, "prefill_only"}};
  for (const auto& c : s.choices) {
    ASSERT_EQ(c.table.size(), want.size()) << c.shape.to_string();
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(c.table[i].min_rows, want[i].min_rows);
      EXPECT_EQ(c.table[i].kernel, want[i].kernel);
    }
  }
  EXPECT_EQ(v.calls, 3);  // one validation per available kernel (f32_only runs no bf16 shape)
  for (const auto& r : s.rows) {
    if (r.kernel == "f32_only") EXPECT_THAT(r.unsupported_reasons, ::testing::ElementsAre("f32 weights only"));
    if (r.kernel == "prefill_only") EXPECT_EQ(r.chosen_rows, (std::vector<int64_t>{512}));
  }
}

TEST(LinearSelectionTest, RejectedKernelsAreNeverChosen) {
  const LinearRegistry registry = made_up_registry();
  MadeUpValidator v;
  v.status["fast_small"] = CheckStatus::kCrash;
  v.status["prefill_only"] = CheckStatus::kMismatch;
  const auto s = select_linear_kernels(detect_cpu_info(), {kSquare}, options_of({1, 8}, 512), std::ref(v), registry);
  ASSERT_EQ(s.choices[0].table.size(), 1u);
  EXPECT_EQ(s.choices[0].table[0].kernel, "fast_large");
}

TEST(LinearSelectionTest, PriorityPolicyTimesNothing) {
  const LinearRegistry registry = made_up_registry();
  MadeUpValidator v;
  LinearSelectionOptions o = options_of({1, 8}, 512);
  o.policy = LinearPolicy::kPriority;
  const auto s = select_linear_kernels(detect_cpu_info(), {kSquare}, o, std::ref(v), registry);
  const std::vector<LinearRowChoice>& t = s.choices[0].table;
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].kernel, "fast_large");    // decode priority 20 > 10 (prefill_only may not serve decode)
  EXPECT_EQ(t[1].kernel, "prefill_only");  // prefill priority 30
  EXPECT_EQ(t[1].min_rows, 9);
}

TEST(LinearSelectionTest, ExplicitNamesOverrideTheirRowClass) {
  const LinearRegistry registry = made_up_registry();
  MadeUpValidator v;
  LinearSelectionOptions o = options_of({1, 8}, 512);
  o.decode_kernel = "fast_small";
  const auto s = select_linear_kernels(detect_cpu_info(), {kSquare}, o, std::ref(v), registry);
  EXPECT_EQ(s.choices[0].table.front().kernel, "fast_small");
  EXPECT_EQ(s.choices[0].table.back().kernel, "prefill_only");
  EXPECT_EQ(s.choices[0].table.size(), 2u);
}

// With both row classes named there is nothing to choose: the kernels are validated, not timed
// (a timed validation of an LM head took over a minute on a loaded 2-core machine).
TEST(LinearSelectionTest, BothClassesNamedTimesNothing) {
  const LinearRegistry registry = made_up_registry();
  std::vector<std::vector<int64_t>> rows_asked;
  auto validator = [&](const std::string& kernel, const std::vector<LinearShape>& shapes, const std::vector<int64_t>& rows) {
    rows_asked.push_back(rows);
    return MadeUpValidator{}(kernel, shapes, rows);
  };
  LinearSelectionOptions o = options_of({1, 8}, 512);
  o.decode_kernel = "fast_small";
  o.prefill_kernel = "fast_large";
  const auto s = select_linear_kernels(detect_cpu_info(), {kSquare}, o, validator, registry);
  ASSERT_EQ(s.choices[0].table.size(), 2u);
  EXPECT_EQ(s.choices[0].table[0].kernel, "fast_small");
  EXPECT_EQ(s.choices[0].table[1].kernel, "fast_large");
  ASSERT_FALSE(rows_asked.empty());
  for (const auto& r : rows_asked) EXPECT_TRUE(r.empty());
  // One class named: the other is still chosen by timing.
  rows_asked.clear();
  o.prefill_kernel = "auto";
  select_linear_kernels(detect_cpu_info(), {kSquare}, o, validator, registry);
  for (const auto& r : rows_asked) EXPECT_EQ(r, (std::vector<int64_t>{1, 8, 512}));
}

TEST(LinearSelectionTest, TheChildsTimeLimitGrowsWithTheWeights) {
  EXPECT_DOUBLE_EQ(shape_timeout_s(LinearShape{512, 2048, DType::kBF16}, 30), 30);
  EXPECT_DOUBLE_EQ(shape_timeout_s(LinearShape{8192, 2048, DType::kBF16}, 30), 30);
  EXPECT_DOUBLE_EQ(shape_timeout_s(LinearShape{16384, 2048, DType::kBF16}, 30), 60);
  EXPECT_NEAR(shape_timeout_s(LinearShape{128256, 2048, DType::kBF16}, 30), 30 * 128256.0 / 8192, 1e-9);
}

TEST(LinearSelectionTest, ExplicitNamesThatCannotServeAreErrorsWithTheReason) {
  const LinearRegistry registry = made_up_registry();
  MadeUpValidator v;
  auto error_of = [&](LinearSelectionOptions o) -> std::string {
    try {
      select_linear_kernels(detect_cpu_info(), {kSquare}, o, std::ref(v), registry);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  LinearSelectionOptions o = options_of({1, 8}, 512);
  o.prefill_kernel = "nope";
  EXPECT_THAT(error_of(o), HasSubstr("registered kernels: fast_small, fast_large, prefill_only, f32_only"));
  o.prefill_kernel = "f32_only";
  EXPECT_THAT(error_of(o), HasSubstr("f32 weights only"));
  o.prefill_kernel = "auto";
  o.decode_kernel = "prefill_only";
  EXPECT_THAT(error_of(o), HasSubstr("cannot serve decode rows"));
  o.decode_kernel = "fast_large";
  v.status["fast_large"] = CheckStatus::kMismatch;
  EXPECT_THAT(error_of(o), HasSubstr("validation mismatch"));
}

TEST(LinearSelectionTest, RowsFollowTheServersLimits) {
  const auto o = linear_rows_for(12, 8192, {});
  EXPECT_EQ(o.decode_rows, (std::vector<int64_t>{1, 2, 4, 8, 12}));
  EXPECT_EQ(o.prefill_rows, 512);
  EXPECT_EQ(linear_rows_for(1000, 100, {}).decode_rows.back(), kLinearDecodeMaxRows);
  EXPECT_EQ(linear_rows_for(1000, 100, {}).prefill_rows, 100);
}

TEST(LinearSelectionCacheTest, ASecondSelectionIsAnsweredFromTheFiles) {
  const auto dir = std::filesystem::temp_directory_path() / ("spindle-linear-cache-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const LinearRegistry registry = made_up_registry();
  const LinearSelectionOptions o = options_of({1, 8}, 512);
  MadeUpValidator v;
  v.status["prefill_only"] = CheckStatus::kCrash;  // kept too: a crash stays a crash
  v.status["fast_large"] = CheckStatus::kTimeout;  // not kept: may be transient
  LinearSelectionCache first(dir, LinearSelectionCache::make_key("b1", "cpu1", o));
  select_linear_kernels(detect_cpu_info(), {kSquare}, o, first.wrap(std::ref(v)), registry);
  EXPECT_EQ(first.num_misses(), 3);
  EXPECT_EQ(v.calls, 3);
  LinearSelectionCache second(dir, LinearSelectionCache::make_key("b1", "cpu1", o));
  const auto s = select_linear_kernels(detect_cpu_info(), {kSquare}, o, second.wrap(std::ref(v)), registry);
  EXPECT_EQ(second.num_hits(), 2);    // fast_small (pass, timed) and prefill_only (crash)
  EXPECT_EQ(second.num_misses(), 1);  // fast_large (timeout) asked again
  EXPECT_EQ(v.calls, 4);
  EXPECT_EQ(s.choices[0].table.back().kernel, "fast_small");
  LinearSelectionCache other_build(dir, LinearSelectionCache::make_key("b2", "cpu1", o));
  select_linear_kernels(detect_cpu_info(), {kSquare}, o, other_build.wrap(std::ref(v)), registry);
  EXPECT_EQ(other_build.num_hits(), 0);
  std::filesystem::remove_all(dir);
}

// ---- The real child -------------------------------------------------------------------------------

LinearChildOptions child_options() {
  LinearChildOptions o;
  o.executable = SPINDLE_BINARY;
  o.timeout_s = 60;
  return o;
}

TEST(LinearChildTest, ACleanKernelPassesAndIsTimed) {
  const auto out = validate_linear_in_child("onednn_f32", {{96, 80, DType::kF32}}, {1, 70}, child_options());
  ASSERT_EQ(out.size(), 1u);
  const LinearOutcome& o = out.begin()->second;
  EXPECT_EQ(o.status, CheckStatus::kPass) << o.detail;
  EXPECT_GT(o.report.seconds_at(70), 0);
}

TEST(LinearChildTest, ACrashingKernelIsRejectedAndTheParentSurvives) {
  Switches faulty = switches();
  faulty.linear_fault = "onednn_f32=crash";  // raises SIGILL, as an instruction this CPU lacks would
  const ScopedSwitches scoped(faulty);
  const auto out = validate_linear_in_child("onednn_f32", {kSquare, kWide}, {}, child_options());
  ASSERT_EQ(out.size(), 2u);
  for (const auto& [shape, o] : out) {
    EXPECT_EQ(o.status, CheckStatus::kCrash) << shape.to_string();
    EXPECT_THAT(o.detail, HasSubstr("SIGILL"));
  }
}

TEST(LinearChildTest, AWrongKernelIsAMismatch) {
  Switches faulty = switches();
  faulty.linear_fault = "onednn_f32=wrong";
  const ScopedSwitches scoped(faulty);
  const auto out = validate_linear_in_child("onednn_f32", {kSquare}, {}, child_options());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out.begin()->second.status, CheckStatus::kMismatch) << out.begin()->second.detail;
}

TEST(LinearChildTest, TheRealSelectionRunsOnTheNextKernelWhenOneCrashes) {
  Switches faulty = switches();
  faulty.linear_fault = "avx2=crash,avx512=crash";
  const ScopedSwitches scoped(faulty);
  LinearSelectionOptions o = options_of({1, 4}, 80);
  o.linear.allow_bf16_activations = true;  // avx512_bf16 / amx_bf16 may serve the decode rows
  LinearChildOptions child = child_options();
  child.allow_bf16_activations = true;
  const auto validator = [child](const std::string& k, const std::vector<LinearShape>& s, const std::vector<int64_t>& r) {
    return validate_linear_in_child(k, s, r, child);
  };
  LinearSelection s;
  try {
    s = select_linear_kernels(detect_cpu_info(), {{48, 40, DType::kBF16}}, o, validator);
  } catch (const Error& e) {
    // A CPU whose only decode kernels are avx2/avx512 (no AVX512-BF16): nothing left, said so.
    EXPECT_THAT(e.what(), HasSubstr("no linear kernel passed validation"));
    return;
  }
  ASSERT_EQ(s.choices.size(), 1u);
  for (const auto& e : s.choices[0].table) EXPECT_TRUE(e.kernel != "avx2" && e.kernel != "avx512") << e.kernel;
  for (const auto& r : s.rows) {
    if ((r.kernel == "avx2" || r.kernel == "avx512") && r.unsupported_reasons.empty()) {
      ASSERT_TRUE(r.outcome.has_value());
      EXPECT_EQ(r.outcome->status, CheckStatus::kCrash);
    }
  }
}

}  // namespace
}  // namespace spindle::kernels::cpu
