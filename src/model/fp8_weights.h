// The scale tensors of an FP8 checkpoint (fp8_config.h) in the weight check and at placing:
// which F8_E4M3 tensors are acceptable, the scale each must carry and its shape.
//
// An F8_E4M3 tensor is an FP8 weight when the config has a quantization_config, its name is a
// linear weight ("*_proj.weight", "lm_head.weight") and its module is not listed as not converted.
// It must then have exactly one scale tensor (X.weight_scale_inv or X.weight_scale, per the config)
// of the mode's shape (fp8_scale_shapes) in F32, BF16 or F16; X.input_scale ([] or [1]) may sit
// beside it. Scale tensors of a weight that is not FP8 are unexpected.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weight_map.h"
#include "model/weight_view.h"

namespace spindle {

// For a tensor whose dtype is not F32/F16/BF16: "" when it is an FP8 weight of this config, else
// the wrong_dtypes line saying why not.
std::string fp8_weight_problem(const ModelConfig& config, const TensorInfo& tensor);

// True for a name an FP8 checkpoint may hold beside its weights (*.weight_scale, *.weight_scale_inv,
// *.input_scale) when the config has a quantization_config; compare_fp8_scales checks them.
bool is_fp8_aux_name(const ModelConfig& config, std::string_view name);

// Adds to `check` every FP8 weight without its scale (missing), every scale of the wrong shape
// (shape_mismatches) or type (wrong_dtypes), and every scale or input_scale whose weight is not
// an FP8 weight (unexpected).
void compare_fp8_scales(const ModelConfig& config, const std::vector<TensorInfo>& tensors, WeightCheck& check);

// The scale of the FP8 weight `weight` of `checkpoint`, as WeightView::scale; throws naming the
// folder and the tensor when there is no quantization_config, the scale is missing or misshaped.
WeightScale fp8_weight_scale(const Checkpoint& checkpoint, const std::optional<Fp8Quantization>& fp8,
                             const TensorInfo& weight);

}  // namespace spindle
