// The expected-tensor list per architecture and check_weights on small written checkpoints.
#include "model/weight_map.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "safetensors_writer.h"
#include "util/error.h"

namespace spindle {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::NamedTensor;
using testing::random_tensor;
using testing::TempDir;
using testing::write_safetensors;
using testing::write_sharded_checkpoint;

// A tiny model: vocab 32, hidden 16, 4 heads of head_dim 8 (explicit: q_size 32 != hidden),
// 2 kv heads, intermediate 24, 2 layers.
ModelConfig tiny_config(const std::string& architecture, bool tie = false) {
  nlohmann::json j = {{"architectures", {architecture}},
                      {"vocab_size", 32},
                      {"hidden_size", 16},
                      {"intermediate_size", 24},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"head_dim", 8},
                      {"max_position_embeddings", 64},
                      {"tie_word_embeddings", tie}};
  return parse_model_config(j, "config.json");
}

std::vector<NamedTensor> tensors_for(const ModelConfig& config) {
  std::vector<NamedTensor> out;
  uint32_t seed = 0;
  for (const auto& e : expected_tensors(config)) {
    if (!e.optional) out.push_back(random_tensor(e.name, DType::kBF16, e.shape, ++seed));
  }
  return out;
}

std::string check_error(const ModelConfig& config, const std::filesystem::path& dir) {
  try {
    check_weights(config, Checkpoint(dir));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has_tensor(const std::vector<ExpectedTensor>& list, const std::string& name) {
  return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.name == name; });
}

TEST(WeightMap, ExpectedTensorsPerArchitecture) {
  const auto llama = expected_tensors(tiny_config("LlamaForCausalLM"));
  EXPECT_EQ(llama.size(), 3u + 2 * 9);  // embed, norm, lm_head + 9 per layer
  EXPECT_EQ(llama.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(llama.front().shape, (std::vector<int64_t>{32, 16}));
  EXPECT_TRUE(has_tensor(llama, "model.layers.1.mlp.down_proj.weight"));
  EXPECT_FALSE(has_tensor(llama, "model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(llama.back().optional);  // lm_head, untied

  const auto qwen2 = expected_tensors(tiny_config("Qwen2ForCausalLM", /*tie=*/true));
  EXPECT_EQ(qwen2.size(), 3u + 2 * 12);
  EXPECT_TRUE(has_tensor(qwen2, "model.layers.0.self_attn.k_proj.bias"));
  EXPECT_TRUE(qwen2.back().optional);

  const auto qwen3 = expected_tensors(tiny_config("Qwen3ForCausalLM"));
  EXPECT_EQ(qwen3.size(), 3u + 2 * 11);
  EXPECT_TRUE(has_tensor(qwen3, "model.layers.1.self_attn.q_norm.weight"));
  for (const auto& e : qwen3) {
    if (e.name == "model.layers.0.self_attn.q_proj.weight") {
      EXPECT_EQ(e.shape, (std::vector<int64_t>{32, 16}));
    }
    if (e.name == "model.layers.0.self_attn.o_proj.weight") {
      EXPECT_EQ(e.shape, (std::vector<int64_t>{16, 32}));
    }
    if (e.name == "model.layers.0.self_attn.v_proj.weight") {
      EXPECT_EQ(e.shape, (std::vector<int64_t>{16, 16}));
    }
    if (e.name == "model.layers.0.self_attn.k_norm.weight") {
      EXPECT_EQ(e.shape, (std::vector<int64_t>{8}));
    }
  }
}

TEST(WeightMap, CompleteModelPasses) {
  for (const std::string arch :
       {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    TempDir dir;
    const ModelConfig config = tiny_config(arch);
    const auto tensors = tensors_for(config);
    write_safetensors(dir.path() / "model.safetensors", tensors);
    EXPECT_EQ(check_error(config, dir.path()), "") << arch;

    const WeightStats stats = weight_stats(Checkpoint(dir.path()));
    EXPECT_EQ(stats.num_parameters, parameter_count(config)) << arch;
    EXPECT_EQ(stats.num_bytes, 2 * parameter_count(config));
    EXPECT_EQ(stats.bytes_per_dtype.at(DType::kBF16), stats.num_bytes);
  }
}

TEST(WeightMap, TiedModelToleratesLmHead) {
  TempDir dir;
  const ModelConfig config = tiny_config("Qwen3ForCausalLM", /*tie=*/true);
  auto tensors = tensors_for(config);
  write_sharded_checkpoint(dir.path(), {tensors});
  EXPECT_EQ(check_error(config, dir.path()), "");  // no lm_head
  tensors.push_back(random_tensor("lm_head.weight", DType::kBF16, {32, 16}));
  tensors.push_back(random_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", DType::kF32, {4}));
  TempDir dir2;
  write_sharded_checkpoint(dir2.path(), {tensors});
  EXPECT_EQ(check_error(config, dir2.path()), "");  // lm_head present anyway; inv_freq ignored
}

TEST(WeightMap, MissingWrongShapeAndUnexpectedAreAllListed) {
  TempDir dir;
  const ModelConfig config = tiny_config("LlamaForCausalLM");
  auto tensors = tensors_for(config);
  std::erase_if(tensors, [](const NamedTensor& t) {
    return t.name == "model.layers.1.mlp.up_proj.weight" || t.name == "lm_head.weight";
  });
  for (auto& t : tensors) {
    if (t.name == "model.layers.0.self_attn.k_proj.weight") {
      t = random_tensor(t.name, DType::kBF16, {8, 16});
    }
    if (t.name == "model.norm.weight") t = random_tensor(t.name, DType::kI8, {16});
  }
  tensors.push_back(random_tensor("model.layers.0.self_attn.q_proj.bias", DType::kBF16, {32}));
  write_safetensors(dir.path() / "model.safetensors", tensors);
  const std::string error = check_error(config, dir.path());
  EXPECT_THAT(error, AllOf(HasSubstr("the checkpoint does not match config.json (LlamaForCausalLM"),
                           HasSubstr("missing tensors (2)"),
                           HasSubstr("model.layers.1.mlp.up_proj.weight [24, 16]"),
                           HasSubstr("lm_head.weight [32, 16]"),
                           HasSubstr("shape mismatches (1)"),
                           HasSubstr("model.layers.0.self_attn.k_proj.weight: expected [16, 16], "
                                     "found [8, 16]"),
                           HasSubstr("model.norm.weight: I8 (weights must be F32, F16 or BF16)"),
                           HasSubstr("unexpected tensors (1)"),
                           HasSubstr("model.layers.0.self_attn.q_proj.bias [32] BF16")));
}

TEST(WeightMap, LongListsAreCapped) {
  const ModelConfig config = tiny_config("LlamaForCausalLM");
  const WeightCheck check = compare_weights(config, {});
  EXPECT_EQ(check.missing.size(), 21u);
  const std::string report = check.report();
  EXPECT_THAT(report, HasSubstr("missing tensors (21)"));
  EXPECT_THAT(report, HasSubstr("and 1 more"));
  EXPECT_THAT(report, Not(HasSubstr("lm_head.weight")));  // the 21st, past the cap
}

}  // namespace
}  // namespace spindle
