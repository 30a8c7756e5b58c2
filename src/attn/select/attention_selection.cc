#include "attn/select/attention_selection.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

#include "util/error.h"

namespace spindle::attn {

using attn::Phase;
using attn::ValidationOutcome;

std::string_view policy_name(BackendPolicy policy) {
  return policy == BackendPolicy::kBenchmark ? "benchmark" : "priority";
}

BackendPolicy parse_policy(std::string_view name) {
  if (name == "benchmark") return BackendPolicy::kBenchmark;
  if (name == "priority") return BackendPolicy::kPriority;
  SPINDLE_FAIL("--attention-backend-policy '{}' is not one of: benchmark, priority", name);
}

namespace {

double phase_speed(const ValidationOutcome& outcome, Phase phase) {
  return phase == Phase::kPrefill ? outcome.report.prefill_tokens_per_s : decode_selection_speed(outcome.report);
}

// The explicit backend named for a phase, or "" for auto; plus the flag that named it.
std::pair<std::string, std::string> explicit_choice(const AttentionSelectionOptions& o, Phase phase) {
  const std::string& specific = phase == Phase::kPrefill ? o.prefill_attention_backend : o.decode_attention_backend;
  if (!specific.empty() && specific != "auto") {
    return {specific, phase == Phase::kPrefill ? "--prefill-attention-backend" : "--decode-attention-backend"};
  }
  if (!o.attention_backend.empty() && o.attention_backend != "auto") return {o.attention_backend, "--attention-backend"};
  return {"", ""};
}

class Selector {
 public:
  Selector(const DeviceInfo& device, const attn::AttentionShape& shape, const AttentionSelectionOptions& options,
           const BackendValidator& validate, const attn::AttentionRegistry& registry)
      : device_(device), shape_(shape), options_(options), validate_(validate), registry_(registry) {}

  AttentionSelection run() {
    for (const auto* d : registry_.list()) {
      if (d->device != options_.device) continue;
      const auto reasons = d->unsupported_reasons(device_, shape_);
      for (Phase phase : {Phase::kPrefill, Phase::kDecode}) {
        if (!attn::serves(d->phases, phase)) continue;
        BackendRow row;
        row.backend = d->name;
        row.phase = phase;
        row.priority = d->priority;
        row.unsupported_reasons = reasons;
        result_.rows.push_back(std::move(row));
      }
    }
    result_.prefill_backend = choose(Phase::kPrefill);
    result_.decode_backend = choose(Phase::kDecode);
    return std::move(result_);
  }

 private:
  const ValidationOutcome& outcome_of(const std::string& name) {
    auto it = outcomes_.find(name);
    if (it == outcomes_.end()) {
      it = outcomes_.emplace(name, validate_(name, shape_, options_.policy == BackendPolicy::kBenchmark)).first;
    }
    return it->second;
  }

  std::vector<BackendRow*> rows_for(Phase phase) {
    std::vector<BackendRow*> out;
    for (auto& row : result_.rows) {
      if (row.phase == phase) out.push_back(&row);
    }
    return out;
  }

  void record(BackendRow& row, const ValidationOutcome& outcome, Phase phase) {
    row.validation = outcome;
    row.speed = phase_speed(outcome, phase);
    if (outcome.status != CheckStatus::kPass) {
      row.why = fmt::format("rejected: {} ({})", check_status_name(outcome.status), outcome.detail);
    }
  }

  std::string choose(Phase phase) {
    const auto [name, flag] = explicit_choice(options_, phase);
    return name.empty() ? choose_auto(phase) : choose_explicit(phase, name, flag);
  }

  std::string choose_explicit(Phase phase, const std::string& name, const std::string& flag) {
    const auto& descriptor = registry_.get(name);  // unknown: lists every registered name
    SPINDLE_CHECK(descriptor.device == options_.device, "{} {}: a {} backend, but the device is {}", flag, name,
                  attn::device_name(descriptor.device), attn::device_name(options_.device));
    SPINDLE_CHECK(attn::serves(descriptor.phases, phase), "{} {}: it does not serve {}", flag, name,
                  attn::phase_name(phase));
    BackendRow* row = nullptr;
    for (auto* r : rows_for(phase)) {
      if (r->backend == name) row = r;
    }
    SPINDLE_CHECK(row->unsupported_reasons.empty(), "{} {} is unavailable here: {}", flag, name,
                  fmt::join(row->unsupported_reasons, "; "));
    if (!options_.skip_validation) {
      const auto& outcome = outcome_of(name);
      record(*row, outcome, phase);
      SPINDLE_CHECK(outcome.status == CheckStatus::kPass, "{} {} failed validation on {}: {}: {}", flag,
                    name, shape_.to_string(), check_status_name(outcome.status), outcome.detail);
    }
    row->chosen = true;
    row->why = fmt::format("explicit {}{}", flag, options_.skip_validation ? " (validation skipped)" : "");
    return name;
  }

  std::string choose_auto(Phase phase) {
    std::vector<BackendRow*> passed;
    int num_available = 0;
    for (auto* row : rows_for(phase)) {
      if (!row->unsupported_reasons.empty()) {
        row->why = "unavailable";
        continue;
      }
      ++num_available;
      if (options_.skip_validation) {
        passed.push_back(row);
        continue;
      }
      record(*row, outcome_of(row->backend), phase);
      if (row->validation->status == CheckStatus::kPass) passed.push_back(row);
    }
    SPINDLE_CHECK(!passed.empty(), "no {} attention backend is usable for {} ({} available, none passed validation)",
                  attn::phase_name(phase), shape_.to_string(), num_available);

    const bool by_speed = options_.policy == BackendPolicy::kBenchmark && !options_.skip_validation;
    double best_speed = 0;
    for (auto* row : passed) best_speed = std::max(best_speed, row->speed);
    BackendRow* best = nullptr;
    for (auto* row : passed) {
      const bool contender = !by_speed || row->speed >= best_speed * (1.0 - kTieFraction);
      if (contender && (best == nullptr || row->priority > best->priority)) best = row;
    }
    best->chosen = true;
    if (by_speed) {
      best->why = passed.size() == 1 ? "only validated backend" : fmt::format("fastest validated ({:.0f} tok/s)", best->speed);
    } else {
      best->why = options_.skip_validation ? "highest priority (validation skipped)" : "highest priority validated";
    }
    for (auto* row : passed) {
      if (row != best) row->why = by_speed ? "slower" : "lower priority";
    }
    if ((best->backend == "reference" || best->backend == "cuda_reference") && num_available > 1) {
      result_.warnings.push_back(fmt::format(
          "every optimized {} attention backend failed validation on {}; falling back to `{}`, "
          "which is correct but very slow",
          attn::phase_name(phase), shape_.to_string(), best->backend));
    }
    return best->backend;
  }

  const DeviceInfo& device_;
  const attn::AttentionShape& shape_;
  const AttentionSelectionOptions& options_;
  const BackendValidator& validate_;
  const attn::AttentionRegistry& registry_;
  std::map<std::string, ValidationOutcome> outcomes_;
  AttentionSelection result_;
};

}  // namespace

AttentionSelection select_attention_backends(const DeviceInfo& device, const attn::AttentionShape& shape,
                                             const AttentionSelectionOptions& options,
                                             const BackendValidator& validate,
                                             const attn::AttentionRegistry& registry) {
  return Selector(device, shape, options, validate, registry).run();
}

nlohmann::json to_json(const AttentionSelection& s) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : s.rows) {
    nlohmann::json row = {{"backend", r.backend},
                          {"phase", attn::phase_name(r.phase)},
                          {"priority", r.priority},
                          {"available", r.unsupported_reasons.empty()},
                          {"unsupported_reasons", r.unsupported_reasons},
                          {"speed_tokens_per_s", r.speed},
                          {"chosen", r.chosen},
                          {"why", r.why}};
    row["validation"] = r.validation ? attn::to_json(*r.validation) : nlohmann::json(nullptr);
    rows.push_back(std::move(row));
  }
  return {{"prefill_backend", s.prefill_backend},
          {"decode_backend", s.decode_backend},
          {"from_cache", s.from_cache},
          {"warnings", s.warnings},
          {"rows", rows}};
}

}  // namespace spindle::attn
