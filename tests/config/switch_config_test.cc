// The registry of environment switches (util/switches.h) and config::resolve(Environment):
// parsing, defaults, malformed values named in the error, the undeclared-variable warning, the
// values a child gets on its command line, and the fates of the 21 former A/B switches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "config/switch_config.h"
#include "support/error_of.h"
#include "util/error.h"
#include "util/switches.h"

namespace spindle {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

using testing::error_of;

TEST(SwitchConfigTest, AnEmptyEnvironmentGivesTheDefaults) {
  const config::ResolvedSwitches r = config::resolve(Environment{});
  EXPECT_EQ(r.values.log_level, "info");
  EXPECT_EQ(r.values.num_threads, 0);
  EXPECT_TRUE(r.values.linear_fault.empty());
  EXPECT_EQ(r.values.flash_decode_min_chunk, 64);
  EXPECT_EQ(r.values.flash_decode_blocks_per_sm, 1);
  EXPECT_TRUE(r.values.api_key.empty());
  EXPECT_FALSE(r.values.home.has_value());
  EXPECT_FALSE(r.values.openmp_policy_defaulted);
  EXPECT_THAT(r.undeclared, IsEmpty());
  EXPECT_THAT(non_default_switches(r.values), IsEmpty());
  EXPECT_THAT(switch_arguments(r.values), IsEmpty());
}

TEST(SwitchConfigTest, DeclaredVariablesAreParsed) {
  const Environment env = {{"SPINDLE_LOG_LEVEL", "debug"},
                           {"SPINDLE_NUM_THREADS", "3"},
                           {"SPINDLE_CACHE_DIR", "/tmp/c"},
                           {"SPINDLE_API_KEY", "k-123"},
                           {"SPINDLE_LINEAR_FAULT", "avx2=crash"},
                           {"SPINDLE_FLASH_DECODE_MIN_CHUNK", "256"},  // measured, not a variable: ignored
                           {"SPINDLE_SAMPLER_FAULT", "nan:7"},
                           {"SPINDLE_OMP_WAIT_POLICY_DEFAULTED", "1"},
                           {"HOME", "/home/u"},
                           {"OMP_WAIT_POLICY", "PASSIVE"},
                           {"PATH", "/bin"}};
  const Switches s = config::resolve(env).values;
  EXPECT_EQ(s.log_level, "debug");
  EXPECT_EQ(s.num_threads, 3);
  EXPECT_EQ(s.cache_dir, "/tmp/c");
  EXPECT_EQ(s.api_key, "k-123");
  EXPECT_EQ(s.linear_fault, "avx2=crash");
  EXPECT_EQ(s.flash_decode_min_chunk, 64);
  EXPECT_EQ(s.sampler_fault, "nan:7");
  EXPECT_TRUE(s.openmp_policy_defaulted);
  EXPECT_EQ(s.home, "/home/u");
  EXPECT_EQ(s.omp_wait_policy, "PASSIVE");
  EXPECT_FALSE(s.xdg_cache_home.has_value());
}

TEST(SwitchConfigTest, MalformedValuesAreErrorsNamingTheVariable) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"SPINDLE_NUM_THREADS", "four"},
      {"SPINDLE_NUM_THREADS", "-1"},
      {"SPINDLE_NUM_THREADS", "3x"},
      {"SPINDLE_LOG_LEVEL", "loud"},
      {"SPINDLE_SAMPLER_FAULT", "oops:1"},
      {"SPINDLE_SAMPLER_FAULT", "nan:x"},
      {"SPINDLE_CUDNN_RAGGED", "yes"},
      {"SPINDLE_FP8_MMA_LOAD", "fast"},
  };
  for (const auto& [name, value] : bad) {
    const std::string message = error_of([&] { config::resolve(Environment{{name, value}}); });
    EXPECT_THAT(message, AllOf(HasSubstr(name), HasSubstr("'" + value + "'"))) << name << "=" << value;
  }
}

TEST(SwitchConfigTest, UndeclaredSpindleVariablesAreNamedInTheWarning) {
  const Environment env = {{"SPINDLE_LOG_LEVEL", "info"},
                           {"SPINDLE_CUDA_PDL", "0"},       // a retired A/B switch
                           {"SPINDLE_LOG_LEVLE", "debug"},  // a typo
                           {"OTHER_TOOL_VAR", "1"}};        // not Spindle's: not named
  const config::ResolvedSwitches r = config::resolve(env);
  EXPECT_THAT(r.undeclared, ElementsAre("SPINDLE_CUDA_PDL", "SPINDLE_LOG_LEVLE"));
  const std::string warning = config::undeclared_switches_warning(r.undeclared);
  EXPECT_THAT(warning, HasSubstr("SPINDLE_CUDA_PDL (a retired A/B switch)"));
  EXPECT_THAT(warning, HasSubstr("SPINDLE_LOG_LEVLE"));
  EXPECT_THAT(warning, ::testing::Not(HasSubstr("OTHER_TOOL_VAR")));
  EXPECT_EQ(config::undeclared_switches_warning({}), "");
}

TEST(SwitchConfigTest, NonDefaultValuesAreListedAndSecretsHidden) {
  Switches s;
  s.api_key = "secret-key";
  s.num_threads = 2;
  s.home = "/h";
  EXPECT_THAT(non_default_switches(s), ElementsAre(Pair("SPINDLE_API_KEY", "(set)"), Pair("SPINDLE_NUM_THREADS", "2"),
                                                   Pair("HOME", "/h")));
}

TEST(SwitchConfigTest, ChildArgumentsCarryTheValuesButNoSecretAndRoundTrip) {
  Switches s;
  s.api_key = "secret-key";
  s.attn_fault = "cpu_avx2=wrong@1";
  s.linear_fault = "avx2=wrong";
  s.flash_decode_min_chunk = 128;    // measured in each process, no variable: not passed
  s.openmp_policy_defaulted = true;  // internal: the child's own environment says it
  s.home = "/h";                     // external: inherited with the environment
  const std::vector<std::string> args = switch_arguments(s);
  EXPECT_THAT(args, ElementsAre("--switch", "SPINDLE_ATTN_FAULT=cpu_avx2=wrong@1", "--switch",
                                "SPINDLE_LINEAR_FAULT=avx2=wrong"));
  Switches child;
  for (size_t i = 1; i < args.size(); i += 2) apply_switch_argument(child, args[i]);
  EXPECT_EQ(child.attn_fault, s.attn_fault);
  EXPECT_EQ(child.linear_fault, "avx2=wrong");
  EXPECT_TRUE(child.api_key.empty());
  EXPECT_THAT(error_of([&] { apply_switch_argument(child, "SPINDLE_NOT_A_SWITCH=1"); }),
              HasSubstr("SPINDLE_NOT_A_SWITCH"));
  EXPECT_THAT(error_of([&] { apply_switch_argument(child, "SPINDLE_API_KEY=x"); }), HasSubstr("SPINDLE_API_KEY"));
  // A retired switch (measured by the linear registry now) is no switch.
  EXPECT_THAT(error_of([&] { apply_switch_argument(child, "SPINDLE_LINEAR_AMX_BF16_MIN_ROWS=9"); }),
              HasSubstr("SPINDLE_LINEAR_AMX_BF16_MIN_ROWS"));
}

TEST(SwitchConfigTest, ScopedSwitchesSetAndRestoreTheProcessValues) {
  const int before = switches().num_threads;
  {
    Switches s = switches();
    s.num_threads = before + 5;
    const ScopedSwitches scoped(s);
    EXPECT_EQ(switches().num_threads, before + 5);
  }
  EXPECT_EQ(switches().num_threads, before);
}

// Every one of the 21 performance A/B switches of 2026-12-06 has exactly one fate with a reason;
// a measured one is declared as kMeasured (until its kernel registry measures it) or not at all
// (measured at start), a deleted one is not declared, and none is a user switch.
TEST(SwitchConfigTest, TheFormerAbSwitchesEachHaveOneFate) {
  const std::set<std::string> expected = {
      "SPINDLE_CUDA_PDL", "SPINDLE_CUDA_PDL_EARLY", "SPINDLE_CUDA_QKV_ROPE", "SPINDLE_CUDA_ATTN_OUT16",
      "SPINDLE_FLASH_DECODE_ROWS", "SPINDLE_FLASH_DECODE_FUSED_MERGE", "SPINDLE_CUDA_NORM_WEIGHTS_FIRST",
      "SPINDLE_CUDA_SAMPLER_BATCHED", "SPINDLE_CUDA_GEMV16", "SPINDLE_CUDA_GEMV_MMA", "SPINDLE_CUDA_GEMV16_MAX_ROWS",
      "SPINDLE_CUDA_GEMV16_FUSED_MAX_ROWS", "SPINDLE_CUDA_GEMV16_EARLY_W", "SPINDLE_CUDA_GEMV16_NORM",
      "SPINDLE_CUDNN_RAGGED", "SPINDLE_FLASH_DECODE_MIN_CHUNK", "SPINDLE_FLASH_DECODE_BLOCKS_PER_SM",
      "SPINDLE_LINEAR_AMX_BF16_MIN_ROWS", "SPINDLE_LINEAR_BF16_DOT_MIN_ROWS", "SPINDLE_LINEAR_BF16_LARGE",
      "SPINDLE_POOL_SPIN_US"};
  std::set<std::string> seen;
  for (const FormerSwitch& f : former_ab_switches()) {
    EXPECT_TRUE(seen.insert(std::string(f.name)).second) << f.name << " listed twice";
    EXPECT_FALSE(f.why.empty()) << f.name;
    const SwitchDeclaration* d = find_switch_declaration(f.name);
    if (f.fate == SwitchFate::kDeleted) EXPECT_EQ(d, nullptr) << f.name << " is deleted yet declared";
    if (f.fate == SwitchFate::kMeasured && d != nullptr) EXPECT_EQ(d->kind, SwitchKind::kMeasured) << f.name;
    if (d != nullptr) EXPECT_NE(d->kind, SwitchKind::kUser) << f.name << ": a performance switch a user must set";
  }
  EXPECT_EQ(seen, expected);
}

// The registry's shape: unique names, a reason for each, at most 12 SPINDLE_* variables (issue 43).
TEST(SwitchConfigTest, DeclarationsAreUniqueAndExplained) {
  std::set<std::string_view> names;
  int num_spindle = 0;
  for (const SwitchDeclaration& d : switch_declarations()) {
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_FALSE(d.why.empty()) << d.name;
    EXPECT_FALSE(d.default_text.empty()) << d.name;
    EXPECT_EQ(d.name.starts_with("SPINDLE_"), d.kind != SwitchKind::kExternal) << d.name;
    num_spindle += d.name.starts_with("SPINDLE_") ? 1 : 0;
  }
  for (const char* external : {"HOME", "XDG_CACHE_HOME", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}) {
    EXPECT_NE(find_switch_declaration(external), nullptr) << external;
  }
  EXPECT_LE(num_spindle, 12);
}

}  // namespace
}  // namespace spindle
