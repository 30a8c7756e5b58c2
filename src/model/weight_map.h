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

// Every tensor the architecture defines for this config, in load order.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

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

// Compares the checkpoint's tensors with expected_tensors(config).
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

// "[2048, 128256]"
std::string format_shape(const std::vector<int64_t>& shape);

}  // namespace spindle
