// The FP8 KV-cache scales a Hugging Face checkpoint may store beside its attention weights (the
// names vLLM loads; kernels/kv_scales.h has their meaning: dequantized = fp8 * scale):
//   model.layers.N.self_attn.k_scale / .v_scale          (quant_method fp8, compressed-tensors, ModelOpt)
//   model.layers.N.self_attn.attn.k_scale / .v_scale     (the same, one module deeper)
//   model.layers.N.self_attn.k_proj.k_scale / v_proj.v_scale        (ModelOpt)
//   model.layers.N.self_attn.k_proj.output_scale / v_proj.output_scale  (older compressed-tensors
//                                                         kv_cache_scheme checkpoints)
//   model.layers.N.self_attn.kv_scale                    (deprecated: one scale for K and V)
// Each is a scalar ([] or [1]: the layer's K or V) or [num_key_value_heads] (one per KV head),
// stored as F32, BF16 or F16.
#pragma once

#include <optional>
#include <string_view>

#include "kernels/kv_scales.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace spindle {

// True for a tensor name of the list above (any layer number).
bool is_kv_scale_name(std::string_view name);

// The checkpoint's KV scales, source "checkpoint": nullopt when it stores none. Throws naming the
// folder and the tensor for a layer without its K or V scale while others have them, a scale of
// another shape than [], [1] or [num_key_value_heads], another dtype, or a value that is not
// positive and finite.
std::optional<KvScales> read_checkpoint_kv_scales(const Checkpoint& checkpoint, const ModelConfig& config);

}  // namespace spindle
