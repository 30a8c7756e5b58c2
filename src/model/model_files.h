// What load_cpu_model and load_cuda_model share when they load a model (a Hugging Face folder or a
// GGUF file), so both accept and reject exactly the same models with the same messages.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weight_view.h"

namespace spindle {

struct ModelFiles {
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;  // CheckpointWeights or GgufWeights (model/gguf_weights.h)
};

// A folder: reads dir/config.json, maps (or, with FileMemory::kHugePageCopy, reads) the checkpoint
// and checks every weight's name, shape and dtype (check_weights). A .gguf file (is_gguf_path):
// the config from its metadata and its tensors checked (GgufWeights). quantize_fp8 (--quantization
// fp8): an unquantized folder's linear weights quantized per channel at load (fp8_quantize.h); a GGUF
// file or an FP8 folder is then an error. Throws spindle::Error naming the folder or file.
ModelFiles open_model_files(const std::filesystem::path& path, FileMemory memory = FileMemory::kMapped,
                            bool quantize_fp8 = false);

// True when the LM head reads model.embed_tokens.weight: tie_word_embeddings, or a checkpoint
// without lm_head.weight.
bool lm_head_is_tied(const ModelConfig& config, const WeightSource& weights);

// The RoPE parameters of the config (head_dim, theta, default / linear / llama3 scaling).
kernels::cpu::RopeParams rope_params(const ModelConfig& config);

// Positions whose cos/sin are precomputed: `requested` when > 0, else max_position_embeddings
// (at least 1) capped at 1 << 20.
int64_t rope_table_positions(const ModelConfig& config, int64_t requested);

}  // namespace spindle
