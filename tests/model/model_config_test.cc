// ModelConfig parsing against config.json files of real models (public fields copied from their
// Hugging Face repositories into tests/fixtures/models), and the errors for bad configs.
#include "model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/llama32_1b_expectations.h"
#include "model/weight_map.h"
#include "support/error_of.h"
#include "util/error.h"

namespace spindle {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

const std::filesystem::path kModels = std::filesystem::path(SPINDLE_FIXTURES_DIR) / "models";

json read_fixture(const std::string& name) {
  return json::parse(read_text_file(kModels / name / "config.json"));
}

// The message of the spindle::Error that parse_model_config throws for json ("" when none).
std::string parse_error(const json& config) {
  return testing::error_of([&] { parse_model_config(config, "config.json"); });
}

TEST(ModelConfig, Llama32_1B) {
  const ModelConfig c = load_model_config(kModels / "llama-3.2-1b");
  testing::expect_llama32_1b_shape(c);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{128001});
  EXPECT_FALSE(c.sliding_window.has_value());
  // 16 layers * 2 (K, V) * 8 kv heads * 64 * 2 bytes
  EXPECT_EQ(kv_bytes_per_token(c, DType::kBF16), 32768u);
  EXPECT_EQ(kv_bytes_per_token(c, DType::kF8E4M3), 16384u);
  EXPECT_EQ(kv_bytes_per_token(c, DType::kBF16, /*tp_size=*/2), 16384u);
  EXPECT_EQ(kv_bytes_per_token(c, DType::kBF16, /*tp_size=*/16), 4096u);  // at least 1 head
  EXPECT_EQ(parameter_count(c), 1'235'814'400u);  // "1.24B" on the model card
}

TEST(ModelConfig, Qwen25_05B) {
  const ModelConfig c = load_model_config(kModels / "qwen2.5-0.5b");
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.intermediate_size, 4864);
  EXPECT_EQ(c.num_hidden_layers, 24);
  EXPECT_EQ(c.num_attention_heads, 14);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 64);  // 896 / 14
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kNone);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);  // Qwen2 q/k/v projections carry a bias
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.sliding_window.has_value());  // use_sliding_window: false
  EXPECT_EQ(c.bos_token_ids, std::vector<int>{151643});
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{151643});
  // 24 * 2 * 2 * 64 * 2
  EXPECT_EQ(kv_bytes_per_token(c, DType::kBF16), 12288u);
  EXPECT_EQ(kv_bytes_per_token(c, DType::kBF16, /*tp_size=*/4), 6144u);  // max(1, 2/4) = 1
  EXPECT_EQ(parameter_count(c), 494'032'768u);  // "0.49B" on the model card
}

TEST(ModelConfig, Qwen3_06B) {
  const ModelConfig c = load_model_config(kModels / "qwen3-0.6b");
  EXPECT_EQ(c.architecture, Architecture::kQwen3);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // explicit, not 1024 / 16
  EXPECT_EQ(c.q_size(), 2048);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{151645});
  // 28 * 2 * 8 * 128 * 2
  EXPECT_EQ(kv_bytes_per_token(c, DType::kBF16), 114688u);
  EXPECT_EQ(parameter_count(c), 596'049'920u);
}

TEST(ModelConfig, Mistral7B_v03) {
  const ModelConfig c = load_model_config(kModels / "mistral-7b-v0.3");
  EXPECT_EQ(c.architecture, Architecture::kMistral);
  EXPECT_EQ(c.vocab_size, 32768);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.bos_token_ids, std::vector<int>{1});
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  // 32 * 2 * 8 * 128 * 2
  EXPECT_EQ(kv_bytes_per_token(c, DType::kBF16), 131072u);
  EXPECT_EQ(kv_bytes_per_token(c, DType::kF32), 262144u);
  EXPECT_EQ(parameter_count(c), 7'248'023'552u);
}

// transformers 5 writes rope_theta and the scaling into "rope_parameters" (the golden models
// under tests/golden were saved by transformers 5.17).
TEST(ModelConfig, RopeParametersOfTransformers5) {
  const auto golden = std::filesystem::path(SPINDLE_FIXTURES_DIR) / ".." / "golden";
  const ModelConfig llama = load_model_config(golden / "llama-gqa-f32");
  EXPECT_EQ(llama.rope_theta, 500000.0);
  EXPECT_EQ(llama.rope_scaling.type, RopeScaling::kLlama3);
  EXPECT_EQ(llama.rope_scaling.factor, 8.0);
  EXPECT_EQ(llama.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(llama.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(llama.rope_scaling.original_max_position_embeddings, 64);
  const ModelConfig qwen = load_model_config(golden / "qwen2-tied-f32");
  EXPECT_EQ(qwen.rope_theta, 1000000.0);
  EXPECT_EQ(qwen.rope_scaling.type, RopeScaling::kNone);

  json j = read_fixture("qwen2.5-0.5b");
  j["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_THAT([&] { parse_model_config(j, "config.json"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("layer_types[1]")));
}

TEST(ModelConfig, Defaults) {
  json j = {{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 100},
            {"hidden_size", 64},  {"intermediate_size", 128},
            {"num_hidden_layers", 2}, {"num_attention_heads", 4},
            {"max_position_embeddings", 256}};
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.torch_dtype, DType::kF32);
  EXPECT_TRUE(c.bos_token_ids.empty());
  EXPECT_TRUE(c.eos_token_ids.empty());
}

TEST(ModelConfig, TokenIdLists) {
  json j = read_fixture("llama-3.2-1b");
  j["eos_token_id"] = {128001, 128008, 128009};
  j["bos_token_id"] = nullptr;
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_TRUE(c.bos_token_ids.empty());
  j["eos_token_id"] = {1, "x"};
  EXPECT_THAT(parse_error(j), HasSubstr("field 'eos_token_id' must be a token id"));
  j["eos_token_id"] = 128256;
  EXPECT_THAT(parse_error(j), HasSubstr("outside the vocabulary [0, 128256)"));
}

TEST(ModelConfig, UnknownArchitecture) {
  json j = read_fixture("llama-3.2-1b");
  j["architectures"] = {"GPT2LMHeadModel"};
  const std::string error = parse_error(j);
  EXPECT_THAT(error, HasSubstr("config.json: architecture 'GPT2LMHeadModel'"));
  EXPECT_THAT(error, HasSubstr("LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                               "Qwen3ForCausalLM"));
  j.erase("architectures");
  EXPECT_THAT(parse_error(j), HasSubstr("config.json: field 'architectures' is missing"));
}

TEST(ModelConfig, WrongTypes) {
  json j = read_fixture("llama-3.2-1b");
  j["hidden_size"] = "abc";
  EXPECT_THAT(parse_error(j),
              HasSubstr("config.json: field 'hidden_size' must be a positive integer, got \"abc\""));
  j = read_fixture("llama-3.2-1b");
  j["num_hidden_layers"] = 0;
  EXPECT_THAT(parse_error(j), HasSubstr("field 'num_hidden_layers' must be a positive integer, "
                                        "got 0"));
  j = read_fixture("llama-3.2-1b");
  j["vocab_size"] = 3000000000u;
  EXPECT_THAT(parse_error(j), HasSubstr("field 'vocab_size' must be a positive integer"));
  j = read_fixture("llama-3.2-1b");
  j["tie_word_embeddings"] = "yes";
  EXPECT_THAT(parse_error(j), HasSubstr("field 'tie_word_embeddings' must be true or false"));
  j = read_fixture("llama-3.2-1b");
  j["rope_theta"] = -1;
  EXPECT_THAT(parse_error(j), HasSubstr("field 'rope_theta' must be a positive number, got -1"));
  j = read_fixture("llama-3.2-1b");
  j["rope_scaling"]["factor"] = "big";
  EXPECT_THAT(parse_error(j), HasSubstr("field 'rope_scaling.factor' must be a positive number"));
  j = read_fixture("llama-3.2-1b");
  j.erase("intermediate_size");
  EXPECT_THAT(parse_error(j), HasSubstr("field 'intermediate_size' is missing"));
  j = read_fixture("llama-3.2-1b");
  j["torch_dtype"] = "float64";
  EXPECT_THAT(parse_error(j), HasSubstr("field 'torch_dtype' must be one of"));
  EXPECT_THAT(parse_error(json::array()), HasSubstr("config.json: must hold a JSON object"));
}

TEST(ModelConfig, SlidingWindowInUse) {
  json j = read_fixture("mistral-7b-v0.3");
  j["sliding_window"] = 4096;  // Mistral-7B-v0.1
  EXPECT_THAT(parse_error(j), HasSubstr("config.json: field 'sliding_window' is 4096"));
  EXPECT_THAT(parse_error(j), HasSubstr("sliding-window attention is not supported"));
  j["sliding_window"] = 32768;  // covers every position: no window in effect
  EXPECT_EQ(parse_error(j), "");

  j = read_fixture("qwen2.5-0.5b");
  j["use_sliding_window"] = true;
  EXPECT_THAT(parse_error(j), HasSubstr("config.json: field 'use_sliding_window' is true: "
                                        "sliding-window attention is not supported"));
}

TEST(ModelConfig, HeadsNotDivisible) {
  json j = read_fixture("llama-3.2-1b");
  j["num_key_value_heads"] = 5;
  EXPECT_THAT(parse_error(j), HasSubstr("config.json: field 'num_attention_heads' (32) must be a "
                                        "multiple of field 'num_key_value_heads' (5)"));
  j = read_fixture("mistral-7b-v0.3");
  j["num_attention_heads"] = 24;  // 4096 / 24 is not whole and head_dim is absent
  j["num_key_value_heads"] = 8;
  EXPECT_THAT(parse_error(j), HasSubstr("field 'hidden_size' (4096) must be a multiple of field "
                                        "'num_attention_heads' (24)"));
}

TEST(ModelConfig, UnsupportedFeatures) {
  json j = read_fixture("llama-3.2-1b");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THAT(parse_error(j), HasSubstr("field 'rope_scaling' has type 'yarn'"));
  j = read_fixture("llama-3.2-1b");
  j["hidden_act"] = "gelu";
  EXPECT_THAT(parse_error(j), HasSubstr("field 'hidden_act' is 'gelu'"));
  j = read_fixture("llama-3.2-1b");
  j["quantization_config"] = {{"quant_method", "awq"}};
  EXPECT_THAT(parse_error(j), HasSubstr("quant_method 'awq', which is not supported"));
}

TEST(ModelConfig, LoadErrorsNameThePath) {
  try {
    load_model_config(kModels / "no-such-model");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no-such-model/config.json not found"));
  }
}

}  // namespace
}  // namespace spindle
