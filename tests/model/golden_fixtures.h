// Test helpers: the Hugging Face golden fixtures of tests/golden (made by
// tools/golden/make_golden.py; models/kjv-tiny's by tools/train_tiny) and the comparisons the
// model tests make against them, and rewritten copies of the golden checkpoints. Shared by
// tests/model and tests/cuda.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "safetensors_writer.h"
#include "util/dtype.h"
#include "util/half.h"

namespace spindle::testing {

inline const std::filesystem::path kGoldenDir = std::filesystem::path(SPINDLE_FIXTURES_DIR) / ".." / "golden";

struct GoldenPrompt {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<float> last_logits;  // HF's logits of the last prompt token
  std::vector<int32_t> greedy;     // HF's greedy continuation
};

inline std::vector<GoldenPrompt> read_golden(const std::string& model) {
  std::ifstream in(kGoldenDir / model / "golden.json");
  EXPECT_TRUE(in.good()) << "cannot read golden.json of " << model;
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<GoldenPrompt> out;
  for (const auto& p : j.at("prompts")) {
    out.push_back({p.at("text").get<std::string>(), p.at("ids").get<std::vector<int32_t>>(),
                   p.at("last_logits").get<std::vector<float>>(), p.at("greedy").get<std::vector<int32_t>>()});
  }
  return out;
}

// Relative error of a logits row: max_i |ours_i - golden_i| / max_i |golden_i|.
inline double relative_error(std::span<const float> ours, std::span<const float> golden) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < golden.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(double{ours[i]} - golden[i]));
    max_ref = std::max(max_ref, std::abs(double{golden[i]}));
  }
  return max_diff / max_ref;
}

inline int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// The model folder of a golden case: tests/golden/<model>, except the embedded model, which lives
// in models/ (its fixtures in tests/golden/kjv-tiny).
inline std::filesystem::path model_dir(const std::string& model) {
  if (model == "kjv-tiny") return kGoldenDir / ".." / ".." / "models" / "kjv-tiny";
  return kGoldenDir / model;
}

// bf16 checkpoints: the *-bf16 fixtures and kjv-tiny.
inline bool is_bf16_model(const std::string& model) { return model.ends_with("bf16") || model == "kjv-tiny"; }

// Copies the golden model `model` (config.json and its tensors) into dir without tensor `drop`,
// with the F32 tensor `f16` converted to F16 (each "" for none), and with the tensors in reverse
// name order when reverse_order (so gate_proj and up_proj are no longer back to back).
inline void rewrite_golden_checkpoint(const std::string& model, const std::filesystem::path& dir,
                                      const std::string& drop, const std::string& f16, bool reverse_order) {
  std::filesystem::copy_file(kGoldenDir / model / "config.json", dir / "config.json");
  const Checkpoint checkpoint(kGoldenDir / model);
  std::vector<NamedTensor> tensors;
  for (const auto& info : checkpoint.tensors()) {
    if (info.name == drop) continue;
    const TensorView view = checkpoint.tensor(info.name);
    NamedTensor t{info.name, info.dtype, info.shape, {view.bytes.begin(), view.bytes.end()}};
    if (info.name == f16) {
      ASSERT_EQ(info.dtype, DType::kF32);
      const auto* f = reinterpret_cast<const float*>(view.bytes.data());
      t.dtype = DType::kF16;
      t.data.resize(info.num_elements() * 2);
      for (uint64_t i = 0; i < info.num_elements(); ++i) {
        const uint16_t h = float_to_fp16_bits(f[i]);
        std::memcpy(t.data.data() + 2 * i, &h, 2);
      }
    }
    tensors.insert(reverse_order ? tensors.begin() : tensors.end(), std::move(t));
  }
  write_safetensors(dir / "model.safetensors", tensors);
}

}  // namespace spindle::testing
