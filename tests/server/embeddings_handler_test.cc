// /v1/embeddings' parts that need no server: request parsing (each bad input a 400 naming its
// parameter), L2 normalisation with dimensions, base64 (goldens from Python's
// base64.b64encode(struct.pack('<Nf', ...))), and the sentence-transformers pooling config.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "server/embeddings_handler.h"
#include "server/openai_protocol.h"
#include "util/error.h"

#include <unistd.h>

namespace spindle::server {
namespace {

namespace fs = std::filesystem;

std::string param_of(const std::string& body) {
  try {
    parse_embedding_request(body, 1 << 20);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body;
    return e.param();
  }
  return "(accepted)";
}

TEST(EmbeddingsHandlerTest, ParsesEveryInputShape) {
  const EmbeddingRequest a = parse_embedding_request(R"({"input":"hi","model":"m"})", 1 << 20);
  ASSERT_EQ(a.inputs.size(), 1u);
  EXPECT_EQ(std::get<std::string>(a.inputs[0]), "hi");
  EXPECT_EQ(a.model, "m");
  EXPECT_FALSE(a.base64);
  const EmbeddingRequest b = parse_embedding_request(R"({"input":["a","b"],"encoding_format":"base64","dimensions":4})", 1 << 20);
  EXPECT_EQ(b.inputs.size(), 2u);
  EXPECT_TRUE(b.base64);
  EXPECT_EQ(b.dimensions, 4);
  const EmbeddingRequest c = parse_embedding_request(R"({"input":[1,2,3]})", 1 << 20);
  ASSERT_EQ(c.inputs.size(), 1u);
  EXPECT_EQ(std::get<std::vector<TokenId>>(c.inputs[0]), (std::vector<TokenId>{1, 2, 3}));
  const EmbeddingRequest d = parse_embedding_request(R"({"input":[[1,2],[3]],"user":"u"})", 1 << 20);
  ASSERT_EQ(d.inputs.size(), 2u);
  EXPECT_EQ(std::get<std::vector<TokenId>>(d.inputs[1]), (std::vector<TokenId>{3}));
}

TEST(EmbeddingsHandlerTest, BadInputNamesItsParameter) {
  EXPECT_EQ(param_of(R"({})"), "input");
  EXPECT_EQ(param_of(R"({"input":null})"), "input");
  EXPECT_EQ(param_of(R"({"input":""})"), "input");
  EXPECT_EQ(param_of(R"({"input":[]})"), "input");
  EXPECT_EQ(param_of(R"({"input":3})"), "input");
  EXPECT_EQ(param_of(R"({"input":["a",""]})"), "input[1]");
  EXPECT_EQ(param_of(R"({"input":["a",[]]})"), "input[1]");
  EXPECT_EQ(param_of(R"({"input":[[1],[-1]]})"), "input[1]");
  EXPECT_EQ(param_of(R"({"input":[1,4294967297]})"), "input");
  EXPECT_EQ(param_of(R"({"input":[1.5]})"), "input");
  EXPECT_EQ(param_of(R"({"input":"a","encoding_format":"int8"})"), "encoding_format");
  EXPECT_EQ(param_of(R"({"input":"a","dimensions":0})"), "dimensions");
  EXPECT_EQ(param_of(R"({"input":"a","dimensions":"4"})"), "dimensions");
  EXPECT_EQ(param_of(R"({"input":"a","model":3})"), "model");
  EXPECT_EQ(param_of(R"({"input":"a","user":3})"), "user");
  EXPECT_EQ(param_of(R"({"input":"a","pooling":"mean"})"), "pooling");
  EXPECT_EQ(param_of(R"({"input":"a","user":"u","encoding_format":null})"), "(accepted)");
  std::string many = R"({"input":[)";
  for (size_t i = 0; i <= kMaxEmbeddingInputs; ++i) many += i ? ",\"a\"" : "\"a\"";
  EXPECT_EQ(param_of(many + "]}"), "input");
}

TEST(EmbeddingsHandlerTest, NormalisesAfterTruncating) {
  const std::vector<float> v = {3, 4, 12};
  const std::vector<float> all = normalized_embedding(v, 0);
  EXPECT_NEAR(all[0], 3.0 / 13, 1e-7);
  EXPECT_NEAR(all[2], 12.0 / 13, 1e-7);
  const std::vector<float> two = normalized_embedding(v, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_NEAR(two[0], 0.6, 1e-7);
  EXPECT_NEAR(two[1], 0.8, 1e-7);
  EXPECT_EQ(normalized_embedding(std::vector<float>{0, 0}, 0), (std::vector<float>{0, 0})) << "no division by zero";
}

TEST(EmbeddingsHandlerTest, Base64IsLittleEndianFloat32) {
  EXPECT_EQ(base64_floats(std::vector<float>{1.0f, -2.5f, 0.1f}), "AACAPwAAIMDNzMw9");
  EXPECT_EQ(base64_floats(std::vector<float>{1.0f}), "AACAPw==");
  EXPECT_EQ(base64_floats(std::vector<float>{3.0f, 4.0f}), "AABAQAAAgEA=");
  EXPECT_EQ(base64_floats(std::vector<float>{}), "");
}

TEST(EmbeddingsHandlerTest, PoolingConfigFromSentenceTransformers) {
  const fs::path dir = fs::temp_directory_path() / ("spindle-pooling-" + std::to_string(::getpid()));
  fs::create_directories(dir / "1_Pooling");
  EXPECT_EQ(read_pooling_config(dir).mode, PoolingConfig::Mode::kLastToken) << "no modules.json";
  EXPECT_EQ(read_pooling_config(dir / "model.gguf").mode, PoolingConfig::Mode::kLastToken) << "a file";
  std::ofstream(dir / "modules.json") << R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
      {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}])";
  const auto write = [&](const std::string& text) { std::ofstream(dir / "1_Pooling" / "config.json") << text; };
  write(R"({"pooling_mode_cls_token":false,"pooling_mode_mean_tokens":true,"pooling_mode_lasttoken":false})");
  EXPECT_EQ(read_pooling_config(dir).mode, PoolingConfig::Mode::kMeanTokens);
  EXPECT_EQ(read_pooling_config(dir).mode_name(), "mean");
  write(R"({"pooling_mode_cls_token":true,"pooling_mode_mean_tokens":false})");
  EXPECT_EQ(read_pooling_config(dir).mode, PoolingConfig::Mode::kClsToken);
  write(R"({"pooling_mode_lasttoken":true})");
  EXPECT_EQ(read_pooling_config(dir).mode, PoolingConfig::Mode::kLastToken);
  write(R"({"pooling_mode_max_tokens":true})");
  EXPECT_THROW(read_pooling_config(dir), Error) << "max pooling is not built";
  write(R"({"pooling_mode_mean_tokens":true,"pooling_mode_lasttoken":true})");
  EXPECT_THROW(read_pooling_config(dir), Error) << "two modes";
  write(R"({"pooling_mode_mean_tokens":"yes"})");
  EXPECT_THROW(read_pooling_config(dir), Error);
  write("not json");
  EXPECT_THROW(read_pooling_config(dir), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace spindle::server
