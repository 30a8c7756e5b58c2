// Paths and loaders for the Hugging Face golden fixtures in tests/golden.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "util/mapped_file.h"

namespace spindle::tokenizer::testing {

inline std::filesystem::path golden_dir() { return std::filesystem::path(SPINDLE_FIXTURES_DIR) / ".." / "golden"; }

inline std::filesystem::path golden_tokenizer_dir(const std::string& name) {
  return golden_dir() / "tokenizers" / name;
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  return nlohmann::json::parse(read_text_file(path));
}

inline const char* const kGoldenTokenizers[] = {"bytelevel-llama3", "bytelevel-qwen2", "metaspace"};

inline const char* const kGoldenModels[] = {"llama-gqa-f32",    "llama-gqa-bf16",    "qwen2-tied-f32",
                                            "qwen2-tied-bf16",  "qwen3-qknorm-f32",  "qwen3-qknorm-bf16",
                                            "mistral-f32",      "mistral-bf16"};

}  // namespace spindle::tokenizer::testing
