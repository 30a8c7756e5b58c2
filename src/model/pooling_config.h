// How /v1/embeddings pools a model's hidden states, from the folder's sentence-transformers
// configuration (modules.json naming a sentence_transformers.models.Pooling module, whose folder's
// config.json sets pooling_mode_lasttoken, pooling_mode_mean_tokens, pooling_mode_cls_token, ...).
// A folder without one (or a GGUF file) pools the last token, as vLLM does for decoder models.
// The hidden state pooled is the final normed one (HF *Model's last_hidden_state).
#pragma once

#include <filesystem>
#include <string>

namespace spindle {

struct PoolingConfig {
  enum class Mode { kLastToken, kMeanTokens, kClsToken };
  Mode mode = Mode::kLastToken;
  // Where it came from: "default (no sentence-transformers config)" or the file read.
  std::string source = "default (no sentence-transformers config)";
  // The mode as sentence-transformers names it ("lasttoken", "mean", "cls").
  std::string mode_name() const;
};

// Reads `model_dir`/modules.json and its Pooling module's config.json when present (a file path,
// such as a GGUF file, or a folder without modules.json: the default). Throws spindle::Error
// naming the file and key for a malformed file, and for a pooling mode other than one of the
// three, or several at once.
PoolingConfig read_pooling_config(const std::filesystem::path& model_dir);

}  // namespace spindle
