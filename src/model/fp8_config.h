// FP8 checkpoints (issue 47): the `quantization_config` of config.json that Spindle serves, and
// the scale tensors such a checkpoint stores next to each FP8 linear weight.
//
// Accepted formats (every other quant_method is refused naming it):
//   quant_method "fp8" (transformers' FineGrainedFP8 / DeepSeek-V3 / Qwen3 "-FP8" checkpoints):
//     weight_block_size [128, 128]: X.weight F8_E4M3 [out, in], X.weight_scale_inv F32
//       [ceil(out / 128), ceil(in / 128)]; dequantized W[o, i] = fp8 * weight_scale_inv[o/128, i/128]
//       (a multiplier, the name notwithstanding).
//     no weight_block_size: one scale per tensor, X.weight_scale or X.weight_scale_inv, shape []
//       or [1]; dequantized = fp8 * scale.
//     activation_scheme "static" adds X.input_scale ([] or [1]); "dynamic" (or absent) has none.
//   quant_method "compressed-tensors" (LLM Compressor), format float-quantized / naive-quantized:
//     config_groups.*.weights {type "float", num_bits 8, strategy "tensor" | "channel"};
//     X.weight_scale [] / [1] (tensor) or [out, 1] / [out] (channel); dequantized = fp8 * scale.
//     input_activations.dynamic false adds X.input_scale (static).
//   Scales may be stored as F32, BF16 or F16.
// Modules listed in ignored_layers / modules_to_not_convert / ignore (names, or "re:<regex>" as
// compressed-tensors writes them) stay in their plain dtype (lm_head, MoE routers). An FP8 weight
// without its scale, or with a scale of the wrong shape or type, refuses the folder naming the tensor.
//
// The static input_scale is accepted and not used in any product: the CPU and the CUDA decode
// products are W8A16 (activations stay f32 on the CPU, bf16 into the CUDA gemv), and the cuBLASLt
// prefill quantizes activations per token. It travels with the weight's scale (WeightScale) so that
// joining parts into one product (model/fp8_join.h) refuses parts whose static scales differ.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spindle {

// How the scale of one FP8 weight [out, in] maps onto it.
enum class Fp8ScaleMode {
  kPerTensor,   // one scale
  kPerChannel,  // scale[o]
  kBlock128,    // scale[o / 128, i / 128], [ceil(out / 128), ceil(in / 128)] row-major
};
inline constexpr int64_t kFp8BlockSize = 128;

std::string_view fp8_scale_mode_name(Fp8ScaleMode mode);  // "per-tensor", "per-channel", "block 128x128"

struct Fp8Quantization {
  std::string method;            // "fp8" or "compressed-tensors"
  Fp8ScaleMode mode = Fp8ScaleMode::kPerTensor;
  // The scale's tensor suffix in the order looked for ("weight_scale_inv", "weight_scale").
  std::vector<std::string> scale_suffixes;
  bool static_input_scale = false;  // X.input_scale stored (accepted, unused: W8A16)
  std::vector<std::string> ignored;  // module names or "re:<regex>"

  // True when `module` (a weight name without ".weight", e.g. "lm_head") is listed as not converted.
  bool is_ignored(std::string_view module) const;
};

// The quantization_config of `config` (the whole config.json object): nullopt when absent; throws
// naming `source` and the field for any format above not being met, or another quant_method.
std::optional<Fp8Quantization> parse_quantization_config(const nlohmann::json& config, std::string_view source);

// The module of a weight name: "model.layers.0.mlp.up_proj.weight" -> "model.layers.0.mlp.up_proj".
std::string weight_module(std::string_view weight_name);

// The expected shapes of one FP8 weight's scale in `mode` (each accepted alternative).
std::vector<std::vector<int64_t>> fp8_scale_shapes(Fp8ScaleMode mode, int64_t out, int64_t in);

}  // namespace spindle
