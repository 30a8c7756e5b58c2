#include "kernels/cpu/select/linear_selection.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "util/error.h"

namespace spindle::kernels::cpu {

LinearPolicy parse_linear_policy(std::string_view name) {
  if (name == "benchmark") return LinearPolicy::kBenchmark;
  if (name == "priority") return LinearPolicy::kPriority;
  SPINDLE_FAIL("unknown linear kernel policy '{}' (benchmark, priority)", name);
}

LinearSelectionOptions linear_rows_for(int64_t max_batch, int64_t max_batched_tokens, LinearSelectionOptions o) {
  o.decode_rows.clear();
  const int64_t top = std::clamp<int64_t>(max_batch, 1, kLinearDecodeMaxRows);
  for (int64_t r = 1; r <= top; r *= 2) o.decode_rows.push_back(r);
  if (o.decode_rows.back() != top) o.decode_rows.push_back(top);
  o.prefill_rows = std::clamp<int64_t>(max_batched_tokens, kLinearDecodeMaxRows + 1, 512);
  return o;
}

nlohmann::json to_json(const LinearOutcome& o) {
  return {{"status", check_status_name(o.status)}, {"detail", o.detail}, {"report", to_json(o.report)}};
}

LinearOutcome linear_outcome_from_json(const nlohmann::json& j) {
  return {check_status_from_name(j.at("status").get<std::string>()), j.at("detail").get<std::string>(),
          linear_shape_report_from_json(j.at("report"))};
}

const std::vector<LinearRowChoice>* LinearSelection::find(const LinearShape& shape) const {
  for (const auto& c : choices) {
    if (c.shape == shape) return &c.table;
  }
  return nullptr;
}

nlohmann::json to_json(const LinearSelection& s) {
  nlohmann::json choices = nlohmann::json::array(), rows = nlohmann::json::array();
  for (const auto& c : s.choices) {
    nlohmann::json table = nlohmann::json::array();
    for (const auto& e : c.table) table.push_back({{"min_rows", e.min_rows}, {"kernel", e.kernel}});
    choices.push_back({{"shape", c.shape.to_string()}, {"table", table}});
  }
  for (const auto& r : s.rows) {
    rows.push_back({{"kernel", r.kernel},
                    {"shape", r.shape.to_string()},
                    {"unsupported_reasons", r.unsupported_reasons},
                    {"outcome", r.outcome ? to_json(*r.outcome) : nlohmann::json(nullptr)},
                    {"chosen_rows", r.chosen_rows}});
  }
  return {{"decode_rows", s.decode_rows}, {"prefill_rows", s.prefill_rows}, {"from_cache", s.from_cache},
          {"choices", choices},           {"rows", rows}};
}

namespace {

bool wanted(const LinearSelectionOptions& o, const std::string& kernel) {
  auto wants = [&](const std::string& flag) { return flag == "auto" || flag == kernel; };
  return wants(o.decode_kernel) || wants(o.prefill_kernel);
}

// Every (kernel, shape) row with its reasons, then the validator's outcomes for the available ones.
std::vector<LinearKernelRow> validated_rows(const CpuInfo& cpu, const std::vector<LinearShape>& shapes,
                                            const LinearSelectionOptions& o, const LinearValidator& validate,
                                            const LinearRegistry& registry, const std::vector<int64_t>& timing_rows) {
  std::vector<LinearKernelRow> rows;
  for (const auto& d : registry.list()) {
    std::vector<LinearShape> runnable;
    const size_t first = rows.size();
    for (const LinearShape& shape : shapes) {
      rows.push_back({d.name, shape, d.unsupported_reasons(cpu, shape, o.linear), std::nullopt, {}});
      if (rows.back().unsupported_reasons.empty()) runnable.push_back(shape);
    }
    if (runnable.empty() || !wanted(o, d.name)) continue;
    std::map<LinearShape, LinearOutcome> outcomes;
    if (o.skip_validation) {
      for (const auto& s : runnable) outcomes[s] = {CheckStatus::kPass, "not validated (--skip-backend-validation)", {}};
    } else {
      outcomes = validate(d.name, runnable, timing_rows);
    }
    for (size_t i = first; i < rows.size(); ++i) {
      if (auto it = outcomes.find(rows[i].shape); it != outcomes.end()) rows[i].outcome = it->second;
    }
  }
  return rows;
}

bool passed(const LinearKernelRow& r) { return r.outcome && r.outcome->status == CheckStatus::kPass; }

// The winner among `shape`'s passed rows for `rows` rows (decode or prefill class), or null.
// `keep` (the previous decode row count's winner) counts kLinearKeepFraction faster than timed.
LinearKernelRow* choose(std::vector<LinearKernelRow>& all, const LinearShape& shape, const std::string& flag,
                        int64_t rows, bool decode, const LinearRegistry& registry, const std::string& keep = "") {
  LinearKernelRow* best = nullptr;
  double best_s = 0;
  int best_p = 0;
  for (LinearKernelRow& r : all) {
    if (r.shape != shape || !passed(r) || (flag != "auto" && flag != r.kernel)) continue;
    const LinearKernelDescriptor& d = registry.get(r.kernel);
    if (decode && !d.row_independent) continue;  // see LinearKernelDescriptor::row_independent
    const int p = decode ? d.decode_priority : d.prefill_priority;
    const double s = r.outcome->report.seconds_at(rows) * (r.kernel == keep ? 1 - kLinearKeepFraction : 1.0);
    bool better = best == nullptr;
    if (!better && s > 0 && best_s > 0) {
      better = s < best_s * (1 - kLinearTieFraction) || (s <= best_s * (1 + kLinearTieFraction) && p > best_p);
    } else if (!better) {
      better = p > best_p;  // untimed (priority policy): priority alone
    }
    if (better) {
      best = &r;
      best_s = s;
      best_p = p;
    }
  }
  return best;
}

// Why an explicit kernel cannot serve `shape` (reasons, or its validation), for the error.
std::string explicit_failure(const std::vector<LinearKernelRow>& all, const LinearShape& shape, const std::string& name) {
  for (const auto& r : all) {
    if (r.kernel != name || r.shape != shape) continue;
    if (!r.unsupported_reasons.empty()) return fmt::format("{}", fmt::join(r.unsupported_reasons, "; "));
    if (r.outcome) return fmt::format("validation {}: {}", check_status_name(r.outcome->status), r.outcome->detail);
  }
  return "not validated";
}

LinearShapeChoice choose_for_shape(std::vector<LinearKernelRow>& all, const LinearShape& shape,
                                   const LinearSelectionOptions& o, const LinearRegistry& registry) {
  LinearShapeChoice c{shape, {}};
  auto pick = [&](const std::string& flag, int64_t rows, bool decode) -> std::string {
    const std::string keep = decode && !c.table.empty() ? c.table.back().kernel : "";
    LinearKernelRow* r = choose(all, shape, flag, rows, decode, registry, keep);
    SPINDLE_CHECK(flag == "auto" || r != nullptr, "linear kernel '{}' ({} rows) cannot run {}: {}", flag,
                  decode ? "decode" : "prefill", shape.to_string(), explicit_failure(all, shape, flag));
    SPINDLE_CHECK(r != nullptr, "no linear kernel passed validation for {} on this CPU", shape.to_string());
    r->chosen_rows.push_back(rows);
    return r->kernel;
  };
  for (const int64_t rows : o.decode_rows) {
    const std::string k = pick(o.decode_kernel, rows, true);
    if (c.table.empty() || c.table.back().kernel != k) c.table.push_back({rows == o.decode_rows.front() ? 1 : rows, k});
  }
  const std::string k = pick(o.prefill_kernel, o.prefill_rows, false);
  if (c.table.back().kernel != k) c.table.push_back({o.decode_rows.back() + 1, k});
  return c;
}

}  // namespace

LinearSelection select_linear_kernels(const CpuInfo& cpu, const std::vector<LinearShape>& shapes,
                                      const LinearSelectionOptions& o, const LinearValidator& validate,
                                      const LinearRegistry& registry) {
  for (const std::string* flag : {&o.decode_kernel, &o.prefill_kernel}) {
    if (*flag != "auto") registry.get(*flag);  // an unknown name lists the registered ones
  }
  SPINDLE_CHECK(o.decode_kernel == "auto" || registry.get(o.decode_kernel).row_independent,
                "linear kernel '{}' cannot serve decode rows: its rows depend on the row count, so a speculative "
                "verify would differ from plain decoding (name it with --prefill-linear-kernel)",
                o.decode_kernel);
  SPINDLE_CHECK(!o.decode_rows.empty() && o.decode_rows.front() == 1 &&
                    std::is_sorted(o.decode_rows.begin(), o.decode_rows.end()) &&
                    o.decode_rows.back() < o.prefill_rows,
                "linear selection rows: decode rows must start at 1, ascend and stay below the prefill rows");
  LinearSelection s;
  s.decode_rows = o.decode_rows;
  s.prefill_rows = o.prefill_rows;
  std::vector<int64_t> timing_rows;
  // Timed only when there is a choice to make: with both classes named, nothing is timed.
  const bool both_named = o.decode_kernel != "auto" && o.prefill_kernel != "auto";
  if (o.policy == LinearPolicy::kBenchmark && !both_named) {
    timing_rows = o.decode_rows;
    timing_rows.push_back(o.prefill_rows);
  }
  s.rows = validated_rows(cpu, shapes, o, validate, registry, timing_rows);
  for (const LinearShape& shape : shapes) s.choices.push_back(choose_for_shape(s.rows, shape, o, registry));
  return s;
}

}  // namespace spindle::kernels::cpu
