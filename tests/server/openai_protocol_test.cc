#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/openai_protocol.h"

namespace spindle::server {
namespace {

using ::testing::HasSubstr;
constexpr size_t kLimit = 1 << 20;

// The status, param and message of the ApiError that parsing `body` throws.
std::tuple<int, std::string, std::string> error_of(const std::string& body, bool chat = false) {
  try {
    chat ? parse_chat_request(body, kLimit) : parse_completion_request(body, kLimit);
  } catch (const ApiError& e) {
    return {e.status(), e.param(), e.what()};
  }
  return {0, "", ""};
}

TEST(OpenAiProtocolTest, ParsesACompletion) {
  const auto r = parse_completion_request(
      R"({"model":"m","prompt":"Hi","max_tokens":5,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.05,
          "seed":7,"stop":["\n","END"],"presence_penalty":0.5,"frequency_penalty":-0.5,"logit_bias":{"12":-100},
          "logprobs":2,"stream":true,"stream_options":{"include_usage":true}})",
      kLimit);
  EXPECT_EQ(r.prompt, "Hi");
  EXPECT_EQ(r.sampling.max_tokens, 5);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(*r.sampling.seed, 7u);
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r.sampling.logit_bias.at(12), -100.0f);
  EXPECT_EQ(r.sampling.top_logprobs, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiProtocolTest, ParsesAChatWithTextParts) {
  const auto r = parse_chat_request(
      R"({"messages":[{"role":"system","content":"Be brief."},
                      {"role":"user","content":[{"type":"text","text":"Hello "},{"type":"text","text":"there"}]}],
          "max_completion_tokens":9,"logprobs":true,"top_logprobs":3})",
      kLimit);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "Hello there");
  EXPECT_EQ(r.sampling.max_tokens, 9);
  EXPECT_TRUE(r.sampling.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 3);
}

TEST(OpenAiProtocolTest, BadInputsAre400sNamingTheParameter) {
  struct Case {
    std::string body;
    bool chat;
    std::string param;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"{not json", false, "", "not valid JSON"},
      {"[1,2]", false, "", "must be a JSON object"},
      {R"({"max_tokens":5})", false, "prompt", "'prompt' is required"},
      {R"({"prompt":"x","max_tokens":"5"})", false, "max_tokens", "must be an integer, got a string"},
      {R"({"prompt":"x","max_tokens":-1})", false, "max_tokens", "between 1 and"},
      {R"({"prompt":"x","max_tokens":100000000000})", false, "max_tokens", "between 1 and"},
      {R"({"prompt":"x","temperature":3})", false, "temperature", "between 0 and 2"},
      {R"({"prompt":"x","top_p":0})", false, "top_p", "greater than 0"},
      {R"({"prompt":"x","n":9})", false, "n", "between 1 and 8"},
      {R"({"prompt":"x","stop":[1]})", false, "stop", "strings"},
      {R"({"prompt":"x","logit_bias":{"abc":1}})", false, "logit_bias", "not a token id"},
      {R"({"prompt":"x","stream":"yes"})", false, "stream", "boolean"},
      {R"({"prompt":["a","b"]})", false, "prompt", "batches are not supported"},
      {R"({"messages":[]})", true, "messages", "non-empty array"},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", true, "messages[0].role", "not supported"},
      {R"({"messages":[{"role":"user"}]})", true, "messages[0]", "'content'"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", true, "top_logprobs", "needs 'logprobs'"},
  };
  for (const auto& c : cases) {
    const auto [status, param, message] = error_of(c.body, c.chat);
    EXPECT_EQ(status, 400) << c.body;
    EXPECT_EQ(param, c.param) << c.body;
    EXPECT_THAT(message, HasSubstr(c.message)) << c.body;
  }
}

TEST(OpenAiProtocolTest, OversizedBodyIs413) {
  try {
    parse_completion_request(std::string(100, ' '), 10);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 413);
    EXPECT_EQ(e.to_json()["error"]["type"], "invalid_request_error");
  }
}

}  // namespace
}  // namespace spindle::server
