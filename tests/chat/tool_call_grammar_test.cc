// The grammar of forced tool calls (tool_choice "required" / a named function) against
// independent truth: it accepts the call as the model's own template renders it (python3-jinja2's
// renderings in tests/golden/chat_requests/goldens.json), what it generates is read back by the
// format's parser as calls to the allowed tools whose arguments python3-jsonschema validates
// (tests/grammar/validate_instances.py), and it rejects another function, a schema violation, and
// a second call where one is allowed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "chat/tool_call_grammar.h"
#include "grammar/matcher.h"
#include "util/error.h"

namespace spindle::chat {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

const fs::path kSource = SPINDLE_SOURCE_DIR;

// The golden request's tool, its properties declared in the order its history's call writes them
// (the grammar writes declared properties in declared order).
const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
      "days": {"type": "integer", "minimum": 1, "maximum": 7}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
      "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
    "properties": {"zone": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Z][a-z]+$"}}, "required": ["zone"],
    "additionalProperties": false}}},
  {"type": "function", "function": {"name": "ping"}}])");

std::shared_ptr<const grammar::TokenizerInfo> byte_vocab() {
  grammar::Vocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  v.token_bytes.push_back("");
  v.eos_ids = {256};
  return std::make_shared<const grammar::TokenizerInfo>(v);
}

std::shared_ptr<const grammar::CompiledGrammar> compiled(std::string_view format, std::string name, bool parallel) {
  const ForcedToolCalls forced{&kTools, std::move(name), parallel};
  return grammar::CompiledGrammar::compile(tool_call_grammar(find_tool_call_format(format), forced));
}

bool matches(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::string& text) {
  grammar::Matcher m(g, byte_vocab());
  return m.accept_bytes(text) && m.is_complete();
}

std::vector<ToolCall> parse_calls(std::string_view format, const std::string& text, std::string* content = nullptr) {
  auto parser = make_tool_call_parser(find_tool_call_format(format));
  ToolCallDelta a = parser->push(text);
  ToolCallDelta b = parser->finish();
  if (content) *content = a.content + b.content;
  a.calls.insert(a.calls.end(), b.calls.begin(), b.calls.end());
  return a.calls;
}

// The assistant's call in a golden prompt: from `begin` up to (and without) `end`.
std::string golden_call(const std::string& template_name, const std::string& begin, const std::string& end) {
  std::ifstream in(kSource / "tests" / "golden" / "chat_requests" / "goldens.json");
  const ordered_json goldens = ordered_json::parse(in);
  for (const auto& g : goldens["goldens"]) {
    if (g["template"] != template_name || g["request"] != "tools_and_tool_turns") continue;
    const std::string prompt = g["prompt"];
    const size_t from = prompt.find(begin);
    const size_t to = prompt.find(end, from);
    if (from != std::string::npos && to != std::string::npos) return prompt.substr(from, to - from);
  }
  ADD_FAILURE() << "no call in the golden of " << template_name;
  return "";
}

TEST(ToolCallGrammarTest, AcceptsTheTemplatesOwnRenderingAndTheParserReadsIt) {
  struct Case {
    const char* format;
    const char* template_name;
    const char* begin;
    const char* end;
  };
  for (const Case& c : {Case{"hermes", "Qwen-Qwen2.5-7B-Instruct.jinja", "<tool_call>\n{\"name\": \"get_weather\"",
                             "<|im_end|>"},
                        Case{"llama3_json", "meta-llama-Llama-3.1-8B-Instruct.jinja",
                             "{\"name\": \"get_weather\", \"parameters\"", "<|eot_id|>"}}) {
    SCOPED_TRACE(c.format);
    const std::string call = golden_call(c.template_name, c.begin, c.end);
    ASSERT_FALSE(call.empty());
    EXPECT_TRUE(matches(compiled(c.format, "get_weather", true), call)) << call;
    EXPECT_TRUE(matches(compiled(c.format, "", true), call)) << call;
    EXPECT_TRUE(matches(compiled(c.format, "", false), call)) << call;
    EXPECT_FALSE(matches(compiled(c.format, "get_time", true), call)) << call;  // another function
    const auto calls = parse_calls(c.format, call);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(ordered_json::parse(calls[0].arguments), ordered_json::parse(R"({"city": "Paris", "days": 2, "unit": "celsius"})"));
  }
}

TEST(ToolCallGrammarTest, RejectsOtherFunctionsSchemaViolationsAndExtraCalls) {
  const auto named = compiled("hermes", "get_weather", true);
  const auto one = compiled("hermes", "", false);
  const auto many = compiled("hermes", "", true);
  const std::string weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
  const std::string time = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"Europe/Rome\"}}\n</tool_call>";
  EXPECT_TRUE(matches(named, weather));
  EXPECT_FALSE(matches(named, time));
  EXPECT_TRUE(matches(one, time));
  EXPECT_FALSE(matches(one, weather + "\n" + time));  // parallel_tool_calls false: exactly one
  EXPECT_TRUE(matches(many, weather + "\n" + time));
  EXPECT_FALSE(matches(named, weather + "\n" + weather));  // a named function: exactly one call
  EXPECT_FALSE(matches(many, ""));                          // required: at least one call
  EXPECT_FALSE(matches(many, "Sure."));
  for (const char* bad : {R"({"city": 5})", R"({"days": 2})", R"({"city": "Rome", "days": 9})",
                          R"({"city": "Rome", "unit": "kelvin"})", R"({"city": "Rome", "extra": 1})"}) {
    EXPECT_FALSE(matches(named, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + std::string(bad) +
                                    "}\n</tool_call>"))
        << bad;
  }
  EXPECT_FALSE(matches(many, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"rome\"}}\n</tool_call>"));
  EXPECT_FALSE(matches(many, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
  // A tool without parameters takes {} only.
  EXPECT_TRUE(matches(many, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(matches(many, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"a\": 1}}\n</tool_call>"));
  const auto llama = compiled("llama3_json", "", true);
  EXPECT_TRUE(matches(llama, R"({"name": "ping", "parameters": {}}; {"name": "get_time", "parameters": {"zone": "Asia/Tokyo"}})"));
  EXPECT_FALSE(matches(llama, R"({"name": "ping", "arguments": {}})"));
}

TEST(ToolCallGrammarTest, OtherFormatsAndUnknownFunctionsAreErrorsNamingThem) {
  for (std::string_view name : {"mistral", "qwen3_coder", "deepseek_v3"}) {
    const ToolCallFormat& f = find_tool_call_format(name);
    EXPECT_NE(tool_call_grammar_unsupported(f).find(std::string(name)), std::string::npos);
    EXPECT_THROW(tool_call_grammar(f, {&kTools, "", true}), Error);
  }
  EXPECT_TRUE(tool_call_grammar_unsupported(find_tool_call_format("hermes")).empty());
  try {
    tool_call_grammar(find_tool_call_format("hermes"), {&kTools, "nope", true});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("'nope'"), std::string::npos) << e.message();
  }
  const ordered_json bad = ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "patternProperties": {"a": {}}}}}])");
  try {
    tool_call_grammar(find_tool_call_format("hermes"), {&bad, "", true});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("tools[0].function.parameters"), std::string::npos) << e.message();
  }
}

// A random output the grammar allows: random allowed printable bytes, steering to an end once long.
std::string random_output(const std::shared_ptr<const grammar::CompiledGrammar>& g, std::mt19937& rng) {
  grammar::Matcher m(g, byte_vocab());
  std::string out;
  bool in_string = false, escaped = false;
  while (out.size() < 3000) {
    const std::bitset<256> allowed = m.allowed_bytes();
    if (m.is_complete() && (allowed.none() || rng() % 3 == 0)) return out;
    std::vector<int> bytes;
    for (int b = 0; b < 256; ++b) {
      if (allowed[static_cast<size_t>(b)] && (b == '\n' || (b >= 0x20 && b < 0x7f))) bytes.push_back(b);
    }
    EXPECT_FALSE(bytes.empty()) << out;
    if (bytes.empty()) return out;
    int pick = bytes[rng() % bytes.size()];
    if (out.size() > 60 && rng() % 3 != 0) {
      for (int c : in_string ? std::vector<int>{'"'} : std::vector<int>{'}', '"', '<', '\n'}) {
        if (allowed[static_cast<size_t>(c)]) {
          pick = c;
          break;
        }
      }
    }
    if (escaped) {
      escaped = false;
    } else if (in_string && pick == '\\') {
      escaped = true;
    } else if (pick == '"') {
      in_string = !in_string;
    }
    EXPECT_TRUE(m.accept_bytes(std::string(1, static_cast<char>(pick))));
    out += static_cast<char>(pick);
  }
  ADD_FAILURE() << "no end after 3000 bytes: " << out;
  return out;
}

TEST(ToolCallGrammarTest, WhatItGeneratesParsesBackAndValidates) {
  std::mt19937 rng(7);
  std::ostringstream jobs;
  size_t num_jobs = 0;
  for (const char* format : {"hermes", "llama3_json", "generic"}) {
    const auto g = compiled(format, "", true);
    for (int i = 0; i < 40; ++i) {
      const std::string out = random_output(g, rng);
      std::string content;
      const auto calls = parse_calls(format, out, &content);
      ASSERT_FALSE(calls.empty()) << out;
      EXPECT_EQ(content, "") << out;
      for (const ToolCall& call : calls) {
        const ordered_json* tool = nullptr;
        for (const auto& t : kTools) {
          if (t["function"]["name"] == call.name) tool = &t;
        }
        ASSERT_NE(tool, nullptr) << call.name;
        ordered_json schema = tool->at("function").value("parameters", ordered_json{{"type", "object"}, {"maxProperties", 0}});
        jobs << ordered_json{{"schema", schema}, {"instance", call.arguments}}.dump() << "\n";
        ++num_jobs;
      }
    }
  }
  const fs::path dir = fs::temp_directory_path() / ("spindle_tool_grammar_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in.jsonl") << jobs.str();
  const std::string cmd = "python3 " + (kSource / "tests" / "grammar" / "validate_instances.py").string() + " < " +
                          (dir / "in.jsonl").string() + " > " + (dir / "out.txt").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream verdicts(dir / "out.txt");
  std::string line;
  size_t n = 0;
  std::istringstream in(jobs.str());
  std::string job;
  while (std::getline(verdicts, line)) {
    std::getline(in, job);
    EXPECT_EQ(line, "1") << job;
    ++n;
  }
  EXPECT_EQ(n, num_jobs);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace spindle::chat
