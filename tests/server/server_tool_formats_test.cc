// tool_choice "required" and a named function in the qwen3_coder, mistral and deepseek_v3 formats,
// against the real binary on the embedded kjv-tiny (tests/golden/kjv-tiny), which never writes a
// call by itself, at temperature 1 over several seeds: the grammar forces the call. Served with
// compact templates of each family (tests/server/data; real templates' tool prompts outgrow
// kjv-tiny's 512-token context) so the format is detected from the template. Checked against
// independent truth:
//   - the output text (the chosen tokens' bytes from logprobs) is read by a reference parse of the
//     format written in Python (tests/chat/reference_tool_calls.py: regular expressions and json),
//     which finds exactly the calls the server returned in message.tool_calls;
//   - the arguments validate under the tool's schema by python3-jsonschema
//     (tests/grammar/validate_instances.py).
// Every string is bounded (maxLength, enum) and no extra keys are allowed: kjv-tiny would otherwise
// write text into a string until max_tokens, a valid prefix but no call. For the same reason
// parallel_tool_calls is false here (with it true kjv-tiny writes calls until max_tokens; the
// grammars of several calls are tested on text, tests/chat/tool_call_grammar_test.cc).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "server_checks.h"
#include "support/jsonschema_verdicts.h"
#include "spindle_server.h"

namespace spindle::testing {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
namespace fs = std::filesystem;

const fs::path kSource = SPINDLE_SOURCE_DIR;

const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 10}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
      "metric": {"type": "boolean"}},
    "required": ["city", "days"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "Europe/Paris"]}}, "required": ["zone"],
    "additionalProperties": false}}}])");

struct Format {
  const char* name;
  const char* template_file;
  const char* id_pattern;
};

class ServerToolFormatsTest : public ::testing::TestWithParam<Format> {};

// The output text from logprobs: each chosen token's bytes (an end-of-sequence token the grammar
// accepted ends the text and is not part of it).
std::string output_text(const json& choice) {
  std::string text;
  for (const auto& t : choice["logprobs"]["content"]) {
    if (t["token"] == "<|endoftext|>") break;
    for (int b : t["bytes"]) text += static_cast<char>(b);
  }
  return text;
}

TEST_P(ServerToolFormatsTest, RequiredAndNamedCallsParseAsTheReferenceReadsThemAndValidate) {
  const Format& f = GetParam();
  std::string error;
  auto server =
      SpindleServer::start({"--chat-template", (kSource / "tests" / "server" / "data" / f.template_file).string()}, &error);
  ASSERT_NE(server, nullptr) << error;
  EXPECT_THAT(server->log(), ::testing::HasSubstr(fmt::format("tool calls {}", f.name)));
  auto client = server->client(180, "");
  const json user = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}});
  const auto named = [](const char* name) { return json{{"type", "function"}, {"function", {{"name", name}}}}; };
  struct Choice {
    json choice;
    std::string name;  // the function it names, or empty
    bool parallel;
  };
  std::vector<std::pair<ordered_json, std::string>> validation;  // (schema, arguments)
  std::ostringstream reference;
  std::vector<std::vector<std::pair<std::string, std::string>>> returned;  // per output: (name, arguments)
  for (const Choice& c : {Choice{"required", "", false}, Choice{named("get_time"), "get_time", false},
                          Choice{named("get_weather"), "get_weather", false}}) {
    for (int seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(c.choice.dump() + (c.parallel ? " parallel" : "") + " seed " + std::to_string(seed));
      const json body = {{"messages", user},   {"tools", kTools},       {"tool_choice", c.choice},
                         {"parallel_tool_calls", c.parallel}, {"max_tokens", 300}, {"temperature", 1.0},
                         {"seed", seed},       {"logprobs", true}};
      const auto r = post(*client, "/v1/chat/completions", body.dump());
      ASSERT_EQ(r.status, 200) << r.body;
      const json& choice = r.json["choices"][0];
      EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.body;
      const json& calls = choice["message"]["tool_calls"];
      ASSERT_TRUE(calls.is_array() && !calls.empty()) << r.body;
      if (!c.parallel) EXPECT_EQ(calls.size(), 1u) << r.body;
      std::vector<std::pair<std::string, std::string>> these;
      for (const json& call : calls) {
        EXPECT_THAT(call["id"].get<std::string>(), ::testing::MatchesRegex(f.id_pattern));
        const std::string called = call["function"]["name"];
        if (!c.name.empty()) EXPECT_EQ(called, c.name);
        ASSERT_TRUE(called == "get_weather" || called == "get_time") << called;
        const auto& tool = kTools[called == "get_weather" ? 0 : 1];
        const std::string arguments = call["function"]["arguments"];
        validation.emplace_back(tool["function"]["parameters"], arguments);
        these.emplace_back(called, arguments);
      }
      reference << ordered_json{{"format", f.name}, {"text", output_text(choice)}, {"tools", kTools}}.dump() << "\n";
      returned.push_back(std::move(these));
    }
  }
  EXPECT_EQ(jsonschema_verdicts(validation), std::string(validation.size(), '1'));
  const auto read = run_python((kSource / "tests" / "chat" / "reference_tool_calls.py").string(), reference.str());
  ASSERT_EQ(read.size(), returned.size());
  for (size_t i = 0; i < read.size(); ++i) {
    const json expected = json::parse(read[i])["calls"];
    ASSERT_TRUE(expected.is_array()) << "output " << i << ": the reference parse reads no calls";
    ASSERT_EQ(expected.size(), returned[i].size()) << "output " << i;
    for (size_t k = 0; k < expected.size(); ++k) {
      EXPECT_EQ(returned[i][k].first, expected[k]["name"]);
      EXPECT_EQ(json::parse(returned[i][k].second), expected[k]["arguments"]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ServerToolFormatsTest,
                         ::testing::Values(Format{"qwen3_coder", "qwen3_coder_compact.jinja", "call_[A-Za-z0-9]{24}"},
                                           Format{"mistral", "mistral_compact.jinja", "[A-Za-z0-9]{9}"},
                                           Format{"deepseek_v3", "deepseek_compact.jinja", "call_[A-Za-z0-9]{24}"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace spindle::testing
