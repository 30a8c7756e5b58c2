// POST /v1/responses against the real binary on the embedded kjv-tiny: the stateless Responses
// API answered by the chat machinery, so each answer is checked against /v1/chat/completions with
// the equivalent messages (whose text the other server tests pin to the HF goldens): the same
// greedy or seeded text, prompt tokens, tool calls and reasoning. The streamed events come in
// OpenAI's order with gapless sequence numbers and add up to the whole response; refusals are 400s
// naming the Responses API's parameter; the official openai Node client's responses.create and
// responses.stream run against it (tests/node/openai_responses_test.mjs).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>

#include "node_client.h"
#include "spindle_server.h"

namespace spindle::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kSource = SPINDLE_SOURCE_DIR;

class ServerResponsesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    server_ = SpindleServer::start({}, &error).release();
    ASSERT_NE(server_, nullptr) << error;
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    client_ = server_->client(120);
  }
  static SpindleServer* server_;
  std::unique_ptr<httplib::Client> client_;
};
SpindleServer* ServerResponsesTest::server_ = nullptr;

// A Responses stream: every "event: T\ndata: {...}" block, checked to be well formed (the data's
// type is T), in order.
std::vector<json> response_events(const std::string& raw) {
  std::vector<json> events;
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t end = raw.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated event: " << raw.substr(pos);
      break;
    }
    const std::string block = raw.substr(pos, end - pos);
    pos = end + 2;
    std::smatch m;
    if (!std::regex_match(block, m, std::regex("event: ([a-z_.]+)\ndata: (.*)"))) {
      ADD_FAILURE() << "not an event block: " << block;
      continue;
    }
    json e = json::parse(m[2].str(), nullptr, false);
    EXPECT_FALSE(e.is_discarded()) << block;
    EXPECT_EQ(e.value("type", ""), m[1].str()) << block;
    events.push_back(std::move(e));
  }
  return events;
}

// The text of a response's message items, and its function calls as chat's [{name, arguments}].
std::string output_text(const json& response) {
  std::string text;
  for (const auto& item : response["output"]) {
    if (item["type"] == "message") {
      for (const auto& part : item["content"]) text += part["text"].get<std::string>();
    }
  }
  return text;
}
json output_calls(const json& response) {
  json calls = json::array();
  for (const auto& item : response["output"]) {
    if (item["type"] == "function_call") calls.push_back({{"name", item["name"]}, {"arguments", item["arguments"]}});
  }
  return calls;
}
json chat_calls(const json& message) {
  json calls = json::array();
  for (const auto& c : message.value("tool_calls", json::array())) {
    calls.push_back({{"name", c["function"]["name"]}, {"arguments", c["function"]["arguments"]}});
  }
  return calls;
}

// The streamed events of `body` in OpenAI's order; returns the final response event's response.
json check_stream(httplib::Client& client, json body) {
  body["stream"] = true;
  const SseReply s = post_stream(client, "/v1/responses", body);
  EXPECT_EQ(s.status, 200) << s.raw;
  EXPECT_THAT(s.content_type, ::testing::StartsWith("text/event-stream"));
  EXPECT_EQ(s.raw.find("[DONE]"), std::string::npos) << "the Responses API sends no [DONE]";
  const std::vector<json> events = response_events(s.raw);
  if (events.size() < 3) {
    ADD_FAILURE() << s.raw;
    return json::object();
  }
  EXPECT_EQ(events[0]["type"], "response.created");
  EXPECT_EQ(events[1]["type"], "response.in_progress");
  // Each item: added, (part added, deltas, text done, part done | arguments delta, done), done.
  std::map<int, std::string> texts, arguments;
  int open = -1;
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    const std::string t = e["type"];
    SCOPED_TRACE(e.dump());
    EXPECT_EQ(e["sequence_number"], i);
    if (t == "response.output_item.added") {
      EXPECT_EQ(open, -1) << "an item opened inside another";
      open = e["output_index"];
    } else if (t == "response.output_item.done") {
      EXPECT_EQ(e["output_index"], open);
      open = -1;
    } else if (t == "response.output_text.delta" || t == "response.reasoning_text.delta") {
      EXPECT_EQ(e["output_index"], open);
      EXPECT_EQ(e["content_index"], 0);
      texts[open] += e["delta"].get<std::string>();
    } else if (t == "response.output_text.done") {
      EXPECT_EQ(e["text"], texts[open]);
    } else if (t == "response.function_call_arguments.delta") {
      arguments[open] += e["delta"].get<std::string>();
    } else if (t == "response.function_call_arguments.done") {
      EXPECT_EQ(e["arguments"], arguments[open]);
    }
  }
  EXPECT_EQ(open, -1);
  const json& last = events.back();
  EXPECT_THAT(last["type"].get<std::string>(), ::testing::AnyOf("response.completed", "response.incomplete"));
  const json response = last.value("response", json::object());
  for (const auto& [index, text] : texts) {
    const json& item = response["output"][index];
    EXPECT_EQ(item["content"][0]["text"], text);
  }
  for (const auto& [index, args] : arguments) EXPECT_EQ(response["output"][index]["arguments"], args);
  return response;
}

TEST_F(ServerResponsesTest, TextMatchesChatAndStreams) {
  const JsonReply chat = post(*client_, "/v1/chat/completions",
                              json{{"messages", {{{"role", "system"}, {"content", "Be brief."}},
                                                 {{"role", "user"}, {"content", "Who made the heaven?"}}}},
                                   {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  const json body = {{"model", "kjv-tiny"}, {"instructions", "Be brief."}, {"input", "Who made the heaven?"},
                     {"max_output_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  const JsonReply r = post(*client_, "/v1/responses", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& j = r.json;
  EXPECT_THAT(j["id"].get<std::string>(), ::testing::MatchesRegex("resp_[0-9a-f]{32}"));
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["status"], "incomplete");
  EXPECT_EQ(j["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(j["store"], false);
  EXPECT_EQ(j["instructions"], "Be brief.");
  EXPECT_EQ(j["max_output_tokens"], 8);
  EXPECT_EQ(j["model"], "kjv-tiny");
  ASSERT_EQ(j["output"].size(), 1u) << r.body;
  const json& item = j["output"][0];
  EXPECT_EQ(item["type"], "message");
  EXPECT_EQ(item["role"], "assistant");
  EXPECT_EQ(item["status"], "incomplete");
  EXPECT_EQ(item["content"][0]["type"], "output_text");
  EXPECT_EQ(item["content"][0]["text"], chat.json["choices"][0]["message"]["content"]);
  EXPECT_EQ(j["usage"]["input_tokens"], chat.json["usage"]["prompt_tokens"]);
  EXPECT_EQ(j["usage"]["output_tokens"], 8);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["input_tokens"].get<int>() + 8);

  const json streamed = check_stream(*client_, body);
  EXPECT_EQ(streamed["status"], "incomplete");
  EXPECT_EQ(output_text(streamed), output_text(j));
  EXPECT_EQ(streamed["usage"], j["usage"]);
}

// Sampling fields act as in chat: the same seeded text.
TEST_F(ServerResponsesTest, SamplingFieldsAsChat) {
  const json sampling = {{"temperature", 1}, {"top_p", 0.9}, {"seed", 3}, {"top_k", 20}, {"min_p", 0.01},
                         {"presence_penalty", 0.5}, {"frequency_penalty", 0.5}, {"repetition_penalty", 1.2},
                         {"ignore_eos", true}};
  json chat_body = sampling, body = sampling;
  chat_body["messages"] = {{{"role", "user"}, {"content", "And God said"}}};
  chat_body["max_tokens"] = 12;
  body["input"] = json::array({{{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "And God said"}}}}}});
  body["max_output_tokens"] = 12;
  const JsonReply chat = post(*client_, "/v1/chat/completions", chat_body);
  const JsonReply r = post(*client_, "/v1/responses", body);
  ASSERT_EQ(chat.status, 200) << chat.body;
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(output_text(r.json), chat.json["choices"][0]["message"]["content"]);
  EXPECT_FLOAT_EQ(r.json["temperature"].get<float>(), 1.0f);
  EXPECT_FLOAT_EQ(r.json["top_p"].get<float>(), 0.9f);
  // A different seed gives other text (the fields are not ignored).
  body["seed"] = 4;
  EXPECT_NE(output_text(post(*client_, "/v1/responses", body).json), output_text(r.json));
}

// Fields and item keys documented as no-ops: the same text as without them.
TEST_F(ServerResponsesTest, NoOpFieldsChangeNothing) {
  const json history = json::array({{{"role", "user"}, {"content", "Who made the heaven?"}},
                                    {{"role", "assistant"}, {"content", "God."}},
                                    {{"role", "user"}, {"content", "And the earth?"}}});
  const json plain_body = {{"input", history}, {"max_output_tokens", 8}, {"temperature", 0}};
  json noop_body = plain_body;
  noop_body["input"][1] = {{"type", "message"}, {"role", "assistant"}, {"id", "msg_1"}, {"status", "completed"},
                           {"content", {{{"type", "output_text"}, {"text", "God."}, {"annotations", json::array()},
                                         {"logprobs", json::array()}}}}};
  noop_body["input"].insert(noop_body["input"].begin() + 1, json{{"type", "reasoning"}, {"id", "rs_1"}, {"summary", {{{"type", "summary_text"}, {"text", "s"}}}}});
  const json no_ops = {{"user", "u"}, {"metadata", {{"k", "v"}}}, {"store", false}, {"service_tier", "auto"},
                      {"truncation", "disabled"}};
  for (const auto& [key, value] : no_ops.items()) noop_body[key] = value;
  const JsonReply plain = post(*client_, "/v1/responses", plain_body);
  const JsonReply noop = post(*client_, "/v1/responses", noop_body);
  ASSERT_EQ(plain.status, 200) << plain.body;
  ASSERT_EQ(noop.status, 200) << noop.body;
  EXPECT_EQ(output_text(noop.json), output_text(plain.json));
  EXPECT_EQ(noop.json["usage"]["input_tokens"], plain.json["usage"]["input_tokens"]);
  EXPECT_EQ(noop.json["metadata"], json({{"k", "v"}}));
  EXPECT_EQ(noop.json["user"], "u");
}

// kjv-tiny's template teaches no tool syntax: the generic format, calls constrained by the tools'
// schemas. A forced call equals chat's of the same seed, whole and streamed; a history of items
// (function_call, function_call_output) renders as chat's tool turns (same prompt tokens and text).
TEST_F(ServerResponsesTest, ToolCallsAndToolHistoryAsChat) {
  // Bounded schemas (kjv-tiny would otherwise write into a string until the limit), as the node
  // client's chat tool test has them.
  const json parameters = json::parse(R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
      "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"], "additionalProperties": false})");
  const json amen = json::parse(R"({"type": "object", "properties": {"loud": {"type": "boolean"}}, "required": ["loud"],
      "additionalProperties": false})");
  const json tools = {{{"type", "function"}, {"name", "get_weather"}, {"strict", true}, {"parameters", parameters}},
                      {{"type", "function"}, {"name", "amen"}, {"parameters", amen}}};
  const json chat_tools = {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"strict", true}, {"parameters", parameters}}}},
                           {{"type", "function"}, {"function", {{"name", "amen"}, {"parameters", amen}}}}};
  const json body = {{"input", "Weather in Ur?"}, {"tools", tools}, {"tool_choice", "required"}, {"parallel_tool_calls", false},
                     {"max_output_tokens", 120}, {"temperature", 1}, {"seed", 1}};
  const JsonReply chat = post(*client_, "/v1/chat/completions",
                              json{{"messages", {{{"role", "user"}, {"content", "Weather in Ur?"}}}}, {"tools", chat_tools},
                                   {"tool_choice", "required"}, {"parallel_tool_calls", false}, {"max_tokens", 120},
                                   {"temperature", 1}, {"seed", 1}});
  const JsonReply r = post(*client_, "/v1/responses", body);
  ASSERT_EQ(chat.status, 200) << chat.body;
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["status"], "completed");
  EXPECT_EQ(output_calls(r.json), chat_calls(chat.json["choices"][0]["message"]));
  ASSERT_EQ(output_calls(r.json).size(), 1u) << r.body;
  const json& call = r.json["output"].back();
  EXPECT_THAT(call["call_id"].get<std::string>(), ::testing::MatchesRegex("call_[A-Za-z0-9]{24}"));
  EXPECT_THAT(call["id"].get<std::string>(), ::testing::StartsWith("fc_"));
  EXPECT_EQ(r.json["tools"], tools);
  const json streamed = check_stream(*client_, body);
  EXPECT_EQ(output_calls(streamed), output_calls(r.json));

  // The call and its result as history.
  const std::string args = call["arguments"];
  const json items = {{{"role", "user"}, {"content", "Weather in Ur?"}},
                      {{"type", "function_call"}, {"call_id", "call_1"}, {"name", call["name"]}, {"arguments", args}},
                      {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "Hot."}}};
  const json messages = {{{"role", "user"}, {"content", "Weather in Ur?"}},
                         {{"role", "assistant"}, {"content", nullptr},
                          {"tool_calls", {{{"id", "call_1"}, {"type", "function"},
                                           {"function", {{"name", call["name"]}, {"arguments", args}}}}}}},
                         {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "Hot."}}};
  const JsonReply chat2 = post(*client_, "/v1/chat/completions", json{{"messages", messages}, {"tools", chat_tools},
                                                                      {"max_tokens", 10}, {"temperature", 0}});
  const JsonReply r2 = post(*client_, "/v1/responses", json{{"input", items}, {"tools", tools}, {"max_output_tokens", 10},
                                                            {"temperature", 0}});
  ASSERT_EQ(chat2.status, 200) << chat2.body;
  ASSERT_EQ(r2.status, 200) << r2.body;
  EXPECT_EQ(r2.json["usage"]["input_tokens"], chat2.json["usage"]["prompt_tokens"]);
  const json& m = chat2.json["choices"][0]["message"];
  EXPECT_EQ(output_text(r2.json), m["content"].is_string() ? m["content"].get<std::string>() : "");
  EXPECT_EQ(output_calls(r2.json), chat_calls(m));
}

// text.format is chat's response_format: the same seeded document, of the schema's keys.
TEST_F(ServerResponsesTest, TextFormatConstrainsTheOutput) {
  const json schema = json::parse(R"({"type": "object", "properties": {"verse": {"type": "integer", "minimum": 1,
      "maximum": 176}, "word": {"type": "string", "enum": ["light", "water"]}}, "required": ["verse", "word"],
      "additionalProperties": false})");
  const json sampling = {{"temperature", 1}, {"seed", 1}};
  json chat_body = sampling, body = sampling;
  chat_body.update({{"messages", {{{"role", "user"}, {"content", "A verse?"}}}}, {"max_tokens", 300},
                    {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "v"}, {"schema", schema}, {"strict", true}}}}}});
  body.update({{"input", "A verse?"}, {"max_output_tokens", 300},
               {"text", {{"format", {{"type", "json_schema"}, {"name", "v"}, {"schema", schema}, {"strict", true}}}}}});
  const JsonReply chat = post(*client_, "/v1/chat/completions", chat_body);
  const JsonReply r = post(*client_, "/v1/responses", body);
  ASSERT_EQ(chat.status, 200) << chat.body;
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["status"], "completed") << r.body;
  const std::string text = output_text(r.json);
  EXPECT_EQ(text, chat.json["choices"][0]["message"]["content"]);
  const json doc = json::parse(text, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << text;
  EXPECT_TRUE(doc["verse"].is_number_integer() && doc["word"].is_string()) << text;
  EXPECT_EQ(r.json["text"]["format"]["name"], "v");
  EXPECT_EQ(output_text(check_stream(*client_, body)), text);
}

TEST_F(ServerResponsesTest, RefusalsNameTheParameter) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"input", "x"}, {"store", true}}, "store"},
      {{{"input", "x"}, {"previous_response_id", "resp_0"}}, "previous_response_id"},
      {{{"input", "x"}, {"foo", 1}}, "foo"},
      {{{"input", {{{"type", "item_reference"}, {"id", "msg_1"}}}}}, "input[0].type"},
      // Raised by the shared chat code at submission, renamed.
      {{{"input", "x"}, {"max_output_tokens", 100000}}, "max_output_tokens"},
      {{{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}, {"schema", {{"type", "object"}, {"not", json::object()}}}}}}}},
       "text.format.schema"},
      {{{"input", "x"}, {"tools", {{{"type", "function"}, {"name", "f"},
                                    {"parameters", {{"type", "object"}, {"patternProperties", {{"a", json::object()}}}}}}}}},
       "tools[0].parameters"},
  };
  for (const auto& [body, param] : cases) {
    const JsonReply r = post(*client_, "/v1/responses", body);
    EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
    EXPECT_EQ(r.json["error"]["param"], param) << body.dump() << " -> " << r.body;
  }
  const JsonReply wrong = get(*client_, "/v1/responses");
  EXPECT_EQ(wrong.status, 405) << wrong.body;
}

TEST_F(ServerResponsesTest, TheOpenAINodeClientsResponses) {
  if (std::string why = node_client_unavailable({"openai"}); !why.empty()) GTEST_SKIP() << why;
  expect_node_client_passes("openai_responses_test", server_->base_url() + "/v1");
}

// A thinking template (DeepSeek-R1's distill opens the reasoning section in the prompt when
// chat_template_kwargs.enable_thinking is set): the reasoning is a reasoning item before the
// message, equal to chat's reasoning_content; usage counts its tokens.
TEST(ServerResponsesReasoningTest, ReasoningIsAnItem) {
  std::string error;
  auto server = SpindleServer::start(
      {"--chat-template", (kSource / "tests" / "golden" / "chat_templates" / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja").string()},
      &error);
  ASSERT_NE(server, nullptr) << error;
  auto client = server->client(120);
  const json kwargs = {{"enable_thinking", true}};  // the template then opens <think> in the prompt
  const JsonReply chat = post(*client, "/v1/chat/completions",
                              json{{"messages", {{{"role", "user"}, {"content", "Amen?"}}}}, {"max_tokens", 6},
                                   {"temperature", 0}, {"ignore_eos", true}, {"chat_template_kwargs", kwargs}});
  const json body = {{"input", "Amen?"}, {"max_output_tokens", 6}, {"temperature", 0}, {"ignore_eos", true},
                     {"chat_template_kwargs", kwargs}};
  const JsonReply r = post(*client, "/v1/responses", body);
  ASSERT_EQ(chat.status, 200) << chat.body;
  ASSERT_EQ(r.status, 200) << r.body;
  const json& m = chat.json["choices"][0]["message"];
  ASSERT_TRUE(m["reasoning_content"].is_string()) << chat.body;
  ASSERT_GE(r.json["output"].size(), 1u) << r.body;
  const json& item = r.json["output"][0];
  EXPECT_EQ(item["type"], "reasoning");
  EXPECT_THAT(item["id"].get<std::string>(), ::testing::StartsWith("rs_"));
  EXPECT_EQ(item["content"][0]["type"], "reasoning_text");
  EXPECT_EQ(item["content"][0]["text"], m["reasoning_content"]);
  EXPECT_EQ(output_text(r.json), m["content"].is_string() ? m["content"].get<std::string>() : "");
  EXPECT_GT(r.json["usage"]["output_tokens_details"]["reasoning_tokens"].get<int>(), 0);
  const json streamed = check_stream(*client, body);
  ASSERT_GE(streamed["output"].size(), 1u);
  EXPECT_EQ(streamed["output"][0]["content"][0]["text"], m["reasoning_content"]);
}

}  // namespace
}  // namespace spindle::testing
