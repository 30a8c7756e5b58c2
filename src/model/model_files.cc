#include "model/model_files.h"

#include <algorithm>

#include "model/weight_map.h"

namespace spindle {

ModelFiles open_model_files(const std::filesystem::path& dir, FileMemory memory) {
  ModelFiles files;
  files.config = load_model_config(dir);
  files.checkpoint = std::make_unique<Checkpoint>(dir, memory);
  check_weights(files.config, *files.checkpoint);
  return files;
}

bool lm_head_is_tied(const ModelConfig& config, const Checkpoint& checkpoint) {
  return config.tie_word_embeddings || checkpoint.find("lm_head.weight") == nullptr;
}

std::vector<float> tensor_to_f32(const TensorView& view) {
  std::vector<float> out(view.info->num_elements());
  kernels::cpu::embedding_gather({view.bytes.data(), view.info->dtype}, 1, static_cast<int64_t>(out.size()),
                                 std::vector<int32_t>{0}, out.data());
  return out;
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
