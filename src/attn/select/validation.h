// Proving a backend correct (and timing it) in an isolated child process.
//
// The parent re-executes the spindle binary (`spindle __check-attention ...`) once per candidate.
// The child builds random inputs of the model's real shape -- a prefill batch with cached prefixes
// and odd lengths, and a decode batch over paged KV -- runs the candidate and `reference` on
// identical copies, and prints one JSON line (a CheckReport) on stdout. The parent survives
// whatever the child does and records pass, mismatch, crash (with the signal), timeout or error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "attn/attention_types.h"
#include "util/check_status.h"
#include <nlohmann/json_fwd.hpp>

namespace spindle::attn {

// Tolerances, per KV dtype: the one place they are stated. Inputs are uniform in [-1, 1], so
// outputs are O(1). f32 KV with f32 arithmetic differs from float64 by accumulated rounding
// (~1e-6 over hundreds of keys); bf16 KV kernels may also round q and the probabilities P to bf16
// for bf16 dot products or AMX tiles (relative 2^-9 each), which moves outputs by ~2e-3. fp8_e4m3
// KV takes bf16's bound: candidate and reference read the same (scaled) FP8 pages, the written ones
// compared bit for bit, so only the arithmetic differs (f32 on the CPU, 16-bit q and P on tensor cores).
struct Tolerance {
  double max_abs_error;
};
Tolerance tolerance_for(DType kv_dtype);

// What the child measures for one backend on one shape.
struct CheckReport {
  std::string backend;
  std::string shape;  // AttentionShape::to_string()
  bool passed = false;
  double tolerance = 0;
  double prefill_max_abs_error = 0, prefill_max_rel_error = 0;
  double decode_max_abs_error = 0, decode_max_rel_error = 0;
  bool timed = false;
  double prefill_tokens_per_s = 0;   // causal prefill of timing_sizes(device).prefill_tokens tokens
  double prefill_gflops = 0;
  double decode_tokens_per_s = 0;    // one token for each of timing_sizes(device).decode_batch sequences
  double decode_kv_gb_per_s = 0;     // KV bytes read per second
  // One token of one sequence over timing_sizes(device).latency_context tokens: the short decode
  // step of a lightly loaded server, where a kernel's launch and split/merge latency decide.
  double decode_latency_tokens_per_s = 0;
  int64_t peak_rss_bytes = 0;
  std::string error;                 // exception text when the check could not run
};
nlohmann::json to_json(const CheckReport& report);
CheckReport check_report_from_json(const nlohmann::json& j);

// Sizes of the timing runs: one causal prefill of prefill_tokens new tokens, one decode step of
// decode_batch sequences over decode_context tokens each (CUDA: large enough that a launch runs
// well past its overhead, ~270 MB of KV for 8 KV heads x 128 bf16), and one decode step of a
// single sequence over latency_context tokens (the batch-1 step, where on an H200 cuda_flash's
// 13 us per layer beat cudnn_sdpa's ~19 us although cudnn_sdpa read the large step's KV 10%
// faster: bench/results/2026-12-01-h200-e2e.md, run -7). CPU: small, so the child stays under
// 256 MiB for any model.
struct TimingSizes {
  int prefill_tokens;
  int decode_batch;
  int decode_context;
  int latency_context;
};
inline constexpr TimingSizes kCpuTimingSizes{256, 8, 1024, 256};
inline constexpr TimingSizes kCudaTimingSizes{2048, 16, 4096, 512};

// The decode speed selection compares: the geometric mean of the large step's and the batch-1
// step's tokens per second (each backend judged by both; neither shape's absolute scale wins),
// or the large step's alone where the report has no latency timing.
double decode_selection_speed(const CheckReport& report);
inline constexpr TimingSizes timing_sizes(Device device) {
  return device == Device::kCuda ? kCudaTimingSizes : kCpuTimingSizes;
}

// Runs the check in this process (the child's job; tests call it directly too).
CheckReport run_backend_check(const std::string& backend, const AttentionShape& shape, bool timing);

struct ValidationOutcome {
  CheckStatus status = CheckStatus::kError;  // util/check_status.h
  std::string detail;   // why it was rejected ("crashed with SIGSEGV", "max abs error 0.5 > 0.015")
  CheckReport report;   // what the child reported (empty on crash or timeout)
};
nlohmann::json to_json(const ValidationOutcome& outcome);
ValidationOutcome validation_outcome_from_json(const nlohmann::json& j);

struct ChildOptions {
  std::string executable;      // the spindle binary; empty: /proc/self/exe
  double timeout_s = 30.0;
  bool timing = true;
  int cuda_device = -1;        // >= 0: the child binds this CUDA device before anything else
};

// Spawns `executable __check-attention ...` (fork+exec via posix_spawn, nothing forked after
// initialisation), waits at most timeout_s, and classifies the result. The child inherits the
// environment and gets switch_arguments(switches()) (util/switches.h) on its command line.
ValidationOutcome validate_in_child(const std::string& backend, const AttentionShape& shape,
                                    const ChildOptions& options);

// The child side: binds cuda_device when >= 0 (its first CUDA call), runs run_backend_check,
// prints the JSON line, returns the exit code (0 pass, 1 mismatch, 2 error).
int check_attention_child_main(const std::string& backend, const AttentionShape& shape, bool timing,
                               int cuda_device = -1);

}  // namespace spindle::attn
