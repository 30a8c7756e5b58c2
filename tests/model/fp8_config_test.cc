// parse_quantization_config (model/fp8_config.h): the FP8 formats accepted, every other one
// refused naming the field and what it holds; the not-converted module lists.
#include "model/fp8_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace spindle {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::optional<Fp8Quantization> parse(const json& q) { return parse_quantization_config({{"quantization_config", q}}, "m/config.json"); }

std::string error_of(const json& q) {
  try {
    parse(q);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

json ct_group(const std::string& strategy, bool dynamic_input) {
  return {{"weights", {{"type", "float"}, {"num_bits", 8}, {"symmetric", true}, {"dynamic", false}, {"strategy", strategy}}},
          {"input_activations", {{"type", "float"}, {"num_bits", 8}, {"dynamic", dynamic_input}}}};
}

TEST(Fp8Config, AbsentIsUnquantized) {
  EXPECT_FALSE(parse_quantization_config(json::object(), "c").has_value());
  EXPECT_FALSE(parse_quantization_config({{"quantization_config", nullptr}}, "c").has_value());
}

TEST(Fp8Config, BlockFp8) {  // Qwen3-*-FP8's quantization_config
  const auto f = parse({{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}});
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->mode, Fp8ScaleMode::kBlock128);
  EXPECT_EQ(f->scale_suffixes, std::vector<std::string>{"weight_scale_inv"});
  EXPECT_FALSE(f->static_input_scale);
  EXPECT_EQ(fp8_scale_shapes(f->mode, 300, 200), (std::vector<std::vector<int64_t>>{{3, 2}}));
}

TEST(Fp8Config, PerTensorFp8TakesEitherScaleName) {
  const auto f = parse({{"quant_method", "fp8"}, {"activation_scheme", "static"}, {"ignored_layers", {"lm_head"}}});
  EXPECT_EQ(f->mode, Fp8ScaleMode::kPerTensor);
  EXPECT_EQ(f->scale_suffixes, (std::vector<std::string>{"weight_scale", "weight_scale_inv"}));
  EXPECT_TRUE(f->static_input_scale);
  EXPECT_TRUE(f->is_ignored("lm_head"));
  EXPECT_FALSE(f->is_ignored("model.layers.0.mlp.up_proj"));
}

TEST(Fp8Config, CompressedTensors) {
  auto f = parse({{"quant_method", "compressed-tensors"}, {"format", "float-quantized"},
                  {"config_groups", {{"group_0", ct_group("channel", true)}}}, {"ignore", {"lm_head", "re:.*mlp\\.gate$"}}});
  EXPECT_EQ(f->mode, Fp8ScaleMode::kPerChannel);
  EXPECT_FALSE(f->static_input_scale);
  EXPECT_TRUE(f->is_ignored("model.layers.3.mlp.gate"));
  EXPECT_FALSE(f->is_ignored("model.layers.3.mlp.gate_proj"));
  EXPECT_TRUE(f->is_ignored("lm_head"));
  f = parse({{"quant_method", "compressed-tensors"}, {"config_groups", {{"g", ct_group("tensor", false)}}}});
  EXPECT_EQ(f->mode, Fp8ScaleMode::kPerTensor);
  EXPECT_TRUE(f->static_input_scale);
}

// kv_cache_scheme (LLM Compressor's FP8 KV cache): 8-bit float, per tensor or per attention head,
// accepted (its scales are read by model/kv_scale_tensors.h); anything else is refused by name.
TEST(Fp8Config, CompressedTensorsKvCacheScheme) {
  for (const char* strategy : {"tensor", "attn_head"}) {
    EXPECT_TRUE(parse({{"quant_method", "compressed-tensors"}, {"config_groups", {{"g", ct_group("channel", true)}}},
                       {"kv_cache_scheme", {{"num_bits", 8}, {"type", "float"}, {"strategy", strategy}, {"dynamic", false}}}})
                    .has_value())
        << strategy;
  }
  EXPECT_THAT(error_of({{"quant_method", "compressed-tensors"}, {"config_groups", {{"g", ct_group("channel", true)}}},
                        {"kv_cache_scheme", {{"num_bits", 8}, {"type", "int"}}}}),
              HasSubstr("only 8-bit float (E4M3) KV-cache scales are supported"));
  EXPECT_THAT(error_of({{"quant_method", "compressed-tensors"}, {"config_groups", {{"g", ct_group("channel", true)}}},
                        {"kv_cache_scheme", {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}}}}),
              HasSubstr("'quantization_config.kv_cache_scheme.strategy' is \"channel\""));
}

TEST(Fp8Config, OtherFormatsRefusedByName) {
  EXPECT_THAT(error_of({{"quant_method", "awq"}}), HasSubstr("m/config.json: field 'quantization_config' has quant_method 'awq'"));
  EXPECT_THAT(error_of({{"quant_method", "gptq"}}), HasSubstr("'gptq', which is not supported"));
  EXPECT_THAT(error_of({{"bits", 4}}), HasSubstr("quant_method '?'"));
  EXPECT_THAT(error_of({{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}}),
              HasSubstr("'quantization_config.weight_block_size' is [64,64]; only [128, 128]"));
  EXPECT_THAT(error_of({{"quant_method", "fp8"}, {"fmt", "e5m2"}}), HasSubstr("only \"e4m3\""));
  json int4 = ct_group("group", true);
  int4["weights"]["type"] = "int";
  int4["weights"]["num_bits"] = 4;
  EXPECT_THAT(error_of({{"quant_method", "compressed-tensors"}, {"config_groups", {{"group_0", int4}}}}),
              HasSubstr("'quantization_config.config_groups.group_0.weights' is"));
  EXPECT_THAT(error_of({{"quant_method", "compressed-tensors"}, {"config_groups", {{"g", ct_group("block", true)}}}}),
              HasSubstr("strategy' is \"block\""));
  EXPECT_THAT(error_of({{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"},
                        {"config_groups", {{"g", ct_group("channel", true)}}}}),
              HasSubstr("'quantization_config.format' is \"pack-quantized\""));
  EXPECT_THAT(error_of({{"quant_method", "compressed-tensors"}, {"config_groups", {{"g", ct_group("channel", true)}}},
                        {"kv_cache_scheme", {{"num_bits", 8}}}}),
              HasSubstr("kv_cache_scheme"));
  EXPECT_THAT(error_of({{"quant_method", "compressed-tensors"},
                        {"config_groups", {{"a", ct_group("channel", true)}, {"b", ct_group("tensor", true)}}}}),
              HasSubstr("mixes per-tensor and per-channel"));
}

}  // namespace
}  // namespace spindle
