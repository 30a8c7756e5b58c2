#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/chat_request.h"
#include "server/openai_protocol.h"
#include "server/request_fields.h"

namespace spindle::server {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;
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
      {R"({"messages":[{"role":"user"}]})", true, "messages[0].content", "'messages[0].content' is required"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", true, "top_logprobs", "needs 'logprobs'"},
  };
  for (const auto& c : cases) {
    const auto [status, param, message] = error_of(c.body, c.chat);
    EXPECT_EQ(status, 400) << c.body;
    EXPECT_EQ(param, c.param) << c.body;
    EXPECT_THAT(message, HasSubstr(c.message)) << c.body;
  }
}

// A body for `scope` with `key: value` put where that scope lives.
std::pair<std::string, bool> body_with(FieldScope scope, const std::string& key, const json& value) {
  json message = {{"role", "user"}, {"content", "Hi"}};
  json chat = {{"messages", json::array()}};
  switch (scope) {
    case kCompletionBody: return {json{{"prompt", "Hi"}, {key, value}}.dump(), false};
    case kChatBody: chat[key] = value; chat["messages"].push_back(message); return {chat.dump(), true};
    case kMessage: message[key] = value; chat["messages"].push_back(message); return {chat.dump(), true};
    case kContentPart:
      message["content"] = json::array({{{"type", "text"}, {"text", "Hi"}, {key, value}}});
      chat["messages"].push_back(message);
      return {chat.dump(), true};
    default: chat["messages"].push_back(message); chat["stream"] = true; chat["stream_options"] = {{key, value}};
      return {chat.dump(), true};
  }
}

std::string param_at(FieldScope scope, const std::string& key) {
  switch (scope) {
    case kMessage: return "messages[0]." + key;
    case kContentPart: return "messages[0].content[0]." + key;
    case kStreamOptions: return "stream_options." + key;
    default: return key;
  }
}

// Every refused field, wherever it sits: a 400 naming it for a value that asks for something, and
// accepted when null or its "off" value.
TEST(OpenAiProtocolTest, EveryRefusedFieldIsA400NamingIt) {
  int num_refused = 0;
  for (const auto& f : request_fields()) {
    if (f.use != FieldUse::kRefused) continue;
    for (FieldScope scope : {kCompletionBody, kChatBody, kMessage, kContentPart, kStreamOptions}) {
      if (!(f.scopes & scope)) continue;
      ++num_refused;
      const std::string key(f.name);
      SCOPED_TRACE(param_at(scope, key));
      const auto [body, chat] = body_with(scope, key, json{{"asks_for", "something"}});
      const auto [status, param, message] = error_of(body, chat);
      EXPECT_EQ(status, 400) << body;
      EXPECT_EQ(param, param_at(scope, key));
      EXPECT_THAT(message, HasSubstr(std::string(f.note)));
      const auto [null_body, null_chat] = body_with(scope, key, nullptr);
      EXPECT_EQ(std::get<0>(error_of(null_body, null_chat)), 0) << "null is absent: " << null_body;
      if (!f.accepted.empty()) {
        const auto [off_body, off_chat] = body_with(scope, key, json::parse(f.accepted));
        EXPECT_EQ(std::get<0>(error_of(off_body, off_chat)), 0) << "the off value is accepted: " << off_body;
      }
    }
  }
  EXPECT_GE(num_refused, 21);  // 40 before structured output (issue 44) and tools (issue 46) were honoured
}

TEST(OpenAiProtocolTest, UnknownFieldsAre400sNamingThem) {
  for (FieldScope scope : {kCompletionBody, kChatBody, kMessage, kContentPart, kStreamOptions}) {
    for (const json& value : {json(1), json(nullptr), json::object()}) {
      const auto [body, chat] = body_with(scope, "foo", value);
      const auto [status, param, message] = error_of(body, chat);
      EXPECT_EQ(status, 400) << body;
      EXPECT_EQ(param, param_at(scope, "foo")) << body;
      EXPECT_EQ(message, "Unrecognized request argument supplied: " + param_at(scope, "foo")) << body;
    }
  }
  // A field of the other endpoint is unknown here.
  EXPECT_EQ(std::get<1>(error_of(R"({"prompt":"x","max_completion_tokens":4})")), "max_completion_tokens");
  EXPECT_EQ(std::get<1>(error_of(R"({"messages":[{"role":"user","content":"x"}],"echo":true})", true)), "echo");
  EXPECT_EQ(std::get<1>(error_of(R"({"messages":[{"role":"user","content":"x"}],"prompt":"x"})", true)), "prompt");
}

TEST(OpenAiProtocolTest, NoOpFieldsAreAcceptedAndTypeChecked) {
  const auto r = parse_chat_request(
      R"({"messages":[{"role":"user","content":"Hi","name":"alice"}],"user":"u1","metadata":{"k":"v"},
          "store":false,"service_tier":"auto"})",
      kLimit);
  EXPECT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(std::get<0>(error_of(R"({"prompt":"x","user":"u1"})")), 0);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"messages":[{"role":"user","content":"x"}],"store":true})", "store"},
      {R"({"messages":[{"role":"user","content":"x"}],"user":5})", "user"},
      {R"({"messages":[{"role":"user","content":"x"}],"metadata":"x"})", "metadata"},
      {R"({"messages":[{"role":"user","content":"x"}],"metadata":{"k":1}})", "metadata"},
      {R"({"messages":[{"role":"user","content":"x"}],"service_tier":1})", "service_tier"},
      {R"({"messages":[{"role":"user","content":"x","name":1}]})", "messages[0].name"},
  };
  for (const auto& [body, param] : bad) {
    const auto [status, p, message] = error_of(body, true);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(p, param) << body;
  }
}

TEST(OpenAiProtocolTest, RulesBetweenFields) {
  // echo + logprobs asks for prompt logprobs (as many alternatives); vLLM's prompt_logprobs is
  // 0-20 and not with stream; best_of (1 only) must be >= n; stream_options only with stream.
  EXPECT_EQ(std::get<0>(error_of(R"({"prompt":"x","echo":true,"logprobs":3})")), 0);
  EXPECT_EQ(parse_completion_request(R"({"prompt":"x","echo":true,"logprobs":3})", 1 << 20).sampling.prompt_logprobs, 3);
  EXPECT_EQ(parse_completion_request(R"({"prompt":"x","logprobs":3})", 1 << 20).sampling.prompt_logprobs, -1);
  EXPECT_EQ(parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"prompt_logprobs":2})", 1 << 20)
                .sampling.prompt_logprobs,
            2);
  EXPECT_EQ(std::get<1>(error_of(R"({"prompt":"x","prompt_logprobs":21})")), "prompt_logprobs");
  EXPECT_EQ(std::get<1>(error_of(R"({"prompt":"x","prompt_logprobs":-1})")), "prompt_logprobs");
  EXPECT_EQ(std::get<1>(error_of(R"({"prompt":"x","prompt_logprobs":true})")), "prompt_logprobs");
  EXPECT_EQ(std::get<1>(error_of(R"({"prompt":"x","prompt_logprobs":1,"stream":true})")), "prompt_logprobs");
  EXPECT_EQ(std::get<0>(error_of(R"({"prompt":"x","echo":true})")), 0);
  EXPECT_EQ(std::get<0>(error_of(R"({"prompt":"x","echo":false,"logprobs":1})")), 0);
  EXPECT_EQ(std::get<1>(error_of(R"({"prompt":"x","best_of":1,"n":2})")), "best_of");
  EXPECT_EQ(std::get<1>(error_of(R"({"prompt":"x","best_of":2,"n":2})")), "best_of");
  EXPECT_EQ(std::get<0>(error_of(R"({"prompt":"x","best_of":1})")), 0);
  EXPECT_EQ(std::get<1>(error_of(R"({"prompt":"x","stream_options":{"include_usage":true}})")), "stream_options");
  EXPECT_EQ(std::get<1>(error_of(R"({"prompt":"x","stream":true,"stream_options":{"include_usage":1}})")),
            "stream_options.include_usage");
  // Tool turns: each field where its role allows it, arguments that are JSON, the tool choices
  // Spindle can honour without constrained decoding.
  const std::vector<std::pair<std::string, std::string>> tool_rules = {
      {R"({"messages":[{"role":"tool","content":"x"}]})", "messages[0].tool_call_id"},
      {R"({"messages":[{"role":"user","content":"x","tool_call_id":"c"}]})", "messages[0].tool_call_id"},
      {R"({"messages":[{"role":"user","content":"x","tool_calls":[{"id":"c"}]}]})", "messages[0].tool_calls"},
      {R"({"messages":[{"role":"function","content":"x","name":"f"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c"}]}]})",
       "messages[0].tool_calls[0].function"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{x"}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}","extra":1}}]}]})",
       "messages[0].tool_calls[0].function.extra"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":""}}]})",
       "tools[0].function.name"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"code_interpreter"}]})", "tools[0].type"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":{}})", "tools"},
      {R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})", "tool_choice"},
      {R"({"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function","function":{"name":"f"}}})",
       "tool_choice.function.name"},  // a named function that is not among the (absent) tools
      {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],)"
       R"("tool_choice":{"type":"function","function":{"name":"g"}}})",
       "tool_choice.function.name"},  // nor among the tools sent
      {R"({"messages":[{"role":"user","content":"x"}],"parallel_tool_calls":1})", "parallel_tool_calls"},
      {R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":[]})", "chat_template_kwargs"},
      {R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"tools":[]}})",
       "chat_template_kwargs.tools"},
      {R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"max"})", "reasoning_effort"},
      {R"({"messages":[{"role":"user","content":"x"}],"functions":[{"name":"f"}]})", "functions"},
  };
  for (const auto& [body, param] : tool_rules) {
    const auto [status, p, message] = error_of(body, true);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(p, param) << body << ": " << message;
  }
}

// What the Jinja template is given: transformers' message shapes (arguments as objects, null
// content as "", name / tool_call_id / reasoning_content kept), the tools in the client's key
// order, the kwargs; written out by hand.
TEST(OpenAiProtocolTest, ParsesToolsAndToolTurnsForTheTemplate) {
  const auto r = parse_chat_request(R"({"messages":[
      {"role":"developer","content":"Be brief.","name":"ops"},
      {"role":"user","content":"Weather?"},
      {"role":"assistant","content":null,"reasoning_content":"Call it.",
       "tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":2}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"18 C"}]}],
    "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"z":{},"a":{}}}}}],
    "tool_choice":"auto","parallel_tool_calls":false,"chat_template_kwargs":{"enable_thinking":false},
    "reasoning_effort":"low"})",
                                    kLimit);
  const ChatContext& c = r.chat_context;
  const auto expected = nlohmann::ordered_json::parse(R"([
      {"role":"system","content":"Be brief.","name":"ops"},
      {"role":"user","content":"Weather?"},
      {"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":{"city":"Paris","days":2}}}],"reasoning_content":"Call it."},
      {"role":"tool","content":"18 C","tool_call_id":"call_1"}])");
  EXPECT_EQ(c.template_messages, expected) << c.template_messages.dump();
  EXPECT_EQ(c.tools[0]["function"]["parameters"]["properties"].dump(), R"({"z":{},"a":{}})");
  EXPECT_TRUE(c.has_tool_turns);
  EXPECT_FALSE(c.parallel_tool_calls);
  EXPECT_EQ(c.tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(c.template_kwargs.dump(), R"({"enable_thinking":false,"reasoning_effort":"low"})");
  const auto context = template_context(c);
  EXPECT_EQ(context["add_generation_prompt"], true);
  EXPECT_EQ(context["enable_thinking"], false);
  // No tools, or an empty list: the template sees none; tool_choice none is kept.
  const auto plain = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"tools":[],"tool_choice":"none"})", kLimit);
  EXPECT_FALSE(plain.chat_context.has_tools());
  EXPECT_EQ(plain.chat_context.tool_choice, ToolChoice::kNone);
  EXPECT_TRUE(template_context(plain.chat_context)["tools"].is_null());
  // A named choice of one of the tools (the second).
  const auto named = parse_chat_request(
      R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}},)"
      R"({"type":"function","function":{"name":"g"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})",
      kLimit);
  EXPECT_EQ(named.chat_context.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(named.chat_context.tool_choice_name, "g");
  // The errors name chat's spelling of a named choice (messages written by hand).
  const auto [maybe_status, maybe_param, maybe_message] =
      error_of(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"maybe"})", true);
  EXPECT_EQ(maybe_param, "tool_choice");
  EXPECT_EQ(maybe_message,
            R"('tool_choice' must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}})");
  const auto [other_status, other_param, other_message] = error_of(
      R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],)"
      R"("tool_choice":{"type":"function","function":{"name":"g"}}})",
      true);
  EXPECT_EQ(other_message, "'tool_choice.function.name' is 'g', which is not among the tools");
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
