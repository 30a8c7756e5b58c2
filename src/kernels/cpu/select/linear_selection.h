// Choosing the CPU linear kernels per weight shape and row class (DESIGN.md section 7), the way
// attn/select chooses attention backends:
//  1. Every registered kernel (linear_registry.h) with no unsupported reasons for a shape is
//     validated on that shape in a child process (`spindle __check-linear`, linear_check.h): a
//     crash (SIGILL), a hang or a wrong answer rejects it; the parent survives.
//  2. Policy `benchmark`: each validated kernel is timed at every decode row count
//     (LinearSelectionOptions::decode_rows) and at the prefill row count; at each, the fastest
//     wins (within kLinearTieFraction, priority breaks the tie; at a decode row count the previous
//     count's winner stays unless another is kLinearKeepFraction faster, so timing noise on a busy
//     machine does not make the table switch kernels back and forth). Policy `priority`: no
//     timing, the highest decode / prefill priority wins.
//  3. The outcome per shape is a row table (make_row_table_linear): the decode rows' choices from
//     their row counts up (a count between two measured ones takes the lower one's kernel), the
//     prefill choice above the largest decode row count. A speculative verify chooses by its number
//     of sequences (CpuOps::linear_choose_rows), so its rows get a decode step's kernel.
//  4. Explicit names win for their row class (--linear-kernel, --decode-linear-kernel,
//     --prefill-linear-kernel); one that is unknown, unavailable or fails validation stops start-up
//     with the reason.
//  5. The validator is cached on disk per shape (LinearSelectionCache), keyed like the attention
//     cache (build id, device fingerprint) plus the shape, the activation precision and the rows.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/cpu/linear_registry.h"
#include "kernels/cpu/select/linear_check.h"
#include "util/check_status.h"

namespace spindle {
struct CpuInfo;
}

namespace spindle::kernels::cpu {

inline constexpr double kLinearTieFraction = 0.03;
// On the 2-core dev VM at load 16 the same product's time varied by 10-40% between row counts
// (bench/results/2026-12-07-linear-registry-devvm-zen4, run 1).
inline constexpr double kLinearKeepFraction = 0.10;

enum class LinearPolicy { kBenchmark, kPriority };
LinearPolicy parse_linear_policy(std::string_view name);  // throws naming benchmark, priority

struct LinearSelectionOptions {
  std::string decode_kernel = "auto";   // a registered name or auto
  std::string prefill_kernel = "auto";
  LinearPolicy policy = LinearPolicy::kBenchmark;
  bool skip_validation = false;         // trust every available kernel (no children)
  LinearOptions linear;                 // allow_bf16_activations
  std::vector<int64_t> decode_rows = {1, 2, 4, 8, 16, 32, 64};  // ascending, first 1, last <= kLinearDecodeMaxRows
  int64_t prefill_rows = 512;
};
// decode rows 1, 2, 4, ... up to min(max_batch, kLinearDecodeMaxRows); prefill min(512, max_batched_tokens).
LinearSelectionOptions linear_rows_for(int64_t max_batch, int64_t max_batched_tokens, LinearSelectionOptions options);

struct LinearOutcome {
  CheckStatus status = CheckStatus::kError;  // util/check_status.h
  std::string detail;        // why rejected, or the error that passed
  LinearShapeReport report;  // the child's report for this shape (empty on crash or timeout)
};
nlohmann::json to_json(const LinearOutcome& outcome);
LinearOutcome linear_outcome_from_json(const nlohmann::json& j);

// Validates (and times at timing_rows, when not empty) one kernel on shapes; one outcome per shape.
using LinearValidator = std::function<std::map<LinearShape, LinearOutcome>(
    const std::string& kernel, const std::vector<LinearShape>& shapes, const std::vector<int64_t>& timing_rows)>;

// One row per kernel and shape, as `spindle doctor` prints it.
struct LinearKernelRow {
  std::string kernel;
  LinearShape shape;
  std::vector<std::string> unsupported_reasons;  // empty: available
  std::optional<LinearOutcome> outcome;          // absent when not validated
  std::vector<int64_t> chosen_rows;              // the row counts (decode ones, then prefill) it won
};

struct LinearShapeChoice {
  LinearShape shape;
  std::vector<LinearRowChoice> table;
};

struct LinearSelection {
  std::vector<LinearShapeChoice> choices;
  std::vector<LinearKernelRow> rows;
  std::vector<int64_t> decode_rows;
  int64_t prefill_rows = 0;
  bool from_cache = false;
  const std::vector<LinearRowChoice>* find(const LinearShape& shape) const;  // null when not selected
};
nlohmann::json to_json(const LinearSelection& selection);

// Throws when an explicit kernel is unknown / unavailable / rejected, or nothing runs a shape.
LinearSelection select_linear_kernels(const CpuInfo& cpu, const std::vector<LinearShape>& shapes,
                                      const LinearSelectionOptions& options, const LinearValidator& validate,
                                      const LinearRegistry& registry = linear_registry());

struct LinearChildOptions {
  std::string executable;  // the spindle binary; empty: /proc/self/exe
  double timeout_s = 30.0;  // per shape of up to kTimeoutReferenceWeights weights (shape_timeout_s)
  bool allow_bf16_activations = false;
};
// The time a child may take for one shape: base_s for up to kTimeoutReferenceWeights weights (the
// 1B shape's gate/up, 8192 x 2048), proportionally more above (an LM head of 128256 x 2048: 15.7x),
// since its check and its timings do work proportional to the weights. The limit catches a hung
// child; on a loaded machine a fixed one also killed healthy children of large shapes.
inline constexpr double kTimeoutReferenceWeights = 8192.0 * 2048.0;
double shape_timeout_s(const LinearShape& shape, double base_s);
// Spawns `executable __check-linear ...` (util/child_process.h) and classifies its answer per shape.
std::map<LinearShape, LinearOutcome> validate_linear_in_child(const std::string& kernel,
                                                              const std::vector<LinearShape>& shapes,
                                                              const std::vector<int64_t>& timing_rows,
                                                              const LinearChildOptions& options);

// On-disk outcomes, one JSON file per shape (<dir>/linear-<hash of key>.json); pass, mismatch and
// crash are kept, timeouts and errors (often transient) are not. A corrupt or foreign file is
// ignored with a warning and rewritten.
class LinearSelectionCache {
 public:
  // key_prefix: build id, device fingerprint, activation precision, rows (make_key).
  LinearSelectionCache(std::filesystem::path dir, std::string key_prefix);
  static std::string make_key(std::string_view build_id, std::string_view device_fingerprint,
                              const LinearSelectionOptions& options);
  std::filesystem::path path_for(const LinearShape& shape) const;
  // Answers from the files where it can, asks `inner` for the rest, saves what it learnt.
  LinearValidator wrap(LinearValidator inner);
  int num_hits() const { return num_hits_; }
  int num_misses() const { return num_misses_; }

 private:
  std::map<std::string, LinearOutcome>& outcomes(const LinearShape& shape);
  void save(const LinearShape& shape);

  std::filesystem::path dir_;
  std::string key_prefix_;
  std::map<LinearShape, std::map<std::string, LinearOutcome>> loaded_;
  int num_hits_ = 0;
  int num_misses_ = 0;
};

}  // namespace spindle::kernels::cpu
