// Choosing the attention backends, prefill and decode separately (DESIGN.md section 2).
//
//  1. An explicit name for a phase wins; if it is unavailable or fails validation, start-up stops
//     with the reason.
//  2. `auto`: every registered backend of the device and phase with no unsupported reasons is
//     validated (in a child process, through the BackendValidator) on the model's shape.
//  3. Policy `benchmark`: the fastest validated backend wins, speeds within kTieFraction count as a
//     tie and priority breaks it. Policy `priority`: the highest-priority validated backend wins.
//  4. If nothing but `reference` validates, `reference` is chosen with a loud warning.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "attn/select/validation.h"
#include "platform/device_info.h"

namespace spindle::attn {

enum class BackendPolicy { kBenchmark, kPriority };
std::string_view policy_name(BackendPolicy policy);
BackendPolicy parse_policy(std::string_view name);  // throws naming the accepted values

inline constexpr double kTieFraction = 0.03;

struct AttentionSelectionOptions {
  std::string attention_backend = "auto";          // both phases
  std::string prefill_attention_backend = "auto";  // overrides attention_backend for prefill
  std::string decode_attention_backend = "auto";   // overrides attention_backend for decode
  BackendPolicy policy = BackendPolicy::kBenchmark;
  bool skip_validation = false;
  attn::Device device = attn::Device::kCpu;
};

// Validates (and, when timing, times) one backend on a shape. The real one spawns a child.
using BackendValidator =
    std::function<attn::ValidationOutcome(const std::string& backend, const attn::AttentionShape&, bool timing)>;

// One row per registered backend and phase, as `spindle doctor` prints it.
struct BackendRow {
  std::string backend;
  attn::Phase phase = attn::Phase::kPrefill;
  int priority = 0;
  std::vector<std::string> unsupported_reasons;   // empty: available
  std::optional<attn::ValidationOutcome> validation;  // absent when not validated
  double speed = 0;          // tokens/s in this phase (0 when not timed)
  bool chosen = false;
  std::string why;           // why chosen, or why not
};

struct AttentionSelection {
  std::string prefill_backend;
  std::string decode_backend;
  std::vector<BackendRow> rows;
  std::vector<std::string> warnings;
  bool from_cache = false;
};

AttentionSelection select_attention_backends(const DeviceInfo& device, const attn::AttentionShape& shape,
                                             const AttentionSelectionOptions& options,
                                             const BackendValidator& validate,
                                             const attn::AttentionRegistry& registry = attn::attention_registry());

nlohmann::json to_json(const AttentionSelection& selection);

}  // namespace spindle::attn
