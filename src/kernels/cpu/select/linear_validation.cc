// The parent side of linear validation: the child process (validate_linear_in_child) and the
// on-disk cache of its outcomes (LinearSelectionCache). See linear_selection.h.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

#include "kernels/cpu/select/linear_selection.h"
#include "util/cache_file.h"
#include "util/child_process.h"
#include "util/error.h"
#include "util/switches.h"

namespace spindle::kernels::cpu {
namespace {

std::vector<std::string> child_arguments(const std::string& executable, const std::string& kernel,
                                         const std::vector<LinearShape>& shapes, const std::vector<int64_t>& rows,
                                         bool bf16_activations) {
  std::vector<std::string> args = {executable, "__check-linear", "--kernel", kernel};
  for (const auto& s : shapes) {
    args.push_back("--shape");
    args.push_back(s.to_string());
  }
  if (!rows.empty()) {
    args.push_back("--timing-rows");
    args.push_back(fmt::format("{}", fmt::join(rows, ",")));
  }
  if (bf16_activations) args.push_back("--bf16-activations");
  // The registry's non-default values (SPINDLE_LINEAR_FAULT set by a test in this process too).
  for (std::string& a : switch_arguments(switches())) args.push_back(std::move(a));
  return args;
}

LinearOutcome classify(const LinearShapeReport& r) {
  LinearOutcome o{CheckStatus::kPass, "", r};
  if (!r.error.empty()) {
    o.status = CheckStatus::kError;
    o.detail = r.error;
  } else if (!r.passed) {
    o.status = CheckStatus::kMismatch;
    o.detail = fmt::format("max error {:.3g} x sum|x w| > tolerance {:.3g}", r.max_error, r.tolerance);
  } else {
    o.detail = fmt::format("max error {:.3g} x sum|x w| <= {:.3g}", r.max_error, r.tolerance);
  }
  return o;
}

}  // namespace

double shape_timeout_s(const LinearShape& shape, double base_s) {
  const double weights = double(shape.out_features) * double(shape.in_features);
  return base_s * std::max(1.0, weights / kTimeoutReferenceWeights);
}

std::map<LinearShape, LinearOutcome> validate_linear_in_child(const std::string& kernel,
                                                              const std::vector<LinearShape>& shapes,
                                                              const std::vector<int64_t>& timing_rows,
                                                              const LinearChildOptions& options) {
  const std::string executable = options.executable.empty() ? "/proc/self/exe" : options.executable;
  double timeout = 0;
  for (const LinearShape& s : shapes) timeout += shape_timeout_s(s, options.timeout_s);
  timeout = std::max(timeout, options.timeout_s);
  const ChildRun run = run_child_process(
      child_arguments(executable, kernel, shapes, timing_rows, options.allow_bf16_activations), timeout);
  LinearCheckReport report;
  const auto parse = [](const std::string& line) { return linear_check_report_from_json(nlohmann::json::parse(line)); };
  const std::optional<CheckVerdict> failed = read_child_report(run, timeout, parse, report);
  std::map<LinearShape, LinearOutcome> out;
  for (const LinearShape& s : shapes) {
    LinearOutcome o;
    if (failed) {
      o = {failed->status, failed->detail, {}};
      o.report.shape = s.to_string();
    } else {
      o = {CheckStatus::kError, "the child did not report this shape", {}};
      for (const auto& r : report.shapes) {
        if (r.shape == s.to_string()) o = classify(r);
      }
    }
    out[s] = o;
  }
  return out;
}

// ---- LinearSelectionCache ----------------------------------------------------------------------

LinearSelectionCache::LinearSelectionCache(std::filesystem::path dir, std::string key_prefix)
    : dir_(std::move(dir)), key_prefix_(std::move(key_prefix)) {}

std::string LinearSelectionCache::make_key(std::string_view build_id, std::string_view device_fingerprint,
                                           const LinearSelectionOptions& o) {
  // (An injected fault is part of what was measured: tests' outcomes never answer a clean start.)
  const std::string& fault = switches().linear_fault;
  return fmt::format("build={};device={};bf16_activations={};decode_rows={};prefill_rows={}{}", build_id,
                     device_fingerprint, o.linear.allow_bf16_activations, fmt::join(o.decode_rows, ","), o.prefill_rows,
                     fault.empty() ? "" : ";fault=" + fault);
}

std::filesystem::path LinearSelectionCache::path_for(const LinearShape& shape) const {
  return dir_ / fmt::format("linear-{:016x}.json", fnv1a_64(key_prefix_ + ";shape=" + shape.to_string()));
}

std::map<std::string, LinearOutcome>& LinearSelectionCache::outcomes(const LinearShape& shape) {
  if (auto it = loaded_.find(shape); it != loaded_.end()) return it->second;
  auto& map = loaded_[shape];
  const bool usable = read_keyed_outcomes(path_for(shape), key_prefix_ + ";shape=" + shape.to_string(),
                                          "linear kernel cache", [&](const std::string& name, const nlohmann::json& o) {
                                            map[name] = linear_outcome_from_json(o);
                                          });
  if (!usable) map.clear();
  return map;
}

void LinearSelectionCache::save(const LinearShape& shape) {
  nlohmann::json outcomes_json = nlohmann::json::object();
  for (const auto& [name, o] : outcomes(shape)) outcomes_json[name] = to_json(o);
  write_keyed_outcomes(path_for(shape), key_prefix_ + ";shape=" + shape.to_string(), outcomes_json,
                       "linear kernel cache");
}

LinearValidator LinearSelectionCache::wrap(LinearValidator inner) {
  return [this, inner = std::move(inner)](const std::string& kernel, const std::vector<LinearShape>& shapes,
                                          const std::vector<int64_t>& rows) {
    std::map<LinearShape, LinearOutcome> out;
    std::vector<LinearShape> missing;
    for (const LinearShape& s : shapes) {
      auto& cached = outcomes(s);
      auto it = cached.find(kernel);
      // A pass must carry every timing asked for.
      const bool usable = it != cached.end() &&
                          (it->second.status != CheckStatus::kPass ||
                           std::all_of(rows.begin(), rows.end(), [&](int64_t r) { return it->second.report.seconds_at(r) > 0; }));
      if (usable) {
        out[s] = it->second;
        ++num_hits_;
      } else {
        missing.push_back(s);
        ++num_misses_;
      }
    }
    if (missing.empty()) return out;
    for (auto& [s, o] : inner(kernel, missing, rows)) {
      if (check_status_cacheable(o.status)) {
        outcomes(s)[kernel] = o;
        save(s);
      }
      out[s] = std::move(o);
    }
    return out;
  };
}

}  // namespace spindle::kernels::cpu
