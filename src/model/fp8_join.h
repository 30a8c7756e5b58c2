// Joining FP8 linear weights that share their input (q | k | v, gate | up) into one weight whose
// rows are the parts' rows back to back, as a device does with 16-bit ones (one product, one
// launch): which parts may join and the joined weight's scales. No device code: CudaOps
// (cuda_ops_fp8.cc) places the joined codes and these scales; tests/model/fp8_join_test.cc holds
// every rule.
//
// Rules (parts p_0 .. p_{n-1}, each [rows_j, cols] e4m3 with its scales in one Fp8ScaleMode):
//   every part the same cols (the shared input) and the same mode, else not joined;
//   kPerChannel  scales concatenated: [sum rows_j];
//   kPerTensor   all scalars equal: one per-tensor scale; else per-channel, each part's scalar
//                repeated over its rows (dequant(W)[o, i] unchanged for every o);
//   kBlock128    the block-scale rows [ceil(rows_j / 128), ceil(cols / 128)] concatenated, which is
//                the joined weight's block layout only when no block straddles two parts: every part
//                but the LAST has rows_j % 128 == 0 (the last part's partial edge block stays the
//                joined weight's edge block), else not joined;
//   a static activation scale (compressed-tensors / "fp8" activation_scheme static, X.input_scale):
//                all parts without one, or all with the same value (kept), else not joined — a
//                joined product quantizes its one input once, with one scale, so parts calibrated
//                to different activation scales cannot share it. (Spindle's products today quantize
//                activations dynamically and do not read it; the rule keeps a static path honest.)
// Not joined is an answer (why_not), not an error: the caller places the parts one by one.
// A part whose scale count does not fit its shape and mode throws naming it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/fp8_config.h"

namespace spindle {

struct Fp8JoinPart {
  std::string_view name;  // for messages
  int64_t rows = 0;
  int64_t cols = 0;
  Fp8ScaleMode mode = Fp8ScaleMode::kPerTensor;
  std::span<const float> scales;      // fp8_scale_count(mode, rows, cols) floats
  std::optional<float> input_scale;   // a static activation scale, when the checkpoint has one
};

struct Fp8JoinedScales {
  std::string why_not;  // empty: joined (the fields below describe the joined weight)
  Fp8ScaleMode mode = Fp8ScaleMode::kPerTensor;
  int64_t rows = 0;  // sum of the parts' rows
  int64_t cols = 0;
  std::vector<float> scales;  // fp8_scale_count(mode, rows, cols) floats
  std::optional<float> input_scale;
  bool joined() const { return why_not.empty(); }
};

// The joined weight's scales (one part: its own, unchanged), or why_not. Throws for no parts or a
// part whose scales do not fit it.
Fp8JoinedScales join_fp8_scales(std::span<const Fp8JoinPart> parts);

}  // namespace spindle
