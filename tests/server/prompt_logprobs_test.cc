// The prompt's logprobs as clients read them (server/prompt_logprobs.h): completions' echo form
// (first entry null, text_offset from 0 over the decoded prompt: on a byte-level tokenizer and an
// ASCII text each token's own bytes, so the offsets are the running sums of logprob_token_text;
// a token ending inside a UTF-8 sequence counts from where the decoder emits it, as the output's
// offsets do) and vLLM's
// prompt_logprobs dicts (the prompt token's own entry with its rank, then the alternatives), each
// holding at most k alternatives; entries that do not match the prompt are refused.
#include <gtest/gtest.h>

#include <filesystem>

#include "server/completion_handler.h"
#include "server/prompt_logprobs.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace spindle::server {
namespace {

using nlohmann::json;

tokenizer::Tokenizer byte_level() {
  return tokenizer::Tokenizer::load(std::filesystem::path(SPINDLE_FIXTURES_DIR) / ".." / "golden" / "tokenizers" /
                                    "bytelevel-llama3");
}

// Entry i: the prompt token i + 1 at rank i + 1 with logprob -(i + 1), alternatives 7 and 9.
std::vector<engine::PromptLogprob> entries(const std::vector<TokenId>& prompt) {
  std::vector<engine::PromptLogprob> out;
  for (size_t i = 1; i < prompt.size(); ++i) {
    out.push_back({prompt[i], -static_cast<float>(i), static_cast<int>(i), {{7, -0.5f}, {9, -0.75f}}});
  }
  return out;
}

TEST(PromptLogprobsTest, EchoEntriesComeFirstWithNullsAndOffsets) {
  const auto tok = byte_level();
  const std::vector<TokenId> prompt = tok.encode("And God said, Let there be light", false);
  ASSERT_GT(prompt.size(), 3u);
  json lp = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
             {"text_offset", json::array()}};
  append_echo_logprobs(tok, prompt, entries(prompt), 1, lp);
  ASSERT_EQ(lp["tokens"].size(), prompt.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  size_t offset = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    EXPECT_EQ(lp["tokens"][i], logprob_token_text(tok, prompt[i]));
    EXPECT_EQ(lp["text_offset"][i], offset) << i;
    offset += logprob_token_text(tok, prompt[i]).size();
    if (i == 0) continue;
    EXPECT_FLOAT_EQ(lp["token_logprobs"][i].get<float>(), -static_cast<float>(i));
    ASSERT_EQ(lp["top_logprobs"][i].size(), 1u) << "k = 1 of the two alternatives";
    EXPECT_FLOAT_EQ(lp["top_logprobs"][i][logprob_token_text(tok, 7)].get<float>(), -0.5f);
  }
}

TEST(PromptLogprobsTest, VllmDictsHoldTheTokenAndItsAlternatives) {
  const auto tok = byte_level();
  const std::vector<TokenId> prompt = {5, 7, 11};
  const json out = vllm_prompt_logprobs(tok, prompt, entries(prompt), 2);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].is_null());
  // Entry 1 is token 7, itself alternative 1: two keys; entry 2 (token 11): three.
  EXPECT_EQ(out[1].size(), 2u);
  EXPECT_EQ(out[1]["7"]["rank"], 1);
  EXPECT_FLOAT_EQ(out[1]["7"]["logprob"].get<float>(), -1.0f);
  EXPECT_EQ(out[1]["9"]["rank"], 2);
  EXPECT_EQ(out[1]["7"]["decoded_token"], logprob_token_text(tok, 7));
  EXPECT_EQ(out[2].size(), 3u);
  EXPECT_EQ(out[2]["11"]["rank"], 2);
  EXPECT_EQ(vllm_prompt_logprobs(tok, prompt, entries(prompt), 0)[2].size(), 1u) << "k = 0: the token alone";
  EXPECT_EQ(vllm_prompt_logprobs(tok, std::vector<TokenId>{5}, {}, 3), json::array({nullptr}));
  EXPECT_THROW(vllm_prompt_logprobs(tok, std::vector<TokenId>{5, 8, 11}, entries(prompt), 2), Error) << "entry of another token";
  EXPECT_THROW(vllm_prompt_logprobs(tok, std::vector<TokenId>{5, 7}, entries(prompt), 2), Error) << "one entry too many";
}

}  // namespace
}  // namespace spindle::server
