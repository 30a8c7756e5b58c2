#include "model/gguf_model_config.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "util/error.h"

namespace spindle {
namespace {

// The Llama-3 divisor of frequency i (transformers' _compute_llama3_parameters, in double).
double llama3_factor(const RopeScaling& s, double wavelen) {
  const double old_len = s.original_max_position_embeddings;
  if (wavelen < old_len / s.high_freq_factor) return 1.0;
  if (wavelen > old_len / s.low_freq_factor) return s.factor;
  const double smooth = (old_len / wavelen - s.low_freq_factor) /
                        (s.high_freq_factor - s.low_freq_factor);
  return 1.0 / ((1 - smooth) / s.factor + smooth);
}

Architecture architecture_of(const gguf::HyperParams& hp, std::string_view source) {
  if (hp.architecture == "llama") return hp.expert_count > 0 ? Architecture::kMixtral : Architecture::kLlama;
  if (hp.architecture == "qwen2") return Architecture::kQwen2;
  if (hp.architecture == "qwen3") return Architecture::kQwen3;
  if (hp.architecture == "qwen2moe") return Architecture::kQwen2Moe;
  if (hp.architecture == "qwen3moe") return Architecture::kQwen3Moe;
  SPINDLE_FAIL("{}: GGUF architecture '{}' has no ModelConfig mapping", source, hp.architecture);
}

int to_int(int64_t value, std::string_view what, std::string_view source) {
  SPINDLE_CHECK(value > 0 && value <= INT32_MAX, "{}: {} is {}", source, what, value);
  return static_cast<int>(value);
}

// The mixture-of-experts block (hp.expert_count > 0): every block sparse but the dense ones.
MoeConfig moe_config_of(const gguf::HyperParams& hp, std::string_view source) {
  MoeConfig moe;
  if (hp.expert_count == 0) return moe;
  moe.num_experts = to_int(hp.expert_count, "expert_count", source);
  moe.num_experts_per_tok = to_int(hp.expert_used_count, "expert_used_count", source);
  moe.moe_intermediate_size = to_int(hp.expert_feed_forward_length, "expert_feed_forward_length", source);
  if (hp.expert_shared_feed_forward_length > 0) {
    moe.shared_expert_intermediate_size =
        to_int(hp.expert_shared_feed_forward_length, "expert_shared_feed_forward_length", source);
  }
  moe.norm_topk_prob = hp.expert_weights_norm;
  for (const int64_t block : hp.dense_blocks) moe.mlp_only_layers.push_back(static_cast<int>(block));
  return moe;
}

}  // namespace

RopeScaling llama3_scaling_from_factors(const std::vector<float>& factors, double theta,
                                        std::string_view source) {
  const size_t n = factors.size();
  const double dims = 2.0 * static_cast<double>(n);
  auto wavelen = [&](size_t i) { return 2 * std::numbers::pi * std::pow(theta, 2.0 * i / dims); };
  RopeScaling s;
  const double big = *std::max_element(factors.begin(), factors.end());
  if (big <= 1.0) return s;
  // Points strictly between 1 and F: s = a / w + b, fitted by least squares.
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int m = 0;
  for (size_t i = 0; i < n; ++i) {
    const double f = factors[i];
    if (f <= 1.0 + 1e-6 || f >= big * (1 - 1e-6)) continue;
    const double x = 1.0 / wavelen(i);
    const double y = (1.0 / f - 1.0 / big) / (1.0 - 1.0 / big);
    sx += x, sy += y, sxx += x * x, sxy += x * y, ++m;
  }
  SPINDLE_CHECK(m >= 2, "{}: tensor 'rope_freqs.weight': {} of its factors lie strictly between 1 "
                "and the largest ({}); Spindle needs at least 2 to recover the Llama-3 RoPE "
                "parameters", source, m, big);
  const double a = (m * sxy - sx * sy) / (m * sxx - sx * sx);
  const double b = (sy - a * sx) / m;
  SPINDLE_CHECK(a > 0 && std::isfinite(a) && std::isfinite(b),
                "{}: tensor 'rope_freqs.weight': the factors do not follow the Llama-3 RoPE "
                "scaling (fitted slope {})", source, a);
  // L = a * (hi - lo): prefer the smallest hi - lo in 1..16 that makes L a whole number.
  double best_h = 1;
  for (int h = 16; h >= 1; --h) {
    if (std::abs(a * h - std::round(a * h)) < 1e-5 * a * h) best_h = h;
  }
  s.type = RopeScaling::kLlama3;
  s.factor = big;
  s.original_max_position_embeddings = static_cast<int>(std::round(a * best_h));
  const double h = s.original_max_position_embeddings / a;
  s.low_freq_factor = -b * h;
  s.high_freq_factor = s.low_freq_factor + h;
  for (size_t i = 0; i < n; ++i) {
    const double expected = llama3_factor(s, wavelen(i));
    SPINDLE_CHECK(std::abs(expected - factors[i]) <= 1e-4 * expected,
                  "{}: tensor 'rope_freqs.weight': factor {} is {}, but the Llama-3 RoPE scaling "
                  "fitted to the others (factor {}, low_freq_factor {}, high_freq_factor {}, "
                  "original_max_position_embeddings {}) gives {}", source, i, factors[i], s.factor,
                  s.low_freq_factor, s.high_freq_factor, s.original_max_position_embeddings,
                  expected);
  }
  return s;
}

bool is_gguf_path(const std::filesystem::path& path) {
  std::error_code ec;
  return path.extension() == ".gguf" && std::filesystem::is_regular_file(path, ec);
}

ModelConfig load_gguf_model_config(const std::filesystem::path& path) {
  const gguf::GgufFile file(path);
  return model_config_from_gguf(gguf::read_hyper_params(file), path.string());
}

ModelConfig model_config_from_gguf(const gguf::HyperParams& hp, std::string_view source) {
  ModelConfig c;
  c.architecture = architecture_of(hp, source);
  c.model_type = hp.architecture;
  c.vocab_size = to_int(hp.vocab_size, "the vocabulary size", source);
  c.hidden_size = to_int(hp.embedding_length, "embedding_length", source);
  c.intermediate_size = to_int(hp.feed_forward_length, "feed_forward_length", source);
  c.num_hidden_layers = to_int(hp.block_count, "block_count", source);
  c.num_attention_heads = to_int(hp.head_count, "attention.head_count", source);
  c.num_key_value_heads = to_int(hp.head_count_kv, "attention.head_count_kv", source);
  c.head_dim = to_int(hp.key_length, "attention.key_length", source);
  c.max_position_embeddings = to_int(hp.context_length, "context_length", source);
  c.rms_norm_eps = hp.rms_norm_eps;
  c.rope_theta = hp.rope_freq_base;
  c.tie_word_embeddings = hp.tied_embeddings;
  c.attention_bias = hp.attention_bias;
  c.qk_norm = hp.qk_norm;
  c.moe = moe_config_of(hp, source);
  c.torch_dtype = hp.file_type == 32 ? DType::kBF16 : hp.file_type == 1 ? DType::kF16 : DType::kF32;
  if (hp.bos_token_id) c.bos_token_ids.push_back(static_cast<TokenId>(*hp.bos_token_id));
  if (hp.eos_token_id) c.eos_token_ids.push_back(static_cast<TokenId>(*hp.eos_token_id));
  if (hp.rope_scaling == gguf::RopeScalingType::kLinear) {
    SPINDLE_CHECK(hp.rope_freq_factors.empty(), "{}: both linear RoPE scaling and tensor "
                  "'rope_freqs.weight' are given; Spindle applies one or the other", source);
    c.rope_scaling.type = RopeScaling::kLinear;
    c.rope_scaling.factor = hp.rope_scaling_factor;
  } else if (!hp.rope_freq_factors.empty()) {
    c.rope_scaling = llama3_scaling_from_factors(hp.rope_freq_factors, hp.rope_freq_base, source);
  }
  return c;
}

}  // namespace spindle
