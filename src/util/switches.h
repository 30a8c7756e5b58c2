// The one registry of environment switches (DESIGN.md sections 1 and 10).
//
// Every environment variable Spindle reads is declared here -- its name, kind, default and why it
// exists -- and read nowhere else: switches.cc is the only file of src/ that reads the environment
// (tests/config/getenv_sites_test.cc fails on any other call site). config::resolve(Environment)
// parses the process's environment once at start into one Switches value and installs it; the
// layers read switches(). Tests set values with ScopedSwitches. A validation child receives the
// parent's non-default values on its command line (switch_arguments / apply_switch_argument), so
// a value a test sets reaches it.
//
// The performance A/B switches of the first weeks are gone: each is listed in
// former_ab_switches() with its fate (deleted with its losing path, measured per machine, or kept)
// and the measurement behind it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace spindle {

// Name -> value of the variables of an environment (only the ones the registry cares about:
// every declared variable and every SPINDLE_* one).
using Environment = std::map<std::string, std::string, std::less<>>;

enum class SwitchKind {
  kUser,      // for operators; the README documents it
  kTest,      // fault injection for tests and tools/gpu checks; never needed by a user
  kInternal,  // Spindle sets it for a process it starts itself
  kMeasured,  // a kernel crossover: defaults to the constant measured on the machine named in its
              // reason until a kernel registry measures it per machine; set only by benchmarks
  kExternal,  // not Spindle's variable: read, never owned
};
std::string_view switch_kind_name(SwitchKind kind);

// The values, one member per declared variable (defaults: what an unset variable means).
struct Switches {
  // kUser
  std::string api_key;             // SPINDLE_API_KEY: the bearer key of /v1 (secret)
  std::string log_level = "info";  // SPINDLE_LOG_LEVEL: trace|debug|info|warn|error|critical|off
  std::string cache_dir;           // SPINDLE_CACHE_DIR: "" = $XDG_CACHE_HOME/spindle, else ~/.cache/spindle
  int num_threads = 0;             // SPINDLE_NUM_THREADS: the global pool's threads; 0 = one per usable core
  std::string cublas_library;      // SPINDLE_CUBLAS_LIBRARY: the file to dlopen; "" = libcublas.so.13
  std::string cudnn_library;       // SPINDLE_CUDNN_LIBRARY: the file to dlopen; "" = libcudnn.so.9
  // kTest
  std::string attn_fault;          // SPINDLE_ATTN_FAULT: attn/fault_injection.h's spec; "" = none
  std::string linear_fault;        // SPINDLE_LINEAR_FAULT: "name=crash|wrong,..." (kernels/cpu/linear_registry.h)
  std::string sampler_fault;       // SPINDLE_SAMPLER_FAULT: "nan:SEED" | "throw:SEED"; "" = none
  std::string cudnn_ragged;        // SPINDLE_CUDNN_RAGGED: "0" padded / "1" packed Q/O; "" = by cuDNN version
  std::string fp8_mma_load;        // SPINDLE_FP8_MMA_LOAD: lanes|spans|stages|pairs; "" = by rows (fp8_linear.cc)
  // kInternal
  bool openmp_policy_defaulted = false;  // SPINDLE_OMP_WAIT_POLICY_DEFAULTED=1 (platform/openmp_policy.h)
  // Measured, no variable: cuda_flash's start-time measurement sets them on the GPU
  // (kernels/cuda/split_policy.h, attn::BackendDescriptor::measure_machine); tests set them.
  int flash_decode_min_chunk = 64;       // flash decode's smallest split (keys; multiple of 16, 16..1024)
  int flash_decode_blocks_per_sm = 1;    // its split blocks per SM (1..64)
  // kExternal (nullopt: unset)
  std::optional<std::string> home;             // HOME
  std::optional<std::string> xdg_cache_home;   // XDG_CACHE_HOME
  std::optional<std::string> omp_wait_policy;  // OMP_WAIT_POLICY
  std::optional<std::string> gomp_spincount;   // GOMP_SPINCOUNT
};

// One declared variable.
struct SwitchDeclaration {
  std::string_view name;
  SwitchKind kind;
  std::string_view default_text;  // what unset means, for `spindle info`
  std::string_view why;           // one line: what it is for; for kMeasured, the measurement
  bool secret = false;            // never printed, never on a command line
  // Sets the member from the variable's text; throws spindle::Error naming the variable.
  void (*parse)(Switches& values, std::string_view text);
  // The member as the environment spells it; nullopt where the member holds its default.
  std::optional<std::string> (*format)(const Switches& values);
};
std::span<const SwitchDeclaration> switch_declarations();
const SwitchDeclaration* find_switch_declaration(std::string_view name);

// What became of each of the 21 performance A/B switches src/ read on 2026-12-06 (issue 43).
enum class SwitchFate {
  kDeleted,   // deleted with its losing path; `why` cites the measurement (commit, bench folder)
  kMeasured,  // a value a kernel registry measures per machine (declared above until it does)
  kKept,      // kept, with its measurement and why it stays
};
std::string_view switch_fate_name(SwitchFate fate);
struct FormerSwitch {
  std::string_view name;
  SwitchFate fate;
  std::string_view why;
};
std::span<const FormerSwitch> former_ab_switches();

// Parses the declared variables of `environment` (others are ignored); throws spindle::Error
// naming the variable and the value where one is malformed or out of range.
Switches parse_switches(const Environment& environment);
// The SPINDLE_* names of `environment` that the registry does not declare, sorted.
std::vector<std::string> undeclared_spindle_variables(const Environment& environment);
// Declared variables whose value differs from the default: (name, value), secret values shown as
// "(set)", in declaration order.
std::vector<std::pair<std::string, std::string>> non_default_switches(const Switches& values);

// The command-line arguments that carry `values` to a child: "--switch" "NAME=VALUE" for each
// non-default, non-secret declared variable of kind kUser, kTest or kMeasured (members without a
// variable stay the child's defaults).
std::vector<std::string> switch_arguments(const Switches& values);
// Applies one "NAME=VALUE" (the child's side); throws naming an undeclared or malformed variable.
void apply_switch_argument(Switches& values, std::string_view name_equals_value);

// The process's values: the environment's, parsed when the process starts (static
// initialization; a malformed value leaves the defaults and is reported on stderr), then
// installed again by config::resolve_process_switches() at the start of spindle's main(), which
// stops on a malformed value. Read them anywhere; set them only before other threads read (at
// start, or in a test between runs).
const Switches& switches();
void set_switches(Switches values);

// Sets values for a scope (tests), restoring the previous ones at its end.
class ScopedSwitches {
 public:
  explicit ScopedSwitches(Switches values);
  ~ScopedSwitches();
  ScopedSwitches(const ScopedSwitches&) = delete;
  ScopedSwitches& operator=(const ScopedSwitches&) = delete;

 private:
  Switches saved_;
};

// The only readers of the process environment: the declared and SPINDLE_* variables now, and
// the environment block to hand to a child process (posix_spawn's envp).
Environment read_process_environment();
char** process_environment_block();

}  // namespace spindle
