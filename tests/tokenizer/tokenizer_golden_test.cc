// Token ids and decoded text pinned by Hugging Face tokenizers (tests/golden).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "golden.h"
#include "tokenizer/tokenizer.h"

namespace spindle::tokenizer {
namespace {

using testing::golden_dir;
using testing::golden_tokenizer_dir;
using testing::read_json;

class GoldenTokenizerTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenTokenizerTest, EncodeMatchesHuggingFace) {
  const Tokenizer tok = Tokenizer::load(golden_tokenizer_dir(GetParam()));
  const auto golden = read_json(golden_tokenizer_dir(GetParam()) / "golden.json");
  ASSERT_FALSE(golden.at("strings").empty());
  for (const auto& s : golden.at("strings")) {
    const std::string text = s.at("text");
    EXPECT_EQ(tok.encode(text, false), s.at("ids").get<std::vector<TokenId>>()) << "text: " << text;
    EXPECT_EQ(tok.encode(text, true), s.at("ids_with_special").get<std::vector<TokenId>>()) << "text: " << text;
  }
}

TEST_P(GoldenTokenizerTest, DecodeMatchesHuggingFace) {
  const Tokenizer tok = Tokenizer::load(golden_tokenizer_dir(GetParam()));
  const auto golden = read_json(golden_tokenizer_dir(GetParam()) / "golden.json");
  for (const auto& s : golden.at("strings")) {
    const auto ids = s.at("ids").get<std::vector<TokenId>>();
    const std::string decoded = s.at("decoded");
    EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/false), decoded) << "text: " << s.at("text");
    if (decoded == s.at("text").get<std::string>()) {
      EXPECT_EQ(tok.decode(tok.encode(decoded, false), false), decoded);
    }
  }
}

TEST_P(GoldenTokenizerTest, MergesAsStringsGiveTheSameIds) {
  // tokenizers < 0.20 wrote merges as "a b" strings; the fixtures use pairs.
  auto json = read_json(golden_tokenizer_dir(GetParam()) / "tokenizer.json");
  for (auto& merge : json.at("model").at("merges")) {
    merge = merge[0].get<std::string>() + " " + merge[1].get<std::string>();
  }
  const Tokenizer tok = Tokenizer::from_files({.tokenizer_json = json.dump()});
  const Tokenizer reference = Tokenizer::load(golden_tokenizer_dir(GetParam()));
  const auto golden = read_json(golden_tokenizer_dir(GetParam()) / "golden.json");
  for (const auto& s : golden.at("strings")) {
    EXPECT_EQ(tok.encode(s.at("text").get<std::string>(), false), s.at("ids").get<std::vector<TokenId>>());
  }
  EXPECT_EQ(tok.vocab_size(), reference.vocab_size());
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTokenizerTest, ::testing::ValuesIn(testing::kGoldenTokenizers),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

class GoldenModelTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenModelTest, PromptIdsMatchHuggingFace) {
  const auto dir = golden_dir() / GetParam();
  const Tokenizer tok = Tokenizer::load(dir);
  const auto golden = read_json(dir / "golden.json");
  ASSERT_FALSE(golden.at("prompts").empty());
  for (const auto& p : golden.at("prompts")) {
    EXPECT_EQ(tok.encode(p.at("text").get<std::string>(), true), p.at("ids").get<std::vector<TokenId>>())
        << "prompt: " << p.at("text");
  }
  EXPECT_FALSE(tok.chat_template().empty());
  EXPECT_FALSE(tok.eos_ids().empty());
}

TEST_P(GoldenModelTest, SpecialTokensFromConfig) {
  const auto dir = golden_dir() / GetParam();
  const Tokenizer tok = Tokenizer::load(dir);
  const auto config = read_json(dir / "tokenizer_config.json");
  const std::string eos = config.at("eos_token");
  ASSERT_TRUE(tok.token_to_id(eos).has_value());
  EXPECT_THAT(tok.eos_ids(), ::testing::Contains(*tok.token_to_id(eos)));
  EXPECT_TRUE(tok.is_special(*tok.token_to_id(eos)));
  if (config.contains("bos_token") && config.at("bos_token").is_string()) {
    EXPECT_EQ(tok.bos_id(), tok.token_to_id(config.at("bos_token").get<std::string>()));
  } else {
    EXPECT_FALSE(tok.bos_id().has_value());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenModelTest, ::testing::ValuesIn(testing::kGoldenModels),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace spindle::tokenizer
