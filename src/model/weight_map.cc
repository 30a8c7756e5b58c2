#include "model/weight_map.h"

#include "model/kv_scale_tensors.h"

#include <fmt/format.h>

#include <unordered_map>

#include "model/fp8_weights.h"
#include "util/error.h"

namespace spindle {
namespace {

constexpr std::string_view kIgnoredSuffix = ".rotary_emb.inv_freq";

bool is_float_weight(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

void append_capped(std::string& out, std::string_view title, const std::vector<std::string>& lines,
                   size_t max_listed) {
  if (lines.empty()) return;
  out += fmt::format("\n  {} ({}):", title, lines.size());
  for (size_t i = 0; i < lines.size() && i < max_listed; ++i) out += "\n    " + lines[i];
  if (lines.size() > max_listed) out += fmt::format("\n    and {} more", lines.size() - max_listed);
}

}  // namespace

std::string format_shape(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string layer_weight_name(int layer, std::string_view suffix) {
  return fmt::format("model.layers.{}.{}", layer, suffix);
}

namespace {

// The attention tensors and norms of decoder layer `layer`.
std::vector<ExpectedTensor> attention_tensors(const ModelConfig& c, int layer) {
  const int64_t h = c.hidden_size;
  const int64_t q = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
  const int64_t kv = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
  std::vector<ExpectedTensor> out;
  auto add = [&](std::string_view suffix, std::vector<int64_t> shape) {
    out.push_back({layer_weight_name(layer, suffix), std::move(shape)});
  };
  add("input_layernorm.weight", {h});
  add("self_attn.q_proj.weight", {q, h});
  add("self_attn.k_proj.weight", {kv, h});
  add("self_attn.v_proj.weight", {kv, h});
  if (c.attention_bias) {
    add("self_attn.q_proj.bias", {q});
    add("self_attn.k_proj.bias", {kv});
    add("self_attn.v_proj.bias", {kv});
  }
  add("self_attn.o_proj.weight", {h, q});
  if (c.qk_norm) {
    add("self_attn.q_norm.weight", {c.head_dim});
    add("self_attn.k_norm.weight", {c.head_dim});
  }
  add("post_attention_layernorm.weight", {h});
  return out;
}

// The MLP tensors of layer `layer`: the dense MLP, or a sparse layer's router, experts (all of
// them, or the first `experts` when counting active parameters) and shared expert.
std::vector<ExpectedTensor> mlp_tensors(const ModelConfig& c, int layer, ExpertLayout layout, int experts) {
  const int64_t h = c.hidden_size;
  std::vector<ExpectedTensor> out;
  if (!c.is_moe_layer(layer)) {
    const int64_t inter = c.intermediate_size;
    out.push_back({layer_weight_name(layer, "mlp.gate_proj.weight"), {inter, h}});
    out.push_back({layer_weight_name(layer, "mlp.up_proj.weight"), {inter, h}});
    out.push_back({layer_weight_name(layer, "mlp.down_proj.weight"), {h, inter}});
    return out;
  }
  const MoeLayerNames n = moe_layer_names(c, layout, layer);
  const int64_t f = c.moe.moe_intermediate_size;
  out.push_back({n.router, {c.moe.num_experts, h}});
  if (layout == ExpertLayout::kFused3d && experts == c.moe.num_experts) {
    out.push_back({n.gate_up, {experts, 2 * f, h}});
    out.push_back({n.down, {experts, h, f}});
  } else {
    for (int e = 0; e < experts; ++e) {
      out.push_back({n.expert_gate(e), {f, h}});
      out.push_back({n.expert_up(e), {f, h}});
      out.push_back({n.expert_down(e), {h, f}});
    }
  }
  if (const int64_t s = c.moe.shared_expert_intermediate_size; s > 0) {
    out.push_back({n.shared_gate, {s, h}});
    out.push_back({n.shared_up, {s, h}});
    out.push_back({n.shared_down, {h, s}});
    out.push_back({n.shared_expert_gate, {1, h}});
  }
  return out;
}

// The tensors of decoder layer `layer`.
std::vector<ExpectedTensor> layer_tensors(const ModelConfig& c, int layer, ExpertLayout layout) {
  auto out = attention_tensors(c, layer);
  for (auto& t : mlp_tensors(c, layer, layout, c.moe.num_experts)) out.push_back(std::move(t));
  return out;
}

// The tensors outside the decoder layers: embed_tokens, norm, lm_head.
std::vector<ExpectedTensor> outer_tensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  return {{"model.embed_tokens.weight", {c.vocab_size, h}},
          {"model.norm.weight", {h}},
          {"lm_head.weight", {c.vocab_size, h}, /*optional=*/c.tie_word_embeddings}};
}

// Sum of element counts of the non-optional tensors; throws on overflow.
uint64_t count_elements(const std::vector<ExpectedTensor>& tensors) {
  uint64_t total = 0;
  for (const auto& t : tensors) {
    if (t.optional) continue;
    uint64_t n = 1;
    bool overflow = false;
    for (const int64_t dim : t.shape) {
      overflow = overflow || __builtin_mul_overflow(n, static_cast<uint64_t>(dim), &n);
    }
    overflow = overflow || __builtin_add_overflow(total, n, &total);
    SPINDLE_CHECK(!overflow, "parameter count of the model overflows 64 bits");
  }
  return total;
}

}  // namespace

std::string MoeLayerNames::expert_gate(int e) const { return fmt::format("{}{}.{}.weight", expert_prefix, e, gate_name); }
std::string MoeLayerNames::expert_up(int e) const { return fmt::format("{}{}.{}.weight", expert_prefix, e, up_name); }
std::string MoeLayerNames::expert_down(int e) const { return fmt::format("{}{}.{}.weight", expert_prefix, e, down_name); }

MoeLayerNames moe_layer_names(const ModelConfig& c, ExpertLayout layout, int layer) {
  const bool mixtral_names = c.architecture == Architecture::kMixtral && layout == ExpertLayout::kPerExpert;
  const std::string prefix = layer_weight_name(layer, mixtral_names ? "block_sparse_moe." : "mlp.");
  MoeLayerNames n;
  n.router = prefix + "gate.weight";
  n.gate_up = prefix + "experts.gate_up_proj";
  n.down = prefix + "experts.down_proj";
  n.shared_gate = prefix + "shared_expert.gate_proj.weight";
  n.shared_up = prefix + "shared_expert.up_proj.weight";
  n.shared_down = prefix + "shared_expert.down_proj.weight";
  n.shared_expert_gate = prefix + "shared_expert_gate.weight";
  n.expert_prefix = prefix + "experts.";
  n.gate_name = mixtral_names ? "w1" : "gate_proj";
  n.up_name = mixtral_names ? "w3" : "up_proj";
  n.down_name = mixtral_names ? "w2" : "down_proj";
  return n;
}

ExpertLayout detect_expert_layout(const std::vector<TensorInfo>& tensors) {
  for (const auto& t : tensors) {
    if (ends_with(t.name, ".experts.gate_up_proj")) return ExpertLayout::kFused3d;
  }
  return ExpertLayout::kPerExpert;
}

std::string_view expert_layout_name(ExpertLayout layout) {
  return layout == ExpertLayout::kFused3d ? "fused 3-D" : "per-expert";
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c, ExpertLayout layout) {
  auto outer = outer_tensors(c);
  std::vector<ExpectedTensor> out;
  out.push_back(std::move(outer[0]));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    for (auto& t : layer_tensors(c, i, layout)) out.push_back(std::move(t));
  }
  out.push_back(std::move(outer[1]));
  out.push_back(std::move(outer[2]));
  return out;
}

namespace {

// The parameters of every layer (experts_per_layer experts in a sparse one) and the outer tensors.
uint64_t count_parameters(const ModelConfig& c, int experts_per_layer) {
  uint64_t total = count_elements(outer_tensors(c));
  // Layers of one kind have equal counts: count the first dense and the first sparse layer once.
  uint64_t dense = 0, sparse = 0;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    uint64_t& cached = c.is_moe_layer(i) ? sparse : dense;
    if (cached == 0) {
      cached = count_elements(attention_tensors(c, i)) +
               count_elements(mlp_tensors(c, i, ExpertLayout::kPerExpert, c.is_moe_layer(i) ? experts_per_layer : 0));
    }
    SPINDLE_CHECK(!__builtin_add_overflow(total, cached, &total), "parameter count of the model overflows 64 bits");
  }
  return total;
}

}  // namespace

uint64_t parameter_count(const ModelConfig& config) { return count_parameters(config, config.moe.num_experts); }

uint64_t active_parameter_count(const ModelConfig& config) {
  return count_parameters(config, config.moe.num_experts_per_tok);
}

std::string WeightCheck::report() const {
  std::string out;
  append_capped(out, "missing tensors", missing, kMaxListed);
  append_capped(out, "shape mismatches", shape_mismatches, kMaxListed);
  append_capped(out, "unsupported dtypes", wrong_dtypes, kMaxListed);
  append_capped(out, "unexpected tensors", unexpected, kMaxListed);
  return out;
}

WeightCheck compare_weights(const ModelConfig& config, const std::vector<TensorInfo>& tensors) {
  std::unordered_map<std::string_view, const TensorInfo*> by_name;
  for (const auto& t : tensors) by_name.emplace(t.name, &t);
  WeightCheck check;
  std::unordered_map<std::string_view, bool> expected_names;
  const auto expected = expected_tensors(config, detect_expert_layout(tensors));
  for (const auto& e : expected) {
    expected_names.emplace(e.name, true);
    const auto it = by_name.find(e.name);
    if (it == by_name.end()) {
      if (!e.optional) check.missing.push_back(fmt::format("{} {}", e.name, format_shape(e.shape)));
      continue;
    }
    const TensorInfo& found = *it->second;
    if (found.shape != e.shape) {
      check.shape_mismatches.push_back(fmt::format("{}: expected {}, found {}", e.name,
                                                   format_shape(e.shape),
                                                   format_shape(found.shape)));
    }
    if (!is_float_weight(found.dtype)) {  // (an FP8 weight of an FP8 config passes: fp8_weights.h)
      if (std::string why = fp8_weight_problem(config, found); !why.empty()) check.wrong_dtypes.push_back(why);
    }
  }
  for (const auto& t : tensors) {
    // (FP8 KV-cache scales are read, and checked, where an fp8_e4m3 KV cache uses them.)
    if (expected_names.count(t.name) != 0 || ends_with(t.name, kIgnoredSuffix) || is_fp8_aux_name(config, t.name) ||
        is_kv_scale_name(t.name)) {
      continue;
    }
    check.unexpected.push_back(
        fmt::format("{} {} {}", t.name, format_shape(t.shape), dtype_name(t.dtype)));
  }
  compare_fp8_scales(config, tensors, check);
  return check;
}

void check_weights(const ModelConfig& config, const Checkpoint& checkpoint) {
  const WeightCheck check = compare_weights(config, checkpoint.tensors());
  SPINDLE_CHECK(check.ok(),
                "{}: the checkpoint does not match config.json ({}, {} layers, hidden {}):{}",
                checkpoint.dir().string(), architecture_name(config.architecture),
                config.num_hidden_layers, config.hidden_size, check.report());
}

ExpertStats expert_stats(const ModelConfig& config, const std::vector<TensorInfo>& tensors) {
  ExpertStats stats;
  if (!config.moe.enabled()) return stats;
  for (const auto& t : tensors) {
    if (t.name.find(".experts.") != std::string::npos) stats.bytes += t.num_bytes();
  }
  stats.active_bytes = stats.bytes / static_cast<uint64_t>(config.moe.num_experts) *
                       static_cast<uint64_t>(config.moe.num_experts_per_tok);
  return stats;
}

WeightStats weight_stats(const std::vector<TensorInfo>& tensors) {
  WeightStats stats;
  for (const auto& t : tensors) {
    stats.num_parameters += t.num_elements();
    stats.num_bytes += t.num_bytes();
    stats.bytes_per_dtype[t.dtype] += t.num_bytes();
  }
  return stats;
}

}  // namespace spindle
