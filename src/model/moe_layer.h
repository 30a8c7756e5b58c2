// The weights of a sparse (mixture-of-experts) layer placed as a MoeBlock (device_ops.h), from
// either expert layout of weight_map.h: per-expert 2-D tensors, or transformers 5's fused 3-D
// gate_up_proj [E, 2F, H] / down_proj [E, H, F], whose expert e is the e-th [2F, H] / [H, F]
// slice (gate rows, then up rows: one joined gate/up weight per expert, a view, no copy).
#pragma once

#include "model/device_ops.h"
#include "model/model_config.h"
#include "model/weight_map.h"
#include "model/weight_view.h"

namespace spindle {

// The layout of `weights`' experts: kFused3d when the first sparse layer's
// "mlp.experts.gate_up_proj" is there, else kPerExpert (also for a dense model).
ExpertLayout moe_expert_layout(const ModelConfig& config, const WeightSource& weights);

// Places layer `layer`'s router, experts and shared expert with `store` (the source checked
// against the config by the caller). A fused slice is named "<tensor>[e]" in errors.
MoeBlock place_moe_block(WeightStore& store, WeightSource& weights, const ModelConfig& config, ExpertLayout layout,
                         int layer);

}  // namespace spindle
