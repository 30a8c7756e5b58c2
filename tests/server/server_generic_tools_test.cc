// The generic tool-call format and the lazily armed grammars against the real binary on the
// embedded kjv-tiny, whose own template teaches no tool syntax (so it gets the generic format:
// tools described in a system message, the answer one JSON object constrained from its first
// byte), and a response_format served with DeepSeek-R1's thinking template (the constraint armed
// after the reasoning section). Arguments and documents are validated by python3-jsonschema
// (tests/grammar/validate_instances.py); streamed tool-call deltas are assembled as the openai
// client assembles them and equal the whole response of the same seed.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "server_checks.h"
#include "support/jsonschema_verdicts.h"
#include "spindle_server.h"

namespace spindle::testing {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
namespace fs = std::filesystem;

const fs::path kSource = SPINDLE_SOURCE_DIR;

JsonReply post(httplib::Client& client, const std::string& path, const ordered_json& body) {
  return testing::post(client, path, body.dump());
}

// Bounded schemas: kjv-tiny would otherwise write into a string until max_tokens.
const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "amen", "parameters": {"type": "object",
    "properties": {"loud": {"type": "boolean"}}, "required": ["loud"], "additionalProperties": false}}}])");

const ordered_json& schema_of(const std::string& name) {
  for (const auto& t : kTools) {
    if (t["function"]["name"] == name) return t["function"]["parameters"];
  }
  ADD_FAILURE() << "no tool " << name;
  return kTools[0]["function"]["parameters"];
}

const json kUser = json::array({{{"role", "user"}, {"content", "Weather in Ur?"}}});

TEST(ServerGenericToolsTest, TheEmbeddedModelAnswersInTheGenericFormat) {
  std::string error;
  auto server = SpindleServer::start({}, &error);
  ASSERT_NE(server, nullptr) << error;
  EXPECT_THAT(server->log(), ::testing::HasSubstr("tool calls generic"));
  auto client = server->client(120, "");
  // The prompt carries the instructions and the tools in a system message.
  const JsonReply t = post(*client, "/tokenize", ordered_json{{"messages", kUser}, {"tools", kTools}});
  ASSERT_EQ(t.status, 200) << t.body;
  const JsonReply d = post(*client, "/detokenize", json{{"tokens", t.json["tokens"]}});
  const std::string prompt = d.json["prompt"];
  EXPECT_THAT(prompt, ::testing::StartsWith("<|im_start|>system\nAnswer with exactly one JSON object"));
  EXPECT_THAT(prompt, ::testing::HasSubstr(R"({"response": "<your reply>"})"));
  EXPECT_THAT(prompt, ::testing::HasSubstr(R"("name":"get_weather","description":"Weather of a city.")"));
  EXPECT_THAT(prompt, ::testing::EndsWith("<|im_start|>user\nWeather in Ur?<|im_end|>\n<|im_start|>assistant\n"));

  std::vector<std::pair<ordered_json, std::string>> jobs;
  const std::vector<std::pair<json, std::string>> choices = {
      {"required", ""}, {json{{"type", "function"}, {"function", {{"name", "amen"}}}}, "amen"}};
  for (const auto& [choice, name] : choices) {
    for (int seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(choice.dump() + " seed " + std::to_string(seed));
      // One call: the prompt (~380 kjv-tiny tokens) leaves ~130 of the 512-token context.
      const ordered_json body = {{"messages", kUser}, {"tools", kTools}, {"tool_choice", choice},
                                 {"parallel_tool_calls", false}, {"max_tokens", 120}, {"temperature", 1.0},
                                 {"seed", seed}};
      const JsonReply r = post(*client, "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      const json& c = r.json["choices"][0];
      ASSERT_EQ(c["finish_reason"], "tool_calls") << r.body;
      EXPECT_TRUE(c["message"]["content"].is_null()) << r.body;
      ASSERT_GE(c["message"]["tool_calls"].size(), 1u) << r.body;
      if (!name.empty()) {
        EXPECT_EQ(c["message"]["tool_calls"].size(), 1u);
      }
      for (const json& call : c["message"]["tool_calls"]) {
        EXPECT_THAT(call["id"].get<std::string>(), ::testing::MatchesRegex("call_[A-Za-z0-9]{24}"));
        const std::string called = call["function"]["name"];
        if (!name.empty()) {
          EXPECT_EQ(called, name);
        }
        jobs.emplace_back(schema_of(called), call["function"]["arguments"].get<std::string>());
      }
    }
  }
  // auto: calls, or a response read into content (a cut answer comes back as written).
  int num_answers = 0;
  for (int seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("auto seed " + std::to_string(seed));
    const ordered_json body = {{"messages", kUser}, {"tools", kTools}, {"max_tokens", 60}, {"temperature", 1.0},
                               {"seed", seed}};
    const JsonReply r = post(*client, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const json& c = r.json["choices"][0];
    if (c["finish_reason"] == "tool_calls") {
      for (const json& call : c["message"]["tool_calls"]) {
        jobs.emplace_back(schema_of(call["function"]["name"]), call["function"]["arguments"].get<std::string>());
      }
      ++num_answers;
    } else if (c["finish_reason"] == "stop") {
      EXPECT_FALSE(c["message"].contains("tool_calls")) << r.body;
      EXPECT_THAT(c["message"]["content"].get<std::string>(), ::testing::Not(::testing::StartsWith("{"))) << r.body;
      ++num_answers;
    } else {
      EXPECT_EQ(c["finish_reason"], "length") << r.body;
      EXPECT_THAT(c["message"]["content"].get<std::string>(), ::testing::StartsWith("{\"")) << r.body;
    }
  }
  EXPECT_EQ(jsonschema_verdicts(jobs), std::string(jobs.size(), '1'));
  RecordProperty("auto_answers_finished", num_answers);
}

// Streamed tool calls as the openai client assembles them (by index: the first delta of a call
// has its id, type and name; arguments are concatenated) equal the whole response of that seed.
TEST(ServerGenericToolsTest, StreamedToolCallsAssembleToTheWholeResponse) {
  std::string error;
  auto server = SpindleServer::start({}, &error);
  ASSERT_NE(server, nullptr) << error;
  auto client = server->client(120, "");
  for (int seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    // One key order for both (the tools' JSON is part of the prompt).
    json body = {{"messages", kUser}, {"tools", json::parse(kTools.dump())}, {"tool_choice", "required"},
                 {"parallel_tool_calls", false}, {"max_tokens", 120}, {"temperature", 1.0}, {"seed", seed}};
    const JsonReply whole = testing::post(*client, "/v1/chat/completions", body);
    ASSERT_EQ(whole.status, 200) << whole.body;
    body["stream"] = true;
    const SseReply s = post_stream(*client, "/v1/chat/completions", body);
    ASSERT_EQ(s.status, 200);
    ASSERT_TRUE(s.done);
    json calls = json::array();
    std::string finish;
    for (const auto& e : s.events) {
      if (!e.contains("choices") || e["choices"].empty()) continue;
      const json& choice = e["choices"][0];
      if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
      for (const json& t : choice["delta"].value("tool_calls", json::array())) {
        const size_t i = t["index"];
        if (i == calls.size()) {
          ASSERT_TRUE(t.contains("id") && t["type"] == "function" && t["function"].contains("name")) << t.dump();
          calls.push_back({{"id", t["id"]}, {"type", "function"}, {"function", {{"name", t["function"]["name"]}, {"arguments", ""}}}});
        }
        ASSERT_LT(i, calls.size());
        calls[i]["function"]["arguments"] =
            calls[i]["function"]["arguments"].get<std::string>() + t["function"].value("arguments", "");
      }
    }
    EXPECT_EQ(finish, "tool_calls");
    const json& expected = whole.json["choices"][0]["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), expected.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i]["function"], expected[i]["function"]);  // ids are fresh per response
    }
  }
}

// response_format with a reasoning template: the document is armed after the reasoning section.
// With enable_thinking the prompt opens it, kjv-tiny never closes it, so everything is reasoning
// (the text of a plain completion of the same prompt: nothing was masked); without it the prompt
// closes the section and the content is the document (or the output opens a section of its own).
TEST(ServerGenericToolsTest, AResponseFormatIsArmedAfterTheReasoningSection) {
  std::string error;
  auto server = SpindleServer::start(
      {"--chat-template", (kSource / "tests" / "golden" / "chat_templates" / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja").string()},
      &error);
  ASSERT_NE(server, nullptr) << error;
  auto client = server->client(120, "");
  const ordered_json schema = ordered_json::parse(R"({"type": "object", "properties": {"book": {"enum": ["Genesis", "Exodus"]},
      "verse": {"type": "integer", "minimum": 1, "maximum": 99}}, "required": ["book", "verse"], "additionalProperties": false})");
  const ordered_json format = {{"type", "json_schema"}, {"json_schema", {{"name", "verse"}, {"schema", schema}}}};
  ordered_json body = {{"messages", kUser}, {"chat_template_kwargs", {{"enable_thinking", true}}},
                       {"response_format", format}, {"max_tokens", 8}, {"temperature", 0}};
  const JsonReply t =
      post(*client, "/tokenize", ordered_json{{"messages", kUser}, {"chat_template_kwargs", {{"enable_thinking", true}}}});
  ASSERT_EQ(t.status, 200) << t.body;
  const JsonReply plain = post(*client, "/v1/completions", ordered_json{{"prompt", t.json["tokens"]}, {"max_tokens", 8},
                                                                        {"temperature", 0}});
  const JsonReply thinking = post(*client, "/v1/chat/completions", body);
  ASSERT_EQ(thinking.status, 200) << thinking.body;
  EXPECT_EQ(thinking.json["choices"][0]["message"]["reasoning_content"], plain.json["choices"][0]["text"]) << thinking.body;
  EXPECT_EQ(thinking.json["choices"][0]["message"]["content"], "");
  EXPECT_EQ(thinking.json["choices"][0]["finish_reason"], "length");

  // Without it the output may open a section itself (kjv-tiny at temperature 1 takes the "<" the
  // mask leaves it, and never closes the section), or start the document.
  body.erase("chat_template_kwargs");
  body["max_tokens"] = 120;
  body["temperature"] = 1.0;
  std::vector<std::pair<ordered_json, std::string>> jobs;
  int num_opened = 0;
  auto run = [&](int seed) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " " + body.dump());
    body["seed"] = seed;
    const JsonReply r = post(*client, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const json& c = r.json["choices"][0];
    if (c["message"]["reasoning_content"].is_string()) {  // opened by the output, still open
      ++num_opened;
      EXPECT_EQ(c["message"]["content"], "") << r.body;
      EXPECT_EQ(c["finish_reason"], "length") << r.body;
    } else if (c["finish_reason"] == "stop") {
      jobs.emplace_back(schema, c["message"]["content"].get<std::string>());
    }
  };
  for (int seed = 1; seed <= 4; ++seed) run(seed);
  // "<" (the opening marker's first token) biased away: the output is the document.
  const JsonReply lt = post(*client, "/tokenize", ordered_json{{"prompt", "<"}, {"add_special_tokens", false}});
  ASSERT_EQ(lt.status, 200) << lt.body;
  for (const auto& id : lt.json["tokens"]) body["logit_bias"][std::to_string(id.get<int>())] = -100;
  const size_t before = jobs.size();
  for (int seed = 1; seed <= 4; ++seed) run(seed);
  EXPECT_GE(jobs.size() - before, 2u);
  EXPECT_EQ(jsonschema_verdicts(jobs), std::string(jobs.size(), '1'));
  RecordProperty("sections_opened_by_the_output", num_opened);
}

}  // namespace
}  // namespace spindle::testing
