// The grammar of forced tool calls (tool_choice "required" / a named function) of every format
// against independent truth:
//   - it accepts the call as the model's own template renders it (python3-jinja2's renderings in
//     tests/golden/chat_requests/goldens.json; Mistral-Small-3.2's rendered here by the same
//     reference renderer, tests/jinja/jinja_oracle.py), and the format's parser reads it back;
//   - what it generates (random walks over the bytes it allows) is read back by the format's parser
//     as calls to the allowed tools, the same calls a reference parse of the format in Python
//     (tests/chat/reference_tool_calls.py: regular expressions and json) reads, whose arguments
//     python3-jsonschema validates (tests/grammar/validate_instances.py);
//   - it rejects another function, a schema violation, and a second call where one is allowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <bitset>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "chat/tool_call_grammar.h"
#include "grammar/matcher.h"
#include "support/byte_grammar.h"
#include "support/jsonschema_verdicts.h"
#include "support/run_python.h"
#include "util/error.h"

namespace spindle::chat {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

const fs::path kSource = SPINDLE_SOURCE_DIR;

// The golden requests' tool, its properties declared in the order its history's call writes them
// (the grammar writes declared properties in declared order), and tools of other shapes: a pattern,
// no parameters, free text, JSON values of several types (Qwen3-Coder writes them as JSON).
const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
      "days": {"type": "integer", "minimum": 1, "maximum": 7}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
      "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
    "properties": {"zone": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Z][a-z]+$"}}, "required": ["zone"],
    "additionalProperties": false}}},
  {"type": "function", "function": {"name": "ping"}},
  {"type": "function", "function": {"name": "log", "parameters": {"type": "object", "properties": {
    "message": {"type": "string"}, "level": {"type": ["integer", "null"]}, "urgent": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 2}},
    "required": ["message", "urgent"], "additionalProperties": false}}}])");

constexpr const char* kFormats[] = {"hermes", "llama3_json", "qwen3_coder", "mistral", "deepseek_v3", "generic"};

using testing::byte_vocab;
using testing::matches;
using testing::run_python;

std::shared_ptr<const grammar::CompiledGrammar> compiled(std::string_view format, std::string name, bool parallel) {
  const ForcedToolCalls forced{&kTools, std::move(name), parallel};
  return grammar::CompiledGrammar::compile(tool_call_grammar(find_tool_call_format(format), forced));
}

std::vector<ToolCall> parse_calls(std::string_view format, const std::string& text, std::string* content = nullptr) {
  auto parser = make_tool_call_parser(find_tool_call_format(format), &kTools);
  ToolCallDelta a = parser->push(text);
  ToolCallDelta b = parser->finish();
  if (content) *content = a.content + b.content;
  a.calls.insert(a.calls.end(), b.calls.begin(), b.calls.end());
  return a.calls;
}

// The assistant's call in a golden prompt: from `begin` up to (and without) `end`.
std::string golden_call(const std::string& request, const std::string& template_name, const std::string& begin,
                        const std::string& end) {
  std::ifstream in(kSource / "tests" / "golden" / "chat_requests" / "goldens.json");
  const ordered_json goldens = ordered_json::parse(in);
  for (const auto& g : goldens["goldens"]) {
    if (g["template"] != template_name || g["request"] != request) continue;
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
  for (const Case& c :
       {Case{"hermes", "Qwen-Qwen2.5-7B-Instruct.jinja", "<tool_call>\n{\"name\": \"get_weather\"", "<|im_end|>"},
        Case{"llama3_json", "meta-llama-Llama-3.1-8B-Instruct.jinja", "{\"name\": \"get_weather\", \"parameters\"",
             "<|eot_id|>"},
        Case{"qwen3_coder", "Qwen3-Coder.jinja", "<tool_call>\n<function=get_weather>", "<|im_end|>"},
        Case{"deepseek_v3", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜tool▁calls▁begin｜>",
             "<｜end▁of▁sentence｜>"}}) {
    SCOPED_TRACE(c.format);
    const std::string call = golden_call("tools_and_tool_turns", c.template_name, c.begin, c.end);
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

// Mistral's two generations: Nemo's JSON list (golden: two calls with the 9-character ids its
// template writes) and Small 3.2's [TOOL_CALLS]name[CALL_ID]id[ARGS]{...} (rendered here).
TEST(ToolCallGrammarTest, AcceptsBothMistralGenerations) {
  const std::string nemo = golden_call("parallel_calls_mistral_ids", "mistralai-Mistral-Nemo-Instruct-2407.jinja",
                                       "[TOOL_CALLS][", "<|endoftext|>");
  const std::string script = R"(-c "
import json, sys
sys.path.insert(0, sys.argv[1] + '/tests/golden/chat_requests')
import make_goldens, jinja_oracle
cases = json.load(open(sys.argv[1] + '/tests/golden/chat_requests/requests.json'))
request = [c for c in cases if c['name'] == 'parallel_calls_mistral_ids'][0]['request']
source = open(sys.argv[1] + '/tests/golden/chat_templates/Mistral-Small-3.2-24B-Instruct-2506.jinja').read()
job = {'name': 't', 'source': source, 'context': make_goldens.context(request, '<s>', '</s>')}
print(json.dumps(jinja_oracle.render_jobs({'now': make_goldens.NOW, 'jobs': [job]})[0]))
" )" + kSource.string();
  const auto rendered = run_python(script, "");
  ASSERT_EQ(rendered.size(), 1u);
  const ordered_json r = ordered_json::parse(rendered[0]);
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  const std::string prompt = r["output"];
  const size_t from = prompt.find("[TOOL_CALLS]");
  ASSERT_NE(from, std::string::npos);
  const std::string small = prompt.substr(from, prompt.find("</s>", from) - from);
  for (const std::string& call : {nemo, small}) {
    SCOPED_TRACE(call);
    EXPECT_TRUE(matches(compiled("mistral", "", true), call));
    EXPECT_FALSE(matches(compiled("mistral", "", false), call));  // two calls where one is allowed
    EXPECT_FALSE(matches(compiled("mistral", "get_weather", true), call));
    const auto calls = parse_calls("mistral", call);
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(ordered_json::parse(calls[1].arguments), ordered_json::parse(R"({"city": "Tokyo"})"));
    EXPECT_EQ(calls[0].id.size(), 9u);
  }
  EXPECT_NE(small.find("[CALL_ID]"), std::string::npos);
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

TEST(ToolCallGrammarTest, Qwen3CoderWritesTextAndJsonParameters) {
  const auto many = compiled("qwen3_coder", "", true);
  const auto one = compiled("qwen3_coder", "", false);
  auto call = [](const std::string& name, const std::string& params) {
    return "<tool_call>\n<function=" + name + ">\n" + params + "</function>\n</tool_call>";
  };
  auto param = [](const std::string& name, const std::string& value) {
    return "<parameter=" + name + ">\n" + value + "\n</parameter>\n";
  };
  // Free text: anything but the closing tag, newlines and '<' included; "42" stays a string.
  const std::string log = call("log", param("message", "if a <b> 42\n</parametex") + param("urgent", "true") +
                                          param("tags", R"(["x", "y"])"));
  EXPECT_TRUE(matches(many, log));
  auto calls = parse_calls("qwen3_coder", log);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(ordered_json::parse(calls[0].arguments),
            ordered_json::parse(R"({"message": "if a <b> 42\n</parametex", "urgent": true, "tags": ["x", "y"]})"));
  const std::string digits = call("log", param("message", "42") + param("level", "null") + param("urgent", "false"));
  EXPECT_TRUE(matches(many, digits));
  calls = parse_calls("qwen3_coder", digits);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(ordered_json::parse(calls[0].arguments),
            ordered_json::parse(R"({"message": "42", "level": null, "urgent": false})"));
  EXPECT_FALSE(matches(many, call("log", param("message", "a </parameter> b") + param("urgent", "true"))));
  EXPECT_FALSE(matches(many, call("log", param("urgent", "true"))));                      // required message
  EXPECT_FALSE(matches(many, call("log", param("message", "a") + param("urgent", "yes"))));  // not JSON boolean
  EXPECT_FALSE(matches(many, call("log", param("message", "a") + param("urgent", "true") + param("x", "1"))));
  EXPECT_FALSE(matches(many, call("get_weather", param("city", "Rome") + param("unit", "kelvin"))));
  EXPECT_FALSE(matches(many, call("get_weather", param("city", "Thirteen chars"))));  // maxLength 12
  EXPECT_FALSE(matches(many, call("get_time", param("zone", "rome"))));
  const std::string ping = call("ping", "");
  EXPECT_TRUE(matches(many, ping + "\n" + ping));
  EXPECT_FALSE(matches(one, ping + "\n" + ping));
  // Schemas the format cannot write are errors naming the tool.
  const ordered_json bad = ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "anyOf": [{}]}}}])");
  try {
    tool_call_grammar(find_tool_call_format("qwen3_coder"), {&bad, "", true});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("tools[0].function.parameters"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("anyOf"), std::string::npos) << e.message();
  }
}

// A free text value is exactly the texts without "</parameter>" (checked against the definition
// on random strings over the tag's own characters, where near misses are frequent).
TEST(ToolCallGrammarTest, Qwen3CoderFreeTextIsAnyTextWithoutTheClosingTag) {
  const ordered_json tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f", "parameters":
      {"type": "object", "properties": {"t": {"type": "string"}}, "required": ["t"]}}}])");
  const auto g = grammar::CompiledGrammar::compile(tool_call_grammar(find_tool_call_format("qwen3_coder"), {&tools, "", false}));
  std::mt19937 rng(11);
  const std::string alphabet = "</parameter>\nx<<";
  int num_with = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string value;
    const size_t n = rng() % 30;
    if (rng() % 4 == 0) value = "</parameter>";
    while (value.size() < n) value += alphabet[rng() % alphabet.size()];
    if (rng() % 2) std::shuffle(value.begin(), value.end(), rng);
    if (rng() % 8 == 0) value.insert(rng() % (value.size() + 1), "</parameter>");
    const bool has = value.find("</parameter>") != std::string::npos;
    num_with += has;
    const std::string call = "<tool_call>\n<function=f>\n<parameter=t>\n" + value + "\n</parameter>\n</function>\n</tool_call>";
    ASSERT_EQ(matches(g, call), !has) << value;
  }
  EXPECT_GT(num_with, 100);
}

TEST(ToolCallGrammarTest, TriggersStartTheGrammarAndErrorsNameTheTool) {
  for (const char* format : kFormats) {
    SCOPED_TRACE(format);
    const auto g = compiled(format, "", true);
    for (const std::string& trigger : tool_call_triggers(find_tool_call_format(format))) {
      grammar::Matcher m(g, byte_vocab());
      EXPECT_TRUE(m.accept_bytes(trigger));  // the grammar's text starts with its trigger
    }
  }
  EXPECT_TRUE(tool_call_triggers(find_tool_call_format("generic")).empty());
  try {
    tool_call_grammar(find_tool_call_format("deepseek_v3"), {&kTools, "nope", true});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("'nope'"), std::string::npos) << e.message();
  }
  const ordered_json bad = ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "patternProperties": {"a": {}}}}}])");
  const ordered_json spaced = ordered_json::parse(R"([{"type": "function", "function": {"name": "a b"}}])");
  for (const char* format : kFormats) {
    SCOPED_TRACE(format);
    const bool xml = std::string_view(format) == "qwen3_coder";
    try {
      tool_call_grammar(find_tool_call_format(format), {&bad, "", true});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("tools[0].function.parameters"), std::string::npos) << e.message();
      if (xml) EXPECT_NE(e.message().find("patternProperties"), std::string::npos) << e.message();
    }
  }
  for (const char* format : {"qwen3_coder", "mistral", "deepseek_v3"}) {  // names written outside JSON
    try {
      tool_call_grammar(find_tool_call_format(format), {&spaced, "", true});
      ADD_FAILURE() << "no error for " << format;
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("tools[0].function.name"), std::string::npos) << e.message();
    }
  }
}

// A random output the grammar allows, steered to an end once long: a closing marker begun is
// continued, else a byte that may close something ('"', '}', ']', '\n', '<') is preferred.
std::string random_output(const std::shared_ptr<const grammar::CompiledGrammar>& g, std::mt19937& rng) {
  static const std::vector<std::string> kClosers = {"\n</parameter>\n", "</function>\n</tool_call>",
                                                    "\n```<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"};
  grammar::Matcher m(g, byte_vocab());
  std::string out;
  while (out.size() < 4000) {
    const std::bitset<256> allowed = m.allowed_bytes();
    if (m.is_complete() && (allowed.none() || rng() % 3 == 0)) return out;
    std::vector<int> bytes, closing;
    for (int b = 0; b < 256; ++b) {
      if (!allowed[static_cast<size_t>(b)]) continue;
      if (b == '\n' || (b >= 0x20 && b < 0x7f) || (b >= 0x80 && b < 0xf5)) bytes.push_back(b);
      if (b == '"' || b == '}' || b == ']' || b == '\n' || b == '<') closing.push_back(b);
    }
    EXPECT_FALSE(bytes.empty()) << out;
    if (bytes.empty()) return out;
    int pick = bytes[rng() % bytes.size()];
    if (out.size() > 60 && rng() % 4 != 0) {
      size_t best = 0;
      for (const std::string& c : kClosers) {  // the longest closing marker begun
        for (size_t k = std::min(c.size() - 1, out.size()); k > best; --k) {
          if (out.ends_with(c.substr(0, k)) && allowed[static_cast<uint8_t>(c[k])]) {
            best = k, pick = static_cast<uint8_t>(c[k]);
            break;
          }
        }
      }
      if (best == 0 && !closing.empty()) pick = closing[rng() % closing.size()];
    }
    EXPECT_TRUE(m.accept_bytes(std::string(1, static_cast<char>(pick))));
    out += static_cast<char>(pick);
  }
  ADD_FAILURE() << "no end after 4000 bytes: " << out.substr(0, 400);
  return out;
}

const ordered_json* tool_named(const std::string& name) {
  for (const auto& t : kTools) {
    if (t["function"]["name"] == name) return &t;
  }
  return nullptr;
}

TEST(ToolCallGrammarTest, WhatItGeneratesParsesBackAsTheReferenceReadsItAndValidates) {
  std::mt19937 rng(7);
  std::vector<std::pair<ordered_json, std::string>> validation;  // (schema, arguments)
  std::ostringstream reference;
  std::vector<std::pair<std::string, std::vector<ToolCall>>> outputs;  // (format, calls)
  for (const char* format : kFormats) {
    for (const auto& [name, parallel] : std::vector<std::pair<std::string, bool>>{{"", true}, {"", false}, {"log", true}}) {
      SCOPED_TRACE(std::string(format) + " " + name + (parallel ? " parallel" : " one"));
      const auto g = compiled(format, name, parallel);
      for (int i = 0; i < 20; ++i) {
        const std::string out = random_output(g, rng);
        std::string content;
        const auto calls = parse_calls(format, out, &content);
        ASSERT_FALSE(calls.empty()) << out;
        EXPECT_EQ(content, "") << out;
        if (!name.empty() || !parallel) EXPECT_EQ(calls.size(), 1u) << out;
        for (const ToolCall& call : calls) {
          if (!name.empty()) EXPECT_EQ(call.name, name);
          const ordered_json* tool = tool_named(call.name);
          ASSERT_NE(tool, nullptr) << call.name;
          ordered_json schema =
              tool->at("function").value("parameters", ordered_json{{"type", "object"}, {"maxProperties", 0}});
          validation.emplace_back(std::move(schema), call.arguments);
        }
        reference << ordered_json{{"format", format}, {"text", out}, {"tools", kTools}}.dump() << "\n";
        outputs.emplace_back(format, calls);
      }
    }
  }
  EXPECT_EQ(testing::jsonschema_verdicts(validation), std::string(validation.size(), '1'));
  const auto read = run_python((kSource / "tests" / "chat" / "reference_tool_calls.py").string(), reference.str());
  ASSERT_EQ(read.size(), outputs.size());
  for (size_t i = 0; i < read.size(); ++i) {
    const ordered_json expected = ordered_json::parse(read[i])["calls"];
    const auto& [format, calls] = outputs[i];
    ASSERT_TRUE(expected.is_array()) << format << ": the reference reads no calls in output " << i;
    ASSERT_EQ(expected.size(), calls.size()) << format;
    for (size_t k = 0; k < calls.size(); ++k) {
      EXPECT_EQ(calls[k].name, expected[k]["name"]) << format;
      EXPECT_EQ(ordered_json::parse(calls[k].arguments), expected[k]["arguments"]) << format;
    }
  }
}

}  // namespace
}  // namespace spindle::chat
