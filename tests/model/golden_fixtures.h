// Test helpers: the Hugging Face golden fixtures of tests/golden (made by
// tools/golden/make_golden.py; models/kjv-tiny's by tools/train_tiny) and the comparisons the
// model tests make against them. Shared by tests/model and tests/cuda.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

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

}  // namespace spindle::testing
