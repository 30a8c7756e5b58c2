#include "model/model_files.h"

#include <algorithm>

#include "model/fp8_quantize.h"
#include "model/gguf_model_config.h"
#include "model/gguf_weights.h"
#include "model/weight_map.h"
#include "util/error.h"

namespace spindle {

ModelFiles open_model_files(const std::filesystem::path& path, FileMemory memory, bool quantize_fp8) {
  ModelFiles files;
  SPINDLE_CHECK(!quantize_fp8 || !is_gguf_path(path),
                "{}: --quantization fp8 takes a Hugging Face folder of bf16, f16 or f32 weights, not a GGUF file",
                path.string());
  if (is_gguf_path(path)) {
    auto gguf = std::make_unique<GgufWeights>(path, memory);
    files.config = gguf->config();
    files.weights = std::move(gguf);
    return files;
  }
  files.config = load_model_config(path);
  auto checkpoint = std::make_unique<Checkpoint>(path, memory);
  check_weights(files.config, *checkpoint);
  files.weights = std::make_unique<CheckpointWeights>(std::move(checkpoint), files.config.fp8);
  if (quantize_fp8) {
    SPINDLE_CHECK(!files.config.fp8, "{}: --quantization fp8 was given, but the checkpoint is FP8 already ({}); "
                  "serve it without --quantization", path.string(), files.config.fp8->method);
    files.weights = std::make_unique<Fp8QuantizedWeights>(std::move(files.weights));
  }
  return files;
}

bool lm_head_is_tied(const ModelConfig& config, const WeightSource& weights) {
  return config.tie_word_embeddings || !weights.contains("lm_head.weight");
}

kernels::cpu::RopeParams rope_params(const ModelConfig& c) {
  namespace kc = kernels::cpu;
  kc::RopeParams rope;
  rope.head_dim = c.head_dim;
  rope.theta = c.rope_theta;
  rope.factor = c.rope_scaling.factor;
  rope.low_freq_factor = c.rope_scaling.low_freq_factor;
  rope.high_freq_factor = c.rope_scaling.high_freq_factor;
  rope.original_max_position_embeddings = c.rope_scaling.original_max_position_embeddings;
  switch (c.rope_scaling.type) {
    case RopeScaling::kNone: rope.scaling = kc::RopeParams::kNone; break;
    case RopeScaling::kLinear: rope.scaling = kc::RopeParams::kLinear; break;
    case RopeScaling::kLlama3: rope.scaling = kc::RopeParams::kLlama3; break;
  }
  return rope;
}

int64_t rope_table_positions(const ModelConfig& config, int64_t requested) {
  if (requested > 0) return requested;
  return std::min<int64_t>(std::max(config.max_position_embeddings, 1), int64_t{1} << 20);
}

}  // namespace spindle
