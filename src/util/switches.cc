// The registry's declarations, their parsers, and the only reads of the process environment in
// src/ (see switches.h).
#include "util/switches.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "util/error.h"

extern char** environ;

namespace spindle {
namespace {

// ---- parsing helpers: every error names the variable and the value -----------------------------

int64_t parse_integer(std::string_view name, std::string_view text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  SPINDLE_CHECK(ec == std::errc{} && end == text.data() + text.size() && v >= lo && v <= hi,
                "environment variable {}='{}': expected an integer from {} to {}", name, text, lo, hi);
  return v;
}

void check_one_of(std::string_view name, std::string_view text, std::initializer_list<std::string_view> allowed) {
  std::string list;
  for (auto a : allowed) {
    if (text == a) return;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  SPINDLE_FAIL("environment variable {}='{}': expected one of {}", name, text, list);
}

std::optional<std::string> unless(bool is_default, std::string value) {
  return is_default ? std::nullopt : std::optional<std::string>(std::move(value));
}

const Switches kDefaults{};

// A variable whose value is its text as is, in the std::string member M ("" where unset).
template <std::string Switches::*M>
constexpr SwitchDeclaration text_switch(std::string_view name, SwitchKind kind, std::string_view default_text,
                                        std::string_view why, bool secret = false) {
  return SwitchDeclaration{name, kind, default_text, why, secret,
                           [](Switches& s, std::string_view t) { s.*M = std::string(t); },
                           [](const Switches& s) { return unless((s.*M).empty(), s.*M); }};
}

// Another program's variable, kept as given in the member M (nullopt where unset).
template <std::optional<std::string> Switches::*M>
constexpr SwitchDeclaration external_switch(std::string_view name, std::string_view default_text,
                                            std::string_view why) {
  return SwitchDeclaration{name, SwitchKind::kExternal, default_text, why, false,
                           [](Switches& s, std::string_view t) { s.*M = std::string(t); },
                           [](const Switches& s) { return s.*M; }};
}

// ---- the declarations -----------------------------------------------------------------------------

// constinit: filled before any static initializer of another file can read it.
constinit const std::array kDeclarations = {
    // kUser
    text_switch<&Switches::api_key>("SPINDLE_API_KEY", SwitchKind::kUser, "no key",
                                    "the bearer key of /v1 (or --api-key / --api-key-file)", /*secret=*/true),
    SwitchDeclaration{
        "SPINDLE_LOG_LEVEL", SwitchKind::kUser, "info",
        "log level, trace|debug|info|warn|error|critical|off (trace also logs each cuDNN graph build)", false,
        [](Switches& s, std::string_view t) {
          // spdlog's names (level::from_str), its short forms "warn" and "err" too.
          check_one_of("SPINDLE_LOG_LEVEL", t,
                       {"trace", "debug", "info", "warning", "warn", "error", "err", "critical", "off"});
          s.log_level = std::string(t);
        },
        [](const Switches& s) { return unless(s.log_level == kDefaults.log_level, s.log_level); }},
    text_switch<&Switches::cache_dir>("SPINDLE_CACHE_DIR", SwitchKind::kUser,
                                      "$XDG_CACHE_HOME/spindle, else ~/.cache/spindle",
                                      "where validation results and measured selections are cached"),
    SwitchDeclaration{
        "SPINDLE_NUM_THREADS", SwitchKind::kUser, "one per usable core",
        "threads of the process-wide CPU pool (benchmarks and tools; serve has --num-threads)", false,
        [](Switches& s, std::string_view t) {
          s.num_threads = static_cast<int>(parse_integer("SPINDLE_NUM_THREADS", t, 0, 4096));
        },
        [](const Switches& s) { return unless(s.num_threads == 0, std::to_string(s.num_threads)); }},
    text_switch<&Switches::cublas_library>("SPINDLE_CUBLAS_LIBRARY", SwitchKind::kUser,
                                           "libcublas.so.13, else libcublas.so",
                                           "the cuBLAS file to dlopen (CUDA builds)"),
    text_switch<&Switches::cudnn_library>("SPINDLE_CUDNN_LIBRARY", SwitchKind::kUser,
                                          "libcudnn.so.9, else libcudnn.so", "the cuDNN file to dlopen (CUDA builds)"),
    // kTest
    text_switch<&Switches::attn_fault>(
        "SPINDLE_ATTN_FAULT", SwitchKind::kTest, "none",
        "name=crash|hang|wrong|throw[@RANK],...: the named attention backend misbehaves (attn/fault_injection.h)"),
    text_switch<&Switches::linear_fault>(
        "SPINDLE_LINEAR_FAULT", SwitchKind::kTest, "none",
        "name=crash|wrong,...: the named CPU linear kernel raises SIGILL or adds 0.5 to its outputs "
        "(kernels/cpu/linear_registry.h)"),
    SwitchDeclaration{
        "SPINDLE_SAMPLER_FAULT", SwitchKind::kTest, "none",
        "nan:SEED|throw:SEED: the sampler poisons the row of that seed (engine/sampler.h)", false,
        [](Switches& s, std::string_view t) {
          const size_t colon = t.find(':');
          uint64_t seed = 0;
          const std::string_view digits = colon == std::string_view::npos ? std::string_view{} : t.substr(colon + 1);
          const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seed);
          SPINDLE_CHECK(t.empty() || (colon != std::string_view::npos &&
                                      (t.substr(0, colon) == "nan" || t.substr(0, colon) == "throw") &&
                                      !digits.empty() && ec == std::errc{} && end == digits.data() + digits.size()),
                        "environment variable SPINDLE_SAMPLER_FAULT='{}': expected nan:SEED or throw:SEED", t);
          s.sampler_fault = std::string(t);
        },
        [](const Switches& s) { return unless(s.sampler_fault.empty(), s.sampler_fault); }},
    SwitchDeclaration{
        "SPINDLE_CUDNN_RAGGED", SwitchKind::kTest, "by the cuDNN version",
        "0|1: cudnn_sdpa's padded / packed Q/O layout, so the GPU check tests both on one cuDNN", false,
        [](Switches& s, std::string_view t) {
          check_one_of("SPINDLE_CUDNN_RAGGED", t, {"0", "1"});
          s.cudnn_ragged = std::string(t);
        },
        [](const Switches& s) { return unless(s.cudnn_ragged.empty(), s.cudnn_ragged); }},
    SwitchDeclaration{
        "SPINDLE_FP8_MMA_LOAD", SwitchKind::kTest, "by rows (block stages <= 16 rows, block pairs above)",
        "lanes|spans|stages|pairs: the weight load of gemv_fp8_mma that Fp8Linear serves, an A/B for issue "
        "47's first GPU run of the block pipelines (chosen on paper, 2026-12-08); deleted with the losing loads "
        "once measured",
        false,
        [](Switches& s, std::string_view t) {
          check_one_of("SPINDLE_FP8_MMA_LOAD", t, {"lanes", "spans", "stages", "pairs"});
          s.fp8_mma_load = std::string(t);
        },
        [](const Switches& s) { return unless(s.fp8_mma_load.empty(), s.fp8_mma_load); }},
    // kInternal
    SwitchDeclaration{
        "SPINDLE_OMP_WAIT_POLICY_DEFAULTED", SwitchKind::kInternal, "unset",
        "set to 1 with OMP_WAIT_POLICY=PASSIVE when Spindle re-executes itself (platform/openmp_policy.h)", false,
        [](Switches& s, std::string_view t) { s.openmp_policy_defaulted = t == "1"; },
        [](const Switches& s) { return unless(!s.openmp_policy_defaulted, "1"); }},
    // kExternal
    external_switch<&Switches::home>("HOME", "unset", "the cache's last fallback, ~/.cache/spindle"),
    external_switch<&Switches::xdg_cache_home>("XDG_CACHE_HOME", "unset",
                                               "the cache's parent folder where SPINDLE_CACHE_DIR is unset"),
    external_switch<&Switches::omp_wait_policy>("OMP_WAIT_POLICY", "unset (Spindle sets PASSIVE and re-executes)",
                                                "libgomp's wait policy; a user's value is kept (platform/openmp_policy.h)"),
    external_switch<&Switches::gomp_spincount>("GOMP_SPINCOUNT", "unset",
                                               "libgomp's spin count; where set, Spindle leaves the wait policy alone"),
};

// ---- the 21 A/B switches of 2026-12-06 and what became of them -------------------------------------

constexpr std::array kFormer = {
    FormerSwitch{"SPINDLE_CUDA_PDL", SwitchFate::kDeleted,
                 "PDL on every sm_90+ device: graph decode 4.71 -> 4.60 ms at batch 1, 8B, H200 "
                 "(17385d0, bench/results/2026-12-01-h200-e2e.md); older GPUs launch plainly by capability"},
    FormerSwitch{"SPINDLE_CUDA_PDL_EARLY", SwitchFate::kDeleted,
                 "early triggers and K/V copies before the wait wherever PDL is on: decode 4.61 -> 4.54 ms at "
                 "batch 1 / 512 keys, 7.74 -> 7.42 ms at batch 8 / 8000 keys (8d85149, checks-10..13)"},
    FormerSwitch{"SPINDLE_CUDA_QKV_ROPE", SwitchFate::kDeleted,
                 "q/k/v product + RoPE split in one launch at 1-2 rows: 4.463 vs 4.486 ms per batch-1 step "
                 "(d7b8646, bench/results/2026-12-02-h200-checks-17/early.md)"},
    FormerSwitch{"SPINDLE_CUDA_ATTN_OUT16", SwitchFate::kDeleted,
                 "flash decode writes the projection's 16-bit input: one conversion launch fewer per layer, "
                 "4.463 (with) vs 4.459 ms (noise) at batch 1, 4.563 with neither fusion (d7b8646, checks-17)"},
    FormerSwitch{"SPINDLE_FLASH_DECODE_ROWS", SwitchFate::kDeleted,
                 "verify rows on the decode kernel: 23.7 -> ~11 us per layer, 5-row verify ~0.35 ms cheaper "
                 "(874c645, bench/results/2026-12-04-h200-verify-attn)"},
    FormerSwitch{"SPINDLE_FLASH_DECODE_FUSED_MERGE", SwitchFate::kDeleted,
                 "the merge in the split kernel's last block was 118-149 us slower per batch-1 step, 98-134 at "
                 "batch 8 (16036be, bench/results/2026-12-03-h200-sampler-norm-merge); the path is gone"},
    FormerSwitch{"SPINDLE_CUDA_NORM_WEIGHTS_FIRST", SwitchFate::kDeleted,
                 "RMSNorm loads its weights with the row: -31 / -41 us per step at batch 1 / 8 (16036be, "
                 "sampler-norm-merge); the weights-after variant is gone"},
    FormerSwitch{"SPINDLE_CUDA_SAMPLER_BATCHED", SwitchFate::kDeleted,
                 "the device sampler reads 16 loads per round trip: -24..-71 us per step (16036be, "
                 "sampler-norm-merge); the one-load variant is gone"},
    FormerSwitch{"SPINDLE_CUDA_GEMV16", SwitchFate::kDeleted,
                 "gemv16 for products of 1-4 rows beats cuBLAS there (83e1d0f, bench/results/2026-12-01-h200-gemv16); "
                 "cuBLAS keeps every other product"},
    FormerSwitch{"SPINDLE_CUDA_GEMV_MMA", SwitchFate::kDeleted,
                 "gemv_mma (tensor-core small-batch products) was slower: 5-row verify +1.15 ms, batch-8 decode "
                 "+3.75 ms (e30ed51, bench/results/2026-12-03-h200-gemv-mma); the kernel is gone"},
    FormerSwitch{"SPINDLE_CUDA_GEMV16_MAX_ROWS", SwitchFate::kDeleted,
                 "gemv16 up to kGemv16UseMaxRows = 4 rows, the measured crossover with cuBLAS (abeeab9, "
                 "bench/results/2026-12-04-h200-gemv16-outs)"},
    FormerSwitch{"SPINDLE_CUDA_GEMV16_FUSED_MAX_ROWS", SwitchFate::kDeleted,
                 "the fused q/k/v+RoPE and gate/up+SwiGLU forms up to kGemv16FusedMaxRows rows (abeeab9, "
                 "gemv16-outs)"},
    FormerSwitch{"SPINDLE_CUDA_GEMV16_EARLY_W", SwitchFate::kDeleted,
                 "every gemv16 product issues its first weight loads before the PDL wait: batch-1 8B step "
                 "4.27 -> 4.16 ms (4301f01, bench/results/2026-12-03-h200-early-weights)"},
    FormerSwitch{"SPINDLE_CUDA_GEMV16_NORM", SwitchFate::kDeleted,
                 "gemv16 + add + RMSNorm in one launch was 0.36-0.75 ms slower per batch-1 step (1d7b12a, "
                 "bench/results/2026-12-05-h200-norm-epilogue); the kernel is gone"},
    FormerSwitch{"SPINDLE_CUDNN_RAGGED", SwitchFate::kKept,
                 "kept as a test switch, not a speed one: the cuDNN version decides packed or padded Q/O (867ec18), "
                 "and tools/gpu/h200_check.sh's cudnn_padded / cudnn_ragged steps force each to test both"},
    FormerSwitch{"SPINDLE_FLASH_DECODE_MIN_CHUNK", SwitchFate::kMeasured,
                 "measured at start on the GPU by cuda_flash (kernels/cuda/split_policy.h, five candidates); "
                 "64 keys, the default, was fastest on the H200 (cc7d82b, decode-splits-s14); no variable"},
    FormerSwitch{"SPINDLE_FLASH_DECODE_BLOCKS_PER_SM", SwitchFate::kMeasured,
                 "measured at start with the chunk size (split_policy.h); 1, the default, from 8d85149 "
                 "(checks-10..13); no variable"},
    FormerSwitch{"SPINDLE_LINEAR_AMX_BF16_MIN_ROWS", SwitchFate::kMeasured,
                 "the linear registry measures each kernel per weight shape and row class at start "
                 "(kernels/cpu/select, issue 45 item 4); the row thresholds are its table"},
    FormerSwitch{"SPINDLE_LINEAR_BF16_DOT_MIN_ROWS", SwitchFate::kMeasured,
                 "the linear registry measures each kernel per weight shape and row class at start "
                 "(kernels/cpu/select, issue 45 item 4); the row thresholds are its table"},
    FormerSwitch{"SPINDLE_LINEAR_BF16_LARGE", SwitchFate::kDeleted,
                 "amx_bf16 above 64 rows beat oneDNN's bf16 matmul: 1277 vs 785 tok/s at 16 threads, 1B prefill "
                 "(9fed82e, merge 176b911, bench/results/2026-12-02-xeon-cpu-2); the oneDNN branch on AMX is gone"},
    FormerSwitch{"SPINDLE_POOL_SPIN_US", SwitchFate::kDeleted,
                 "idle pool threads poll 200 us before sleeping: 6.8M decode 1.5-2x faster on a quiet VM (27371ac); "
                 "ThreadPool::set_spin_us stays for bench/pool_ab"},
};

Environment read_environment_block();

// The environment's values from the start of every process that links this (the spindle binary,
// tests, benchmarks: SPINDLE_CUDNN_RAGGED and the kMeasured values reach tools/gpu's test and
// bench runs this way). A malformed value here leaves the defaults and says so on stderr;
// config::resolve_process_switches() in spindle's main() parses again and stops with the error.
Switches initial_switches() {
  try {
    return parse_switches(read_environment_block());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spindle: %s; using the defaults\n", e.what());
    return Switches{};
  }
}

Switches g_switches = initial_switches();

}  // namespace

std::string_view switch_kind_name(SwitchKind kind) {
  switch (kind) {
    case SwitchKind::kUser: return "user";
    case SwitchKind::kTest: return "test";
    case SwitchKind::kInternal: return "internal";
    case SwitchKind::kMeasured: return "measured";
    case SwitchKind::kExternal: return "external";
  }
  return "?";
}

std::string_view switch_fate_name(SwitchFate fate) {
  switch (fate) {
    case SwitchFate::kDeleted: return "deleted";
    case SwitchFate::kMeasured: return "measured per machine";
    case SwitchFate::kKept: return "kept";
  }
  return "?";
}

std::span<const SwitchDeclaration> switch_declarations() { return kDeclarations; }
std::span<const FormerSwitch> former_ab_switches() { return kFormer; }

const SwitchDeclaration* find_switch_declaration(std::string_view name) {
  for (const auto& d : kDeclarations) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

Switches parse_switches(const Environment& environment) {
  Switches values;
  for (const auto& d : kDeclarations) {
    if (auto it = environment.find(d.name); it != environment.end()) d.parse(values, it->second);
  }
  return values;
}

std::vector<std::string> undeclared_spindle_variables(const Environment& environment) {
  std::vector<std::string> names;
  for (const auto& [name, value] : environment) {
    if (name.starts_with("SPINDLE_") && find_switch_declaration(name) == nullptr) names.push_back(name);
  }
  return names;  // std::map: sorted
}

std::vector<std::pair<std::string, std::string>> non_default_switches(const Switches& values) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& d : kDeclarations) {
    if (auto v = d.format(values)) out.emplace_back(std::string(d.name), d.secret ? "(set)" : *v);
  }
  return out;
}

std::vector<std::string> switch_arguments(const Switches& values) {
  std::vector<std::string> args;
  for (const auto& d : kDeclarations) {
    if (d.secret || d.kind == SwitchKind::kInternal || d.kind == SwitchKind::kExternal) continue;
    if (auto v = d.format(values)) {
      args.emplace_back("--switch");
      args.push_back(fmt::format("{}={}", d.name, *v));
    }
  }
  return args;
}

void apply_switch_argument(Switches& values, std::string_view name_equals_value) {
  const size_t eq = name_equals_value.find('=');
  SPINDLE_CHECK(eq != std::string_view::npos, "--switch '{}': expected NAME=VALUE", name_equals_value);
  const std::string_view name = name_equals_value.substr(0, eq);
  const SwitchDeclaration* d = find_switch_declaration(name);
  SPINDLE_CHECK(d != nullptr && !d->secret && d->kind != SwitchKind::kInternal && d->kind != SwitchKind::kExternal,
                "--switch '{}': {} is not a switch a child takes", name_equals_value, name);
  d->parse(values, name_equals_value.substr(eq + 1));
}

const Switches& switches() { return g_switches; }
void set_switches(Switches values) { g_switches = std::move(values); }

ScopedSwitches::ScopedSwitches(Switches values) : saved_(g_switches) { g_switches = std::move(values); }
ScopedSwitches::~ScopedSwitches() { g_switches = std::move(saved_); }

Environment read_process_environment() { return read_environment_block(); }

namespace {

Environment read_environment_block() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = entry.substr(0, eq);
    if (name.starts_with("SPINDLE_") || find_switch_declaration(name) != nullptr) {
      env.emplace(std::string(name), std::string(entry.substr(eq + 1)));
    }
  }
  return env;
}

}  // namespace

char** process_environment_block() { return environ; }

}  // namespace spindle
