// A GGUF file's hyper-parameters (gguf::HyperParams) as the ModelConfig the rest of Spindle uses.
//
//   general.architecture llama / qwen2 / qwen3 -> kLlama / kQwen2 / kQwen3 (Mistral checkpoints
//   convert to "llama"); llama with expert_count > 0 -> kMixtral; qwen2moe / qwen3moe ->
//   kQwen2Moe / kQwen3Moe; model_type = the GGUF architecture name.
//   MoeConfig: num_experts = expert_count, num_experts_per_tok = expert_used_count,
//   moe_intermediate_size = expert_feed_forward_length, shared_expert_intermediate_size =
//   expert_shared_feed_forward_length, norm_topk_prob = expert_weights_norm, decoder_sparse_step 1
//   and mlp_only_layers = the blocks without a router (gguf::HyperParams::dense_blocks).
//   torch_dtype: BF16 for general.file_type 32 (mostly BF16), F16 for 1, else F32 (quantized and
//   F32 files compute in f32).
//   RoPE: linear scaling as given; rope_freqs.weight (Llama-3 per-frequency divisors) becomes
//   RopeScaling::kLlama3 with parameters recovered from the factors: with wavelength
//   w_i = 2*pi*theta^(2i/d), the factors are 1 where w < L/hi, F where w > L/lo and
//   1 / ((1 - s)/F + s), s = (L/w - lo)/(hi - lo), in between; F is the largest factor and
//   (L/(hi-lo), lo/(hi-lo)) follow from a least-squares line through the in-between points (at
//   least two needed). Only those two ratios matter, so L is chosen as an integer and lo, hi
//   follow; the recovered parameters must reproduce every factor within 1e-4 relative, else the
//   tensor is an error naming it. The RoPE layout (the llama permutation of q/k rows) is the
//   loader's business: see gguf::HyperParams::rope_layout.
#pragma once

#include <filesystem>
#include <string_view>

#include "gguf/gguf_hparams.h"
#include "model/model_config.h"

namespace spindle {

// True for a path to a regular file named *.gguf (a model given as one GGUF file, or the first
// part of a split one) rather than a Hugging Face folder.
bool is_gguf_path(const std::filesystem::path& path);

// The ModelConfig of a GGUF file (read_hyper_params, model_config_from_gguf); errors name the file.
ModelConfig load_gguf_model_config(const std::filesystem::path& path);

// Throws spindle::Error naming `source_name` (the GGUF file) and the key or tensor at fault.
ModelConfig model_config_from_gguf(const gguf::HyperParams& hp, std::string_view source_name);

// The Llama-3 RoPE scaling whose per-frequency divisors are `factors` (rope_freqs.weight) for
// head size 2 * factors.size() and base theta; kNone when every factor is 1. Throws naming
// rope_freqs.weight when the factors are not of that form.
RopeScaling llama3_scaling_from_factors(const std::vector<float>& factors, double theta,
                                        std::string_view source_name);

}  // namespace spindle
