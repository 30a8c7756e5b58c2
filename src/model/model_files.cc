#include "model/model_files.h"

#include <algorithm>

#include "model/gguf_model_config.h"
#include "model/gguf_weights.h"
#include "model/weight_map.h"

namespace spindle {

ModelFiles open_model_files(const std::filesystem::path& path, FileMemory memory) {
  ModelFiles files;
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
