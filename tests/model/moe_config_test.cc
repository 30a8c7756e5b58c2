// The mixture-of-experts fields of ModelConfig (Qwen3-MoE, Mixtral, Qwen2-MoE: transformers'
// Qwen3MoeConfig, MixtralConfig, Qwen2MoeConfig defaults) and the expected weight map of sparse
// layers: per-expert 2-D tensors, the fused 3-D layout of transformers 5, the shared expert.
// The golden folders are tests/golden/*-moe-bf16 and mixtral-bf16 (tools/golden/make_moe_golden.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "golden_fixtures.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weight_map.h"
#include "support/error_of.h"
#include "util/error.h"

namespace spindle {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;
using testing::kGoldenDir;

json golden_config(const std::string& model) {
  return json::parse(read_text_file(kGoldenDir / model / "config.json"));
}

// The message of the spindle::Error that parse_model_config throws for json ("" when none).
std::string parse_error(const json& config) {
  return testing::error_of([&] { parse_model_config(config, "config.json"); });
}

TEST(MoeConfig, Qwen3MoeGolden) {
  const ModelConfig c = load_model_config(kGoldenDir / "qwen3-moe-bf16");
  EXPECT_EQ(c.architecture, Architecture::kQwen3Moe);
  EXPECT_EQ(architecture_name(c.architecture), "Qwen3MoeForCausalLM");
  EXPECT_EQ(c.moe.num_experts, 8);  // saved as num_local_experts by transformers 5
  EXPECT_EQ(c.moe.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe.moe_intermediate_size, 64);
  EXPECT_EQ(c.moe.shared_expert_intermediate_size, 0);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);  // rope_parameters
  EXPECT_TRUE(c.is_moe_layer(0));
  EXPECT_FALSE(c.is_moe_layer(1));  // mlp_only_layers [1]
  EXPECT_TRUE(c.is_moe_layer(2));
}

TEST(MoeConfig, MixtralGolden) {
  const ModelConfig c = load_model_config(kGoldenDir / "mixtral-bf16");
  EXPECT_EQ(c.architecture, Architecture::kMixtral);
  EXPECT_EQ(c.moe.num_experts, 4);
  EXPECT_EQ(c.moe.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe.moe_intermediate_size, 96);  // Mixtral's experts are intermediate_size wide
  EXPECT_TRUE(c.moe.norm_topk_prob);           // softmax over the top-k logits
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.is_moe_layer(0) && c.is_moe_layer(1));
}

TEST(MoeConfig, Qwen2MoeGolden) {
  const ModelConfig c = load_model_config(kGoldenDir / "qwen2-moe-bf16");
  EXPECT_EQ(c.architecture, Architecture::kQwen2Moe);
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.moe_intermediate_size, 64);
  EXPECT_EQ(c.moe.shared_expert_intermediate_size, 128);
  EXPECT_FALSE(c.moe.norm_topk_prob);
  EXPECT_TRUE(c.attention_bias);  // qkv_bias
  EXPECT_FALSE(c.qk_norm);
}

TEST(MoeConfig, DefaultsOfEachArchitecture) {
  json q3 = golden_config("qwen3-moe-bf16");
  q3.erase("norm_topk_prob");
  q3.erase("decoder_sparse_step");
  q3.erase("mlp_only_layers");
  ModelConfig c = parse_model_config(q3, "config.json");
  EXPECT_FALSE(c.moe.norm_topk_prob);  // Qwen3MoeConfig's default
  EXPECT_EQ(c.moe.decoder_sparse_step, 1);
  EXPECT_TRUE(c.moe.mlp_only_layers.empty());

  json q2 = golden_config("qwen2-moe-bf16");
  q2.erase("qkv_bias");
  q2.erase("norm_topk_prob");
  c = parse_model_config(q2, "config.json");
  EXPECT_TRUE(c.attention_bias);  // Qwen2MoeConfig.qkv_bias defaults to true
  EXPECT_FALSE(c.moe.norm_topk_prob);
  q2["qkv_bias"] = false;
  EXPECT_FALSE(parse_model_config(q2, "config.json").attention_bias);

  json mx = golden_config("mixtral-bf16");
  mx["norm_topk_prob"] = false;  // not a Mixtral field: its router always renormalizes
  EXPECT_TRUE(parse_model_config(mx, "config.json").moe.norm_topk_prob);
}

TEST(MoeConfig, NumExpertsSpellings) {
  json c = golden_config("qwen2-moe-bf16");
  c.erase("num_experts");
  c["num_local_experts"] = 6;
  EXPECT_EQ(parse_model_config(c, "config.json").moe.num_experts, 6);
  c.erase("num_local_experts");
  EXPECT_THAT(parse_error(c), HasSubstr("field 'num_experts' (or 'num_local_experts') is missing"));
}

TEST(MoeConfig, SparseStepAndMlpOnlyLayers) {
  json c = golden_config("qwen3-moe-bf16");
  c["num_hidden_layers"] = 6;
  c["decoder_sparse_step"] = 2;
  c["mlp_only_layers"] = {3};
  const ModelConfig m = parse_model_config(c, "config.json");
  std::vector<bool> sparse;
  for (int i = 0; i < 6; ++i) sparse.push_back(m.is_moe_layer(i));
  // (i + 1) % 2 == 0 -> 1, 3, 5; 3 is dense by mlp_only_layers.
  EXPECT_EQ(sparse, (std::vector<bool>{false, true, false, false, false, true}));
}

TEST(MoeConfig, BadFieldsNameTheField) {
  json c = golden_config("qwen3-moe-bf16");
  c["num_experts_per_tok"] = 9;
  EXPECT_THAT(parse_error(c), HasSubstr("'num_experts_per_tok' (9) must not exceed the 8 experts"));
  c = golden_config("qwen3-moe-bf16");
  c.erase("moe_intermediate_size");
  EXPECT_THAT(parse_error(c), HasSubstr("field 'moe_intermediate_size' is missing"));
  c = golden_config("qwen3-moe-bf16");
  c["mlp_only_layers"] = {7};
  EXPECT_THAT(parse_error(c), HasSubstr("field 'mlp_only_layers' holds 7"));
  c = golden_config("qwen2-moe-bf16");
  c.erase("shared_expert_intermediate_size");
  EXPECT_THAT(parse_error(c), HasSubstr("'shared_expert_intermediate_size' is missing"));
  c = golden_config("qwen2-moe-bf16");
  c["shared_expert_intermediate_size"] = 0;  // no shared expert
  EXPECT_EQ(parse_model_config(c, "config.json").moe.shared_expert_intermediate_size, 0);
}

TEST(MoeConfig, SlidingWindowRefusalCoversMoe) {
  json c = golden_config("qwen3-moe-bf16");
  c["use_sliding_window"] = true;
  EXPECT_THAT(parse_error(c), HasSubstr("'use_sliding_window' is true"));
  c = golden_config("qwen2-moe-bf16");
  c["use_sliding_window"] = true;
  EXPECT_THAT(parse_error(c), HasSubstr("'use_sliding_window' is true"));
  c = golden_config("qwen2-moe-bf16");
  c["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_THAT(parse_error(c), HasSubstr("layer_types[1]"));
  c = golden_config("mixtral-bf16");
  c["sliding_window"] = 64;
  EXPECT_THAT(parse_error(c), HasSubstr("sliding-window attention is not supported"));
}

// Every golden checkpoint matches its expected map exactly (nothing missing, nothing extra).
TEST(MoeWeightMap, GoldenCheckpointsMatch) {
  for (const char* model : {"qwen3-moe-bf16", "mixtral-bf16", "qwen2-moe-bf16"}) {
    const Checkpoint checkpoint(kGoldenDir / model);
    const ModelConfig c = load_model_config(kGoldenDir / model);
    EXPECT_EQ(detect_expert_layout(checkpoint.tensors()), ExpertLayout::kPerExpert) << model;
    const WeightCheck check = compare_weights(c, checkpoint.tensors());
    EXPECT_TRUE(check.ok()) << model << check.report();
    uint64_t elements = 0;
    for (const auto& t : checkpoint.tensors()) elements += t.num_elements();
    EXPECT_EQ(parameter_count(c), elements) << model;
  }
}

TEST(MoeWeightMap, NamesPerArchitectureAndLayout) {
  const ModelConfig mx = load_model_config(kGoldenDir / "mixtral-bf16");
  MoeLayerNames n = moe_layer_names(mx, ExpertLayout::kPerExpert, 1);
  EXPECT_EQ(n.router, "model.layers.1.block_sparse_moe.gate.weight");
  EXPECT_EQ(n.expert_gate(3), "model.layers.1.block_sparse_moe.experts.3.w1.weight");
  EXPECT_EQ(n.expert_up(3), "model.layers.1.block_sparse_moe.experts.3.w3.weight");
  EXPECT_EQ(n.expert_down(3), "model.layers.1.block_sparse_moe.experts.3.w2.weight");
  n = moe_layer_names(mx, ExpertLayout::kFused3d, 1);  // transformers 5 renames block_sparse_moe to mlp
  EXPECT_EQ(n.router, "model.layers.1.mlp.gate.weight");
  EXPECT_EQ(n.gate_up, "model.layers.1.mlp.experts.gate_up_proj");
  EXPECT_EQ(n.down, "model.layers.1.mlp.experts.down_proj");
  const ModelConfig q2 = load_model_config(kGoldenDir / "qwen2-moe-bf16");
  n = moe_layer_names(q2, ExpertLayout::kPerExpert, 0);
  EXPECT_EQ(n.expert_gate(7), "model.layers.0.mlp.experts.7.gate_proj.weight");
  EXPECT_EQ(n.shared_expert_gate, "model.layers.0.mlp.shared_expert_gate.weight");
  const auto fused = expected_tensors(q2, ExpertLayout::kFused3d);
  auto find = [&](const std::string& name) {
    for (const auto& t : fused) {
      if (t.name == name) return t.shape;
    }
    return std::vector<int64_t>{};
  };
  EXPECT_EQ(find("model.layers.0.mlp.experts.gate_up_proj"), (std::vector<int64_t>{8, 128, 128}));
  EXPECT_EQ(find("model.layers.0.mlp.experts.down_proj"), (std::vector<int64_t>{8, 128, 64}));
  EXPECT_EQ(find("model.layers.0.mlp.experts.0.gate_proj.weight"), std::vector<int64_t>{});
}

// Active parameters: the router, k of E experts and the shared expert per sparse layer.
TEST(MoeWeightMap, ActiveParameters) {
  const ModelConfig c = load_model_config(kGoldenDir / "qwen3-moe-bf16");
  const uint64_t expert = 3ull * 64 * 128;
  // Two sparse layers (0 and 2) each read 2 of 8 experts.
  EXPECT_EQ(parameter_count(c) - active_parameter_count(c), 2 * 6 * expert);
  const ModelConfig dense = load_model_config(kGoldenDir / "qwen3-qknorm-bf16");
  EXPECT_EQ(parameter_count(dense), active_parameter_count(dense));
}

// A missing expert and a wrongly shaped router are named.
TEST(MoeWeightMap, ErrorsNameTheTensor) {
  testing::TempDir dir;
  testing::rewrite_golden_checkpoint("qwen2-moe-bf16", dir.path(), "model.layers.1.mlp.experts.5.up_proj.weight", "",
                                     false);
  const ModelConfig c = load_model_config(dir.path());
  const WeightCheck check = compare_weights(c, Checkpoint(dir.path()).tensors());
  ASSERT_EQ(check.missing.size(), 1u);
  EXPECT_THAT(check.missing[0], HasSubstr("model.layers.1.mlp.experts.5.up_proj.weight [64, 128]"));
  try {
    check_weights(c, Checkpoint(dir.path()));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("model.layers.1.mlp.experts.5.up_proj.weight"));
  }
}

}  // namespace
}  // namespace spindle
