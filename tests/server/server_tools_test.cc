// Tools, tool turns, reasoning and the template's variables end to end, against the real binary on
// the embedded kjv-tiny served with real models' chat templates (--chat-template). kjv-tiny never
// writes a tool call or a </think> by itself, so what is checked is what reaches the template (the
// prompt /tokenize returns, equal to python3-jinja2's rendering in
// tests/golden/chat_requests/goldens.json), the 400s, and the reasoning split of a prompt that opens
// the section; the parsers' outputs are tested on text (tests/chat, chat_output_test.cc). The
// Vercel AI SDK's case forces calls (the grammar of the tools' schemas) and reads them back.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "node_client.h"
#include "server_checks.h"
#include "support/jsonschema_verdicts.h"
#include "spindle_server.h"
#include "tokenizer/tokenizer.h"

namespace spindle::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kSource = SPINDLE_SOURCE_DIR;
const fs::path kTemplates = kSource / "tests" / "golden" / "chat_templates";

// Key order kept: the tools reach the template (and its tojson) in the order the client sent.
nlohmann::ordered_json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::ordered_json::parse(in);
}

JsonReply post(httplib::Client& client, const std::string& path, const nlohmann::ordered_json& body) {
  return testing::post(client, path, body.dump());
}
using testing::post;

const tokenizer::Tokenizer& kjv_tokenizer() {
  static const auto tok = tokenizer::Tokenizer::load(kSource / "models" / "kjv-tiny");
  return tok;
}

std::unique_ptr<SpindleServer> serve_with(const std::string& chat_template) {
  std::string error;
  auto server = SpindleServer::start({"--chat-template", (kTemplates / chat_template).string()}, &error);
  EXPECT_NE(server, nullptr) << error;
  return server;
}

nlohmann::ordered_json chat_body(const nlohmann::ordered_json& request) {
  nlohmann::ordered_json body = {{"messages", request["messages"]}};
  for (const char* key : {"tools", "chat_template_kwargs"}) {
    if (request.contains(key)) body[key] = request[key];
  }
  return body;
}

// Every golden: the prompt /tokenize renders is python3-jinja2's, token for token, and a chat
// completion of the same request reads that prompt (usage.prompt_tokens) and answers 200.
TEST(ServerToolsTest, ToolsAndToolTurnsReachTheTemplate) {
  const auto goldens = read_json(kSource / "tests" / "golden" / "chat_requests" / "goldens.json")["goldens"];
  std::map<std::string, nlohmann::ordered_json> requests;
  for (const auto& c : read_json(kSource / "tests" / "golden" / "chat_requests" / "requests.json")) {
    requests[c["name"]] = c["request"];
  }
  // The corpus sends every honoured message field at least once.
  const auto& turns = requests.at("tools_and_tool_turns")["messages"];
  ASSERT_TRUE(turns[0].contains("name") && turns[2].contains("tool_calls") && turns[3].contains("tool_call_id"));
  ASSERT_TRUE(requests.at("thinking_kwargs_and_history")["messages"][1].contains("reasoning_content"));
  std::map<std::string, std::vector<nlohmann::ordered_json>> by_template;
  for (const auto& g : goldens) by_template[g["template"]].push_back(g);
  ASSERT_GE(by_template.size(), 8u);
  for (const auto& [name, cases] : by_template) {
    SCOPED_TRACE(name);
    auto server = serve_with(name);
    ASSERT_NE(server, nullptr);
    auto client = server->client(60, "");
    for (const auto& g : cases) {
      SCOPED_TRACE(g["request"].get<std::string>());
      auto body = chat_body(requests.at(g["request"]));
      const JsonReply t = post(*client, "/tokenize", body);
      ASSERT_EQ(t.status, 200) << t.body;
      const std::string prompt = g["prompt"];
      const auto expected = kjv_tokenizer().encode(prompt, /*add_special_tokens=*/false);
      const auto tokens = t.json["tokens"].get<std::vector<int>>();
      EXPECT_EQ(kjv_tokenizer().decode(tokens, false), prompt);
      EXPECT_EQ(tokens, expected);
      EXPECT_EQ(t.json["count"], expected.size());
      body.update({{"max_tokens", 4}, {"temperature", 0}, {"parallel_tool_calls", false}});
      const JsonReply r = post(*client, "/v1/chat/completions", body);
      if (expected.size() + 4 > 512) {  // past kjv-tiny's context: the 400 counts the same prompt
        expect_api_error(r, 400, "messages", fmt::format("the prompt has {} tokens", expected.size()));
        continue;
      }
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(r.json["usage"]["prompt_tokens"], expected.size());
      EXPECT_EQ(r.json["choices"][0]["finish_reason"], "length") << r.body;
      EXPECT_FALSE(r.json["choices"][0]["message"].contains("tool_calls")) << r.body;
    }
  }
}

TEST(ServerToolsTest, ToolChoiceNoneAndTheRefusedChoices) {
  const json tools = json::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])");
  const json user = json::array({{{"role", "user"}, {"content", "Hi"}}});
  const json history = json::parse(R"([{"role":"user","content":"Hi"},
      {"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"ok"}])");
  {  // A template with a tool-call format (hermes): auto and none are served.
    auto server = serve_with("Qwen-Qwen2.5-7B-Instruct.jinja");
    ASSERT_NE(server, nullptr);
    EXPECT_THAT(server->log(), ::testing::HasSubstr("tool calls hermes"));
    auto client = server->client(60, "");
    for (const char* choice : {"auto", "none"}) {
      const json body = {{"messages", user}, {"tools", tools}, {"tool_choice", choice}, {"max_tokens", 2}};
      EXPECT_EQ(post(*client, "/v1/chat/completions", body).status, 200) << choice;
    }
  }
  {  // --tool-call-parser none: tools need tool_choice none (kjv-tiny's own template gets the generic
     // format otherwise: server_generic_tools_test.cc).
    std::string error;
    auto server = SpindleServer::start({"--tool-call-parser", "none"}, &error);
    ASSERT_NE(server, nullptr) << error;
    auto client = server->client(60, "");
    json body = {{"messages", user}, {"tools", tools}, {"max_tokens", 2}};
    expect_api_error(post(*client, "/v1/chat/completions", body), 400, "tools", "--tool-call-parser");
    body["tool_choice"] = "none";
    EXPECT_EQ(post(*client, "/v1/chat/completions", body).status, 200);
  }
  {  // A built-in template renders no tools and no tool turns.
    std::string error;
    auto server = SpindleServer::start({"--chat-template", "chatml"}, &error);
    ASSERT_NE(server, nullptr) << error;
    auto client = server->client(60, "");
    const json with_tools = {{"messages", user}, {"tools", tools}, {"tool_choice", "none"}, {"max_tokens", 2}};
    expect_api_error(post(*client, "/v1/chat/completions", with_tools), 400, "tools", "built-in chatml");
    expect_api_error(post(*client, "/v1/chat/completions", json{{"messages", history}, {"max_tokens", 2}}), 400,
                     "messages", "built-in chatml");
  }
}

// tool_choice "required" and a named function on kjv-tiny, which never writes a call by itself:
// the grammar forces one, returned as message.tool_calls with finish_reason "tool_calls", its
// arguments valid under the tool's schema (python3-jsonschema).
TEST(ServerToolsTest, ToolChoiceRequiredAndNamedAreEnforced) {
  const auto tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 10}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
      "required": ["city", "days"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
      "properties": {"zone": {"type": "string", "enum": ["UTC", "Europe/Paris"]}}, "required": ["zone"],
      "additionalProperties": false}}}])");
  const json user = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}});
  // Real templates' tool prompts outgrow kjv-tiny's 512-token context: a compact Hermes-style one.
  // Every string is bounded (maxLength, enum, no extra keys): kjv-tiny would otherwise write text
  // into a string until max_tokens, a valid prefix but no call.
  std::string error;
  auto server = SpindleServer::start(
      {"--chat-template", (kSource / "tests" / "server" / "data" / "hermes_compact.jinja").string()}, &error);
  ASSERT_NE(server, nullptr) << error;
  EXPECT_THAT(server->log(), ::testing::HasSubstr("tool calls hermes"));
  ASSERT_NE(server, nullptr);
  auto client = server->client(120, "");
  std::vector<std::pair<nlohmann::ordered_json, std::string>> jobs;
  const std::vector<std::pair<json, std::string>> choices = {
      {"required", ""}, {json{{"type", "function"}, {"function", {{"name", "get_time"}}}}, "get_time"},
      {json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}, "get_weather"}};
  for (const auto& [choice, name] : choices) {
    for (int seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(choice.dump() + " seed " + std::to_string(seed));
      nlohmann::ordered_json body = {{"messages", user}, {"tools", tools}, {"tool_choice", choice},
                                     {"parallel_tool_calls", false}, {"max_tokens", 300}, {"temperature", 1.0},
                                     {"seed", seed}};
      const auto r = post(*client, "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      const json& c = r.json["choices"][0];
      EXPECT_EQ(c["finish_reason"], "tool_calls") << r.body;
      ASSERT_TRUE(c["message"].contains("tool_calls")) << r.body;
      ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.body;
      const json& call = c["message"]["tool_calls"][0];
      EXPECT_EQ(call["type"], "function");
      EXPECT_THAT(call["id"].get<std::string>(), ::testing::MatchesRegex("call_[A-Za-z0-9]{24}"));
      const std::string called = call["function"]["name"];
      if (!name.empty()) EXPECT_EQ(called, name);
      const auto* tool = called == "get_weather" ? &tools[0] : &tools[1];
      ASSERT_TRUE(called == "get_weather" || called == "get_time") << called;
      jobs.emplace_back((*tool)["function"]["parameters"], call["function"]["arguments"].get<std::string>());
    }
  }
  EXPECT_EQ(jsonschema_verdicts(jobs), std::string(jobs.size(), '1'));

  const json required = {{"messages", user}, {"tools", tools}, {"tool_choice", "required"}, {"max_tokens", 8}};
  json with_format = required;
  with_format["response_format"] = {{"type", "json_object"}};
  expect_api_error(post(*client, "/v1/chat/completions", with_format), 400, "tool_choice");
  json unknown = required;
  unknown["tool_choice"] = {{"type", "function"}, {"function", {{"name", "nope"}}}};
  expect_api_error(post(*client, "/v1/chat/completions", unknown), 400, "tool_choice.function.name");
  json no_tools = {{"messages", user}, {"tool_choice", "required"}, {"max_tokens", 8}};
  expect_api_error(post(*client, "/v1/chat/completions", no_tools), 400, "tool_choice");
  json bad_schema = required;
  bad_schema["tools"] = json::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "patternProperties": {"a": {}}}}}])");
  expect_api_error(post(*client, "/v1/chat/completions", bad_schema), 400, "tools[0].function.parameters");
}

// chat_template_kwargs and reasoning_effort are template variables: a template that prints them.
TEST(ServerToolsTest, TemplateKwargsReachTheTemplate) {
  const fs::path path = fs::temp_directory_path() / ("spindle_kwargs_" + std::to_string(::getpid()) + ".jinja");
  std::ofstream(path) << "{{ messages[0].content }}|{{ reasoning_effort }}|{{ flavour | default('none') }}|"
                         "{{ enable_thinking is defined }}";
  std::string error;
  auto server = SpindleServer::start({"--chat-template", path.string()}, &error);
  ASSERT_NE(server, nullptr) << error;
  auto client = server->client(60, "");
  const json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                     {"chat_template_kwargs", {{"flavour", "salt"}, {"enable_thinking", false}}},
                     {"reasoning_effort", "high"}};
  const JsonReply t = post(*client, "/tokenize", body);
  ASSERT_EQ(t.status, 200) << t.body;
  const JsonReply d = post(*client, "/detokenize", json{{"tokens", t.json["tokens"]}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.json["prompt"], "Hi|high|salt|True");
  json chat = body;
  chat["max_tokens"] = 2;
  const JsonReply r = post(*client, "/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], t.json["count"]);
  fs::remove(path);
}

// DeepSeek-R1's template opens <think> in the prompt when enable_thinking is set: kjv-tiny's
// greedy text (never a </think>) is then all reasoning_content, content is empty and the finish
// reason is length, whole and streamed; the text equals a plain completion of the same prompt.
TEST(ServerToolsTest, ReasoningContentFromAThinkingTemplate) {
  auto server = serve_with("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja");
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(server->log(), ::testing::HasSubstr("reasoning deepseek_r1"));
  auto client = server->client(60, "");
  json body = {{"messages", {{{"role", "user"}, {"content", "Who made the heaven?"}}}},
               {"chat_template_kwargs", {{"enable_thinking", true}}}};
  const JsonReply t = post(*client, "/tokenize", body);
  body.update({{"max_tokens", 8}, {"temperature", 0}});
  ASSERT_EQ(t.status, 200) << t.body;
  const JsonReply plain = post(*client, "/v1/completions",
                               json{{"prompt", t.json["tokens"]}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  const std::string text = plain.json["choices"][0]["text"];
  ASSERT_FALSE(text.empty());
  const JsonReply r = post(*client, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& m = r.json["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], text) << r.body;
  EXPECT_EQ(m["content"], "") << r.body;
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "length");
  body["stream"] = true;
  const SseReply s = post_stream(*client, "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  std::string streamed_reasoning, streamed_content;
  for (const auto& e : s.events) {
    const json& delta = e["choices"][0]["delta"];
    streamed_reasoning += delta.value("reasoning_content", "");
    streamed_content += delta.value("content", "");
  }
  EXPECT_EQ(streamed_reasoning, text);
  EXPECT_EQ(streamed_content, "");
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "length");
  // Without enable_thinking the template closes the section in the prompt: the text is content.
  body.erase("chat_template_kwargs");
  body["stream"] = false;
  const JsonReply closed = post(*client, "/v1/chat/completions", body);
  ASSERT_EQ(closed.status, 200) << closed.body;
  EXPECT_FALSE(closed.json["choices"][0]["message"]["content"].get<std::string>().empty()) << closed.body;
  EXPECT_TRUE(closed.json["choices"][0]["message"]["reasoning_content"].is_null()) << closed.body;
}

// /tokenize and /detokenize in vLLM's shapes, and the queue-time histogram in /metrics.
TEST(ServerToolsTest, TokenizeDetokenizeAndQueueTime) {
  std::string error;
  auto server = SpindleServer::start({}, &error);
  ASSERT_NE(server, nullptr) << error;
  auto client = server->client(60, "");
  const std::string text = "In the beginning God created the heaven";
  const auto ids = kjv_tokenizer().encode(text, true);
  const JsonReply t = post(*client, "/tokenize", json{{"prompt", text}, {"return_token_strs", true}});
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.json["tokens"].get<std::vector<int>>(), ids);
  EXPECT_EQ(t.json["count"], ids.size());
  EXPECT_EQ(t.json["max_model_len"], get(*client, "/v1/models").json["data"][0]["max_model_len"]);
  ASSERT_EQ(t.json["token_strs"].size(), ids.size());
  EXPECT_EQ(t.json["token_strs"][1], kjv_tokenizer().id_to_token(ids[1]));
  EXPECT_TRUE(post(*client, "/tokenize", json{{"prompt", text}}).json["token_strs"].is_null());
  const JsonReply d = post(*client, "/detokenize", json{{"tokens", ids}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.json["prompt"], kjv_tokenizer().decode(ids, false));
  // The chat form is the prompt a chat completion gets.
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  const JsonReply ct = post(*client, "/tokenize", chat);
  ASSERT_EQ(ct.status, 200) << ct.body;
  const JsonReply cc = post(*client, "/v1/chat/completions", json{{"messages", chat["messages"]}, {"max_tokens", 1}});
  EXPECT_EQ(cc.json["usage"]["prompt_tokens"], ct.json["count"]);
  expect_api_error(post(*client, "/detokenize", json{{"tokens", {1, -1}}}), 400, "tokens");
  expect_api_error(post(*client, "/detokenize", json{{"tokens", "abc"}}), 400, "tokens");
  expect_api_error(post(*client, "/tokenize", json{{"prompt", text}, {"temperature", 1}}), 400, "temperature");
  expect_api_error(post(*client, "/tokenize", json{{"prompt", 5}}), 400, "prompt");
  expect_api_error(post(*client, "/tokenize", json{{"prompt", text}, {"model", "other"}}), 404, "model");
  EXPECT_EQ(get(*client, "/tokenize").status, 405);
  const auto m = server_metrics(*client);
  EXPECT_GE(metric(m, "spindle_request_queue_time_seconds_count"), 1.0);
  EXPECT_GE(metric(m, "spindle_request_queue_time_seconds_sum"), 0.0);
}

// The Vercel AI SDK (`ai` 6, `@ai-sdk/openai-compatible` 2; tests/node/ai_sdk_tools_test.mjs) over
// Mistral-Nemo's template: generateText and streamText with forced tool calls parsed back to the
// declared schemas (and executed by the SDK), a tool result in history, generateObject. Skips
// without node or the packages.
TEST(ServerToolsTest, VercelAiSdkToolsAndObjects) {
  if (std::string why = node_client_unavailable({"ai", "@ai-sdk/openai-compatible"}); !why.empty()) GTEST_SKIP() << why;
  auto server = serve_with("mistralai-Mistral-Nemo-Instruct-2407.jinja");
  ASSERT_NE(server, nullptr);
  expect_node_client_passes("ai_sdk_tools_test", server->base_url() + "/v1", std::chrono::seconds(240));
  auto client = server->client();
  EXPECT_TRUE(kv_settled(*client));
}

}  // namespace
}  // namespace spindle::testing
