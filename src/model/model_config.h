// ModelConfig: the Hugging Face config.json of a decoder-only transformer, parsed and validated.
//
// Supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, and the
// mixtures of experts Qwen3MoeForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM (MoeConfig).
// Defaults for absent fields follow the transformers config classes of those architectures:
//   num_key_value_heads     = num_attention_heads
//   head_dim                = hidden_size / num_attention_heads (then hidden_size must divide)
//   rms_norm_eps            = 1e-6   (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config agree)
//   rope_theta              = 10000
//   rope_scaling            = none
//   tie_word_embeddings     = false
//   attention_bias          = true for Qwen2 (q/k/v carry a bias; the field is ignored);
//                             Qwen2-MoE: the json field 'qkv_bias', else true;
//                             else the json field 'attention_bias', else false
//   qk_norm                 = true for Qwen3 and Qwen3-MoE (per-head RMSNorm on q and k)
// Mixtures of experts (MoeConfig; transformers' Qwen3MoeConfig, MixtralConfig, Qwen2MoeConfig):
//   num_experts             = 'num_experts', else 'num_local_experts' (required)
//   num_experts_per_tok     = required, 1 <= k <= num_experts
//   moe_intermediate_size   = Qwen MoE: required; Mixtral: intermediate_size (its experts' width)
//   shared_expert_intermediate_size = Qwen2-MoE: required (0 turns the shared expert off); else 0
//   norm_topk_prob          = Qwen MoE: the field, else false; Mixtral: always true (its router is a
//                             softmax over the top-k logits, the renormalized top-k of the softmax)
//   decoder_sparse_step     = Qwen MoE: the field, else 1; mlp_only_layers = the field, else []
//   torch_dtype             = F32 when absent (transformers' meaning of "no dtype"); "dtype" is
//                             accepted as the newer spelling of "torch_dtype"
//   bos/eos_token_id        = int, list of ints, null or absent (empty list)
//   hidden_act              = "silu"; any other activation is rejected
// quantization_config: FP8 only (fp8_config.h), others rejected naming their quant_method.
// Rejected (not implemented): sliding-window attention in use, rope_scaling types other than
// "default"/"linear"/"llama3", mlp_bias true.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/fp8_config.h"
#include "util/dtype.h"
#include "util/token_id.h"

namespace spindle {

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3, kQwen3Moe, kMixtral, kQwen2Moe };

// "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
// "Qwen3MoeForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM".
std::string_view architecture_name(Architecture architecture);
std::optional<Architecture> parse_architecture(std::string_view name);
// Every supported name, comma separated (for error messages and `spindle info`).
std::string supported_architectures();

struct RopeScaling {
  enum Type { kNone, kLinear, kLlama3 };
  Type type = kNone;
  double factor = 1.0;                       // kLinear, kLlama3
  double low_freq_factor = 1.0;              // kLlama3
  double high_freq_factor = 4.0;             // kLlama3
  int original_max_position_embeddings = 0;  // kLlama3
};

// The mixture-of-experts block of a layer (num_experts 0: a dense model). A sparse layer's MLP is
//   y = sum over the top-k experts e of w_e * expert_e(x)
//       (+ sigmoid(x . shared_expert_gate) * shared_expert(x) with a shared expert)
// where expert_e(x) = (silu(x W_gate,e^T) * (x W_up,e^T)) W_down,e^T of width moe_intermediate_size
// and w = the top-k entries of softmax(x W_router^T) (renormalized to sum 1 when norm_topk_prob).
// A layer is sparse when it is not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0;
// the other layers keep the dense MLP of width intermediate_size.
struct MoeConfig {
  int num_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  int shared_expert_intermediate_size = 0;  // 0: no shared expert
  bool norm_topk_prob = false;
  int decoder_sparse_step = 1;
  std::vector<int> mlp_only_layers;

  bool enabled() const { return num_experts > 0; }
  bool is_sparse_layer(int layer) const;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string model_type;  // config.json "model_type", informational ("" when absent)
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q_proj/k_proj/v_proj have a bias
  bool qk_norm = false;         // q_norm/k_norm weights [head_dim] applied per head before rope
  DType torch_dtype = DType::kF32;
  std::vector<TokenId> bos_token_ids;
  std::vector<TokenId> eos_token_ids;
  // The attention window in effect; nullopt when attention is full. A window in effect is
  // rejected today, so a parsed config always has nullopt here.
  std::optional<int> sliding_window;
  MoeConfig moe;  // num_experts 0 for the dense architectures
  // An FP8 checkpoint's quantization_config (fp8_config.h); nullopt: unquantized. Any other
  // quantization_config is rejected.
  std::optional<Fp8Quantization> fp8;

  int q_size() const { return num_attention_heads * head_dim; }   // q_proj rows
  int kv_size() const { return num_key_value_heads * head_dim; }  // k_proj, v_proj rows
  int num_kv_groups() const { return num_attention_heads / num_key_value_heads; }
  bool is_moe_layer(int layer) const { return moe.is_sparse_layer(layer); }
};

// Parses and validates one config.json. source_name names the file in every error message, e.g.
//   "<dir>/config.json: field 'hidden_size' must be a positive integer, got \"abc\"".
ModelConfig parse_model_config(const nlohmann::json& json, std::string_view source_name);
// Reads model_dir/config.json; errors name that path. A .gguf file (is_gguf_path) instead: the
// config from its metadata (load_gguf_model_config).
ModelConfig load_model_config(const std::filesystem::path& model_dir);

// Bytes of K and V for one token over all layers on one tensor-parallel rank (DESIGN.md §3):
//   num_hidden_layers * 2 * max(1, num_key_value_heads / tp_size) * head_dim * dtype_size(kv_dtype)
uint64_t kv_bytes_per_token(const ModelConfig& config, DType kv_dtype, int tp_size = 1);

}  // namespace spindle
