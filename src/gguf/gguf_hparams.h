// Hyper-parameters of a decoder-only transformer read from a GGUF file's metadata, through one
// key table per architecture (general.architecture): "llama" (also what Mistral and Mixtral
// checkpoints convert to), "qwen2", "qwen3", and the mixtures of experts "qwen2moe", "qwen3moe"
// (and "llama" with expert_count > 0: Mixtral). Supporting another architecture means adding its
// table in gguf_hparams.cc.
//
// Keys (with {arch} the architecture name):
//   {arch}.context_length, .embedding_length, .block_count, .feed_forward_length,
//   .attention.head_count                       required
//   .attention.head_count_kv                    default head_count
//   .attention.key_length / .value_length       default embedding_length / head_count
//   .attention.layer_norm_rms_epsilon           required
//   .rope.freq_base                             default 10000
//   .rope.dimension_count                       default key_length; must equal it (no partial RoPE)
//   .rope.scaling.type                          "none" or "linear" (default linear when a factor is
//                                               given); "yarn", "longrope" or anything else is an
//                                               error naming the key
//   .rope.scaling.factor / .rope.scale_linear   the linear factor
//   .rope.scaling.attn_factor                   must be 1 when present
//   tensor rope_freqs.weight                    F32 [rope dims / 2]: Llama-3 per-frequency divisors
//   .attention.sliding_window                   absent, 0 or >= context_length (a smaller window
//                                               is an error naming the key)
// Mixtures of experts (llama: when .expert_count > 0; qwen2moe, qwen3moe: required):
//   .expert_count, .expert_used_count           required, 1 <= used <= count (qwen2/qwen3: absent or 0)
//   .expert_feed_forward_length                 qwen*moe: default feed_forward_length / used count
//                                               (llama.cpp's default); llama: feed_forward_length
//   .expert_shared_feed_forward_length          qwen2moe: default feed_forward_length
//   .expert_weights_norm                        renormalize the top-k weights; default true for
//                                               llama and qwen3moe, false for qwen2moe (llama.cpp);
//                                               false is an error for llama (Mixtral)
//   .expert_gating_func                         absent or 1 (softmax); else an error naming the key
//   .expert_weights_scale                       absent, 0 or 1; else an error naming the key
//   tensors blk.N.ffn_gate_inp.weight           present: block N is sparse; absent: dense (what
//                                               mlp_only_layers / decoder_sparse_step convert to)
//   tokenizer.ggml.tokens (length)              the vocabulary size (else token_embd.weight's rows)
// The RoPE layout is the architecture's: llama.cpp's converter permutes the q/k projection rows of
// "llama" models so that RoPE rotates adjacent pairs (2i, 2i+1) (kInterleaved), which a loader
// computing Hugging Face's half-split RoPE must undo; qwen2/qwen3 keep the half-split layout
// (kNeox) as the checkpoint had it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"

namespace spindle::gguf {

enum class RopeLayout {
  kInterleaved,  // q/k rows permuted per head: pairs (2i, 2i+1); un-permute for half-split RoPE
  kNeox,         // half-split: pairs (i, i + rope_dims / 2), Hugging Face's layout
};
std::string_view rope_layout_name(RopeLayout layout);

// For RopeLayout::kInterleaved: the row of a GGUF q or k projection (or its bias) holding row
// `hf_row` of the Hugging Face checkpoint. llama.cpp's converter reorders each head's head_dim
// rows (reshape [heads, 2, head_dim / 2], swap the last two axes), so HF row
// h * head_dim + j * head_dim / 2 + i (j in {0, 1}) is GGUF row h * head_dim + 2 i + j. Rows are
// whole rows of any ggml type, so a loader un-permutes quantized weights by moving rows.
int64_t interleaved_rope_row(int64_t hf_row, int64_t head_dim);

enum class RopeScalingType { kNone, kLinear };

struct HyperParams {
  std::string architecture;  // general.architecture
  RopeLayout rope_layout = RopeLayout::kNeox;
  bool attention_bias = false;  // q/k/v projections carry biases (qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k (qwen3)
  int64_t context_length = 0;
  int64_t embedding_length = 0;
  int64_t block_count = 0;
  int64_t feed_forward_length = 0;
  int64_t head_count = 0;
  int64_t head_count_kv = 0;
  int64_t key_length = 0;  // head_dim
  int64_t value_length = 0;
  int64_t rope_dimension_count = 0;
  int64_t vocab_size = 0;
  double rms_norm_eps = 0;
  double rope_freq_base = 10000.0;
  RopeScalingType rope_scaling = RopeScalingType::kNone;
  double rope_scaling_factor = 1.0;  // kLinear: positions divided by it
  // rope_freqs.weight: each frequency i of the rope_dimension_count / 2 is divided by factor i
  // (the Llama-3 scaling as llama.cpp's converter writes it); empty when the tensor is absent.
  std::vector<float> rope_freq_factors;
  bool tied_embeddings = false;  // no output.weight: the output projection is token_embd.weight
  std::optional<int64_t> bos_token_id;  // tokenizer.ggml.bos_token_id
  std::optional<int64_t> eos_token_id;  // tokenizer.ggml.eos_token_id
  // Mixture of experts (expert_count 0: a dense model).
  int64_t expert_count = 0;
  int64_t expert_used_count = 0;
  int64_t expert_feed_forward_length = 0;         // each routed expert's width
  int64_t expert_shared_feed_forward_length = 0;  // qwen2moe's shared expert; 0: none
  bool expert_weights_norm = false;               // top-k weights renormalized to sum 1
  std::vector<int64_t> dense_blocks;              // blocks without a router (dense MLP)
  // general.file_type: llama.cpp's summary of the weights' types (0 all F32, 1 mostly F16,
  // 32 mostly BF16, other values quantized types).
  std::optional<int64_t> file_type;
};

// Every supported general.architecture value, comma separated.
std::string supported_gguf_architectures();

// What read_hyper_params reads of a model: its metadata (whose source_name names it in errors)
// and its tensors by name, with their bytes.
struct TensorSource {
  const Metadata& metadata;
  std::function<const TensorInfo*(std::string_view)> find_tensor;
  std::function<std::span<const std::byte>(const TensorInfo&)> tensor_data;
};

// Reads and validates the hyper-parameters; errors name the file and the key (or tensor).
HyperParams read_hyper_params(const TensorSource& model);
HyperParams read_hyper_params(const GgufFile& file);
// One parsed file held in memory (tests, the fuzzer): tensors resolved in `file_bytes`.
HyperParams read_hyper_params(const Header& header, std::span<const std::byte> file_bytes);

}  // namespace spindle::gguf
