// What load_cpu_model and load_cuda_model share when they load a model folder, so both accept and reject
// exactly the same folders with the same messages.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace spindle {

struct ModelFiles {
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;
};

// Reads dir/config.json, maps (or, with FileMemory::kHugePageCopy, reads) the checkpoint and checks
// every weight's name, shape and dtype (check_weights). Throws spindle::Error naming the folder.
ModelFiles open_model_files(const std::filesystem::path& dir, FileMemory memory = FileMemory::kMapped);

// True when the LM head reads model.embed_tokens.weight: tie_word_embeddings, or a checkpoint
// without lm_head.weight.
bool lm_head_is_tied(const ModelConfig& config, const Checkpoint& checkpoint);

// A tensor (F32, BF16 or F16) widened to f32, e.g. a bias.
std::vector<float> tensor_to_f32(const TensorView& view);

// The RoPE parameters of the config (head_dim, theta, default / linear / llama3 scaling).
kernels::cpu::RopeParams rope_params(const ModelConfig& config);

// Positions whose cos/sin are precomputed: `requested` when > 0, else max_position_embeddings
// (at least 1) capped at 1 << 20.
int64_t rope_table_positions(const ModelConfig& config, int64_t requested);

}  // namespace spindle
