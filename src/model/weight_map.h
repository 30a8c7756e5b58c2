// The tensors a checkpoint must hold for a ModelConfig, and the check that it does.
//
// Names and shapes (rows, cols) follow the Hugging Face layout shared by Llama, Mistral, Qwen2
// and Qwen3; H = hidden_size, I = intermediate_size, V = vocab_size, D = head_dim,
// Q = num_attention_heads * D, K = num_key_value_heads * D:
//   model.embed_tokens.weight                         [V, H]
//   model.layers.{i}.input_layernorm.weight           [H]
//   model.layers.{i}.self_attn.q_proj.weight          [Q, H]   (.bias [Q] when attention_bias)
//   model.layers.{i}.self_attn.k_proj.weight          [K, H]   (.bias [K] when attention_bias)
//   model.layers.{i}.self_attn.v_proj.weight          [K, H]   (.bias [K] when attention_bias)
//   model.layers.{i}.self_attn.o_proj.weight          [H, Q]
//   model.layers.{i}.self_attn.q_norm.weight          [D]      (qk_norm only)
//   model.layers.{i}.self_attn.k_norm.weight          [D]      (qk_norm only)
//   model.layers.{i}.post_attention_layernorm.weight  [H]
//   model.layers.{i}.mlp.gate_proj.weight             [I, H]
//   model.layers.{i}.mlp.up_proj.weight               [I, H]
//   model.layers.{i}.mlp.down_proj.weight             [H, I]
//   model.norm.weight                                 [H]
//   lm_head.weight                                    [V, H]   (optional when tie_word_embeddings)
// A sparse (mixture-of-experts) layer (ModelConfig::is_moe_layer) holds instead of the three mlp
// tensors, with E = num_experts, F = moe_intermediate_size, S = shared_expert_intermediate_size
// and P = "mlp" ("block_sparse_moe" for Mixtral's per-expert layout):
//   model.layers.{i}.P.gate.weight                    [E, H]   the router
//   per-expert layout (ExpertLayout::kPerExpert), e < E:
//     model.layers.{i}.mlp.experts.{e}.gate_proj.weight   [F, H]   (Mixtral: P.experts.{e}.w1)
//     model.layers.{i}.mlp.experts.{e}.up_proj.weight     [F, H]   (Mixtral: P.experts.{e}.w3)
//     model.layers.{i}.mlp.experts.{e}.down_proj.weight   [H, F]   (Mixtral: P.experts.{e}.w2)
//   fused 3-D layout transformers 5 can save (kFused3d; P = "mlp" for every architecture):
//     model.layers.{i}.mlp.experts.gate_up_proj         [E, 2F, H]  expert e: gate rows, then up rows
//     model.layers.{i}.mlp.experts.down_proj            [E, H, F]
//   Qwen2-MoE with S > 0:
//     model.layers.{i}.mlp.shared_expert.gate_proj.weight [S, H] (up_proj [S, H], down_proj [H, S])
//     model.layers.{i}.mlp.shared_expert_gate.weight      [1, H]
// Weights must be F32, F16 or BF16; an FP8 config's linear weights may be F8_E4M3 with their
// scales (fp8_weights.h). Tensors named *.rotary_emb.inv_freq (saved by old Llama
// exports, recomputed at load) are ignored.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "util/dtype.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace spindle {

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool optional = false;  // may be absent (lm_head.weight of a tied model)
};

// "model.layers.{layer}.{suffix}", e.g. layer_weight_name(3, "mlp.up_proj.weight").
std::string layer_weight_name(int layer, std::string_view suffix);

// How a checkpoint stores its experts (see the table above).
enum class ExpertLayout { kPerExpert, kFused3d };
// kFused3d when a tensor named "*.experts.gate_up_proj" is present, else kPerExpert.
ExpertLayout detect_expert_layout(const std::vector<TensorInfo>& tensors);
std::string_view expert_layout_name(ExpertLayout layout);  // "per-expert", "fused 3-D"

// The full tensor names of sparse layer `layer` in `layout` (the table above).
struct MoeLayerNames {
  std::string router;
  std::string gate_up, down;  // kFused3d: the 3-D tensors
  std::string shared_gate, shared_up, shared_down, shared_expert_gate;  // Qwen2-MoE with S > 0
  // kPerExpert: expert e's gate (w1), up (w3), down (w2) projections.
  std::string expert_gate(int e) const;
  std::string expert_up(int e) const;
  std::string expert_down(int e) const;

  std::string expert_prefix;                 // "model.layers.{i}.P.experts."
  std::string gate_name, up_name, down_name;  // "gate_proj" / "w1", ...
};
MoeLayerNames moe_layer_names(const ModelConfig& config, ExpertLayout layout, int layer);

// Every tensor the architecture defines for this config, in load order.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config,
                                             ExpertLayout layout = ExpertLayout::kPerExpert);

// Parameters a token reads: a sparse layer counts its router, num_experts_per_tok experts and
// the shared expert (a tied lm_head counts once). Equals parameter_count for a dense model.
uint64_t active_parameter_count(const ModelConfig& config);

// Parameters of the model as served (a tied lm_head counts once). Throws on 64-bit overflow.
uint64_t parameter_count(const ModelConfig& config);

// What check_weights compares; each entry is one human-readable line.
struct WeightCheck {
  std::vector<std::string> missing;          // "name [shape]"
  std::vector<std::string> shape_mismatches; // "name: expected [..], found [..]"
  std::vector<std::string> wrong_dtypes;     // "name: I8 (weights must be F32, F16 or BF16)"
  std::vector<std::string> unexpected;       // "name [shape] DTYPE"

  bool ok() const {
    return missing.empty() && shape_mismatches.empty() && wrong_dtypes.empty() &&
           unexpected.empty();
  }
  // A multi-line report; each list is capped at kMaxListed lines plus "and N more".
  std::string report() const;
  static constexpr size_t kMaxListed = 20;
};

// Compares the checkpoint's tensors with expected_tensors(config, detect_expert_layout(tensors)).
WeightCheck compare_weights(const ModelConfig& config, const std::vector<TensorInfo>& tensors);

// Throws spindle::Error naming the checkpoint folder and listing every problem in WeightCheck.
void check_weights(const ModelConfig& config, const Checkpoint& checkpoint);

struct WeightStats {
  uint64_t num_parameters = 0;  // elements of all tensors in the checkpoint
  uint64_t num_bytes = 0;
  std::map<DType, uint64_t> bytes_per_dtype;
};

WeightStats weight_stats(const std::vector<TensorInfo>& tensors);
inline WeightStats weight_stats(const Checkpoint& checkpoint) {
  return weight_stats(checkpoint.tensors());
}

// The routed experts of a checkpoint (tensors named "*.experts.*", either layout; not the router
// or the shared expert): their bytes, and the bytes one token reads (top_k of num_experts per
// sparse layer). Zero for a dense model.
struct ExpertStats {
  uint64_t bytes = 0;
  uint64_t active_bytes = 0;
};
ExpertStats expert_stats(const ModelConfig& config, const std::vector<TensorInfo>& tensors);

// "[2048, 128256]"
std::string format_shape(const std::vector<int64_t>& shape);

}  // namespace spindle
