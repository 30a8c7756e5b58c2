// Proving a CPU linear kernel correct on a model's weight shapes and timing it: the child side of
// linear selection (`spindle __check-linear`, linear_selection.h spawns it), so that a kernel that
// dies (SIGILL of an instruction this CPU lacks) or answers wrong rejects only itself.
//
// Per shape the child makes random weights of that shape and dtype (uniform in [-1, 1], a random
// bias), runs the kernel on x of kCheckRows rows and compares each output element with a float64
// product over the same x (x rounded to bf16 for a kernel that rounds it; the int8 kernels will
// compare over the same per-block-quantized activations):
//   |y - ref| <= kLinearCheckTolerance * S,   S = sum_t |x[i, t] w[j, t]| + |bias[j]|
// (f32 accumulation of terms that are exact or rounded identically in both: tests/kernels/
// linear_test.cc states the same bound). The int8 kernels (quantized weights: random GGUF blocks
// repacked as the loader does, dequantized by gguf::dequantize_row) are compared with the float64
// product over the SAME per-block-quantized activations (quantize_activations' q * dx): their
// integer dots are exact and each block adds one or two f32-rounded terms to a running f32 sum, so
// |y - ref| <= 4 (k / 32 + 2) 2^-24 * S (quant_check_tolerance; tests/kernels/quant_linear_test.cc
// derives the same bound). Large shapes check a strided sample of the output columns
// (every column when out * in * rows <= kCheckFullMacs) plus the last 64, all rows.
// Then, when asked, it times forward() at each requested row count (best of repeats after a
// warm-up; prefill rows of a very large product on a leading part of W, scaled: linear_check.cc).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/cpu/linear_registry.h"

namespace spindle::kernels::cpu {

inline constexpr double kLinearCheckTolerance = 1e-5;
// 1 (a decode row), 5 (a 4 + 1 row split of the direct kernels), 67 (past the AMX kernel's 64-row group).
inline constexpr int64_t kCheckRows[] = {1, 5, 67};
inline constexpr int64_t kCheckFullMacs = int64_t{1} << 26;
inline double quant_check_tolerance(int64_t in_features) {
  return 4.0 * double(in_features / 32 + 2) * 0x1p-24;
}

struct LinearCheckRequest {
  std::string kernel;
  std::vector<LinearShape> shapes;
  std::vector<int64_t> timing_rows;  // empty: validate only
  bool allow_bf16_activations = false;
};

struct LinearShapeReport {
  std::string shape;  // LinearShape::to_string()
  bool passed = false;
  double max_error = 0;  // max over checked elements of |y - ref| / S
  double tolerance = kLinearCheckTolerance;
  // int8 kernels: max |y - ref| / S against the float64 product over the UNquantized activations
  // (the end-to-end error of quantizing x; informational, no bound). 0 for the other kernels.
  double end_to_end_error = 0;
  std::vector<std::pair<int64_t, double>> seconds;  // (rows, seconds per forward) when timed
  std::string error;     // exception text when the check could not run
  double seconds_at(int64_t rows) const;  // 0 when not timed at `rows`
};

struct LinearCheckReport {
  std::string kernel;
  std::vector<LinearShapeReport> shapes;
};

nlohmann::json to_json(const LinearShapeReport& report);
LinearShapeReport linear_shape_report_from_json(const nlohmann::json& j);
nlohmann::json to_json(const LinearCheckReport& report);
LinearCheckReport linear_check_report_from_json(const nlohmann::json& j);

// Runs the check in this process (the child's job; tests call it directly too).
LinearCheckReport run_linear_check(const LinearCheckRequest& request);
// The child: runs it, prints the JSON line, returns 0 (all passed), 1 (a mismatch) or 2 (an error).
int check_linear_child_main(const LinearCheckRequest& request);

}  // namespace spindle::kernels::cpu
