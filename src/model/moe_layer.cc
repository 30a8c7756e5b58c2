#include "model/moe_layer.h"

#include <fmt/format.h>

#include <vector>

#include "util/error.h"

namespace spindle {
namespace {

// Expert e's slice of a 3-D plain-dtype weight [E, rows, cols] as a 2-D [rows, cols] view.
WeightView expert_slice(const WeightView& whole, int e) {
  SPINDLE_CHECK(whole.shape.size() == 3 && e < whole.shape[0] && !whole.quantized(), "{}: expert {} of a {} tensor of shape {}",
                whole.where(), e, whole.type_name(), format_shape(whole.shape));
  const size_t bytes = whole.bytes.size() / static_cast<size_t>(whole.shape[0]);
  WeightView slice;
  slice.name = fmt::format("{}[{}]", whole.name, e);
  slice.source = whole.source;
  slice.dtype = whole.dtype;
  slice.shape = {whole.shape[1], whole.shape[2]};
  slice.bytes = whole.bytes.subspan(bytes * static_cast<size_t>(e), bytes);
  return slice;
}

}  // namespace

ExpertLayout moe_expert_layout(const ModelConfig& c, const WeightSource& weights) {
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    if (!c.is_moe_layer(i)) continue;
    return weights.contains(moe_layer_names(c, ExpertLayout::kFused3d, i).gate_up) ? ExpertLayout::kFused3d
                                                                                    : ExpertLayout::kPerExpert;
  }
  return ExpertLayout::kPerExpert;
}

MoeBlock place_moe_block(WeightStore& store, WeightSource& weights, const ModelConfig& c, ExpertLayout layout,
                         int layer) {
  const MoeLayerNames n = moe_layer_names(c, layout, layer);
  auto linear = [&](const WeightView& view) { return store.place({&view, 1}, WeightUse::kLinear); };
  MoeBlock b;
  b.num_experts = c.moe.num_experts;
  b.top_k = c.moe.num_experts_per_tok;
  b.norm_topk_prob = c.moe.norm_topk_prob;
  b.expert_width = c.moe.moe_intermediate_size;
  b.shared_width = c.moe.shared_expert_intermediate_size;
  b.router = linear(weights.weight(n.router));
  if (layout == ExpertLayout::kFused3d) {
    const WeightView gate_up = weights.weight(n.gate_up), down = weights.weight(n.down);
    for (int e = 0; e < b.num_experts; ++e) {
      LinearGroup g;
      g.joined = linear(expert_slice(gate_up, e));  // [2F, H]: gate rows, then up rows
      b.gate_up.push_back(g);
      b.down.push_back(linear(expert_slice(down, e)));
    }
  } else {
    for (int e = 0; e < b.num_experts; ++e) {
      const WeightView parts[] = {weights.weight(n.expert_gate(e)), weights.weight(n.expert_up(e))};
      b.gate_up.push_back(store.place_group(LinearGroupKind::kGateUp, parts, {}));
      b.down.push_back(linear(weights.weight(n.expert_down(e))));
    }
  }
  if (b.shared_width > 0) {
    const WeightView parts[] = {weights.weight(n.shared_gate), weights.weight(n.shared_up)};
    b.shared_gate_up = store.place_group(LinearGroupKind::kGateUp, parts, {});
    b.shared_down = linear(weights.weight(n.shared_down));
    b.shared_gate = linear(weights.weight(n.shared_expert_gate));
  }
  return b;
}

}  // namespace spindle
