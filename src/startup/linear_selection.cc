#include "startup/linear_selection.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "platform/cpu_info.h"
#include "startup/workspace_cache.h"
#include "util/build_info.h"

namespace spindle::startup {

namespace kc = kernels::cpu;

std::vector<kc::LinearShape> model_linear_shapes(const ModelConfig& m) {
  const DType dtype = m.torch_dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
  const int64_t hidden = m.hidden_size;
  std::vector<kc::LinearShape> shapes = {
      {m.q_size(), hidden, dtype},                         // q_proj
      {m.kv_size(), hidden, dtype},                        // k_proj, v_proj
      {hidden, m.q_size(), dtype},                         // o_proj
      {2 * int64_t{m.intermediate_size}, hidden, dtype},   // gate_proj + up_proj, joined
      {hidden, m.intermediate_size, dtype},                // down_proj
      {m.vocab_size, hidden, dtype},                       // lm_head (or the tied embedding)
  };
  std::sort(shapes.begin(), shapes.end());
  shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
  return shapes;
}

LinearKernelChooser::LinearKernelChooser(const config::ResolvedConfig& config, const DeviceInfo& device,
                                         std::string executable)
    : config_(config), fingerprint_(cache_fingerprint(config, device)), executable_(std::move(executable)) {
  selection_.decode_rows = config.linear.decode_rows;
  selection_.prefill_rows = config.linear.prefill_rows;
}

void LinearKernelChooser::select(const std::vector<kc::LinearShape>& shapes) {
  std::vector<kc::LinearShape> fresh;
  for (const auto& s : shapes) {
    if (!selection_.find(s) && std::find(fresh.begin(), fresh.end(), s) == fresh.end()) fresh.push_back(s);
  }
  if (fresh.empty()) return;
  kc::LinearChildOptions child;
  child.executable = executable_;
  child.timeout_s = config_.backend_validation_timeout_s;
  child.allow_bf16_activations = config_.linear.linear.allow_bf16_activations;
  kc::LinearValidator validator = [child](const std::string& kernel, const std::vector<kc::LinearShape>& s,
                                          const std::vector<int64_t>& rows) {
    spdlog::info("validating linear kernel {} on {} shape(s){}", kernel, s.size(), rows.empty() ? "" : " (timed)");
    return kc::validate_linear_in_child(kernel, s, rows, child);
  };
  std::optional<kc::LinearSelectionCache> cache;
  if (config_.use_backend_cache) {
    cache.emplace(config_.backend_cache_dir, kc::LinearSelectionCache::make_key(build_id(), fingerprint_, config_.linear));
    validator = cache->wrap(std::move(validator));
  }
  kc::LinearSelection s = kc::select_linear_kernels(detect_cpu_info(), fresh, config_.linear, validator);
  for (const std::string& line : describe_linear_choices(s)) spdlog::info("linear kernels for {}", line);
  const bool all_cached = cache && cache->num_misses() == 0;
  selection_.from_cache = (selection_.choices.empty() || selection_.from_cache) && all_cached;
  for (auto& c : s.choices) selection_.choices.push_back(std::move(c));
  for (auto& r : s.rows) selection_.rows.push_back(std::move(r));
}

std::unique_ptr<kc::LinearKernel> LinearKernelChooser::make(const kc::LinearWeight& weight) {
  std::lock_guard lock(mutex_);
  const kc::LinearShape shape = kc::linear_shape_of(weight);
  select({shape});
  return kc::make_row_table_linear(weight, *selection_.find(shape), config_.linear.linear);
}

ModelOptions::MakeLinear make_linear_with(std::shared_ptr<LinearKernelChooser> chooser) {
  return [chooser = std::move(chooser)](const kc::LinearWeight& w) { return chooser->make(w); };
}

std::vector<std::string> describe_linear_choices(const kc::LinearSelection& selection) {
  std::vector<std::string> lines;
  for (const auto& c : selection.choices) {
    std::vector<std::string> parts;
    for (const auto& e : c.table) parts.push_back(fmt::format("{} from {} rows", e.kernel, e.min_rows));
    lines.push_back(fmt::format("{}: {}", c.shape.to_string(), fmt::join(parts, ", ")));
  }
  return lines;
}

}  // namespace spindle::startup
