// Tool-call parsers over whole outputs, over every split of an output into two pieces, and over a
// real tokenizer's detokenized pieces. Expected calls are written out by hand from each family's
// format (the model cards' and chat templates' examples); arguments compare as JSON values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>

#include "chat/tool_call_parser.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace spindle::chat {
namespace {

using nlohmann::json;

struct Parsed {
  std::string content;
  std::vector<std::pair<std::string, json>> calls;  // name, arguments
  std::vector<std::string> ids;
};

Parsed run(std::string_view parser, const std::vector<std::string>& pieces) {
  auto p = make_tool_call_parser(find_tool_call_format(parser));
  Parsed out;
  auto add = [&out](ToolCallDelta d) {
    out.content += d.content;
    for (auto& c : d.calls) {
      out.calls.emplace_back(c.name, json::parse(c.arguments));
      out.ids.push_back(c.id);
    }
  };
  for (const auto& piece : pieces) add(p->push(piece));
  add(p->finish());
  return out;
}

using Calls = std::vector<std::pair<std::string, json>>;

void expect_every_split(std::string_view parser, const std::string& text, const std::string& content,
                        const Calls& calls) {
  for (size_t i = 0; i <= text.size(); ++i) {
    const Parsed p = run(parser, {text.substr(0, i), text.substr(i)});
    ASSERT_EQ(p.content, content) << parser << ": " << text << " split at " << i;
    ASSERT_EQ(p.calls, calls) << parser << ": " << text << " split at " << i;
  }
}

TEST(ToolCallParserTest, HermesOneCallAfterContent) {
  expect_every_split("hermes",
                     "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                     "</tool_call>",
                     "Let me check.\n", {{"get_weather", {{"city", "Paris"}}}});
}

TEST(ToolCallParserTest, HermesParallelCallsWhitespaceBetweenDropped) {
  expect_every_split("hermes",
                     "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
                     "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n",
                     "", {{"a", {{"x", 1}}}, {"b", json::object()}});
}

TEST(ToolCallParserTest, HermesUnclosedCallAtTheEnd) {
  expect_every_split("hermes", "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, 2]}}", "",
                     {{"a", {{"x", {1, 2}}}}});
}

TEST(ToolCallParserTest, HermesBadCallComesBackAsContent) {
  const std::string bad = "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": }\n</tool_call>";
  expect_every_split("hermes", bad, bad, {});
  expect_every_split("hermes", "<tool_call>{\"arguments\": {}}", "<tool_call>{\"arguments\": {}}", {});
  // Arguments as a JSON string (some fine-tunes): read as the object it holds.
  expect_every_split("hermes", "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"k\\\": true}\"}</tool_call>", "",
                     {{"a", {{"k", true}}}});
}

TEST(ToolCallParserTest, HermesTextAfterCallsIsContent) {
  expect_every_split("hermes", "<tool_call>{\"name\": \"a\"}</tool_call>\nDone.", "\nDone.", {{"a", json::object()}});
  expect_every_split("hermes", "No tools needed: <tool_ca", "No tools needed: <tool_ca", {});
}

TEST(ToolCallParserTest, Qwen3CoderXml) {
  expect_every_split("qwen3_coder",
                     "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco, CA\n</parameter>\n"
                     "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"metric\": true}\n</parameter>\n"
                     "</function>\n</tool_call>",
                     "Sure.\n",
                     {{"get_weather", {{"city", "San Francisco, CA"}, {"days", 3}, {"opts", {{"metric", true}}}}}});
  const std::string bad = "<tool_call>\n<function=f>\n<parameter=x>\n1\n</tool_call>";
  expect_every_split("qwen3_coder", bad, bad, {});
}

// With the request's tools, a text parameter (a string schema) keeps its value as written, even
// when it reads as JSON; other parameters' values are JSON (chat/qwen3_coder_format.h).
TEST(ToolCallParserTest, Qwen3CoderTextParametersFollowTheTools) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"zip": {"type": "string"}, "mode": {"enum": ["1", "2"]}, "n": {"type": "integer"}}}}}])");
  const std::string text = "<tool_call>\n<function=f>\n<parameter=zip>\n02139\n</parameter>\n<parameter=mode>\n1\n"
                           "</parameter>\n<parameter=n>\n7\n</parameter>\n</function>\n</tool_call>";
  for (const json* t : {&tools, static_cast<const json*>(nullptr)}) {
    const nlohmann::ordered_json ordered = t ? nlohmann::ordered_json::parse(t->dump()) : nlohmann::ordered_json();
    auto p = make_tool_call_parser(find_tool_call_format("qwen3_coder"), t ? &ordered : nullptr);
    ToolCallDelta d = p->push(text);
    ToolCallDelta end = p->finish();
    d.calls.insert(d.calls.end(), end.calls.begin(), end.calls.end());
    ASSERT_EQ(d.calls.size(), 1u);
    // Without the tools a value is JSON when it parses ("02139" does not, "1" does).
    const json expected = t ? json::parse(R"({"zip": "02139", "mode": "1", "n": 7})")
                            : json::parse(R"({"zip": "02139", "mode": 1, "n": 7})");
    EXPECT_EQ(json::parse(d.calls[0].arguments), expected);
  }
}

TEST(ToolCallParserTest, Llama3Json) {
  expect_every_split("llama3_json", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
                     {{"get_weather", {{"city", "Paris"}}}});
  expect_every_split("llama3_json",
                     "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"s\": \"}{;\"}}; {\"name\": \"b\", \"parameters\": {}}",
                     "", {{"a", {{"s", "}{;"}}}, {"b", json::object()}});
  expect_every_split("llama3_json", "The weather is fine.", "The weather is fine.", {});
  expect_every_split("llama3_json", "{\"answer\": 42}", "{\"answer\": 42}", {});
}

TEST(ToolCallParserTest, MistralBothForms) {
  expect_every_split("mistral",
                     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                     "{\"name\": \"b\", \"arguments\": {}}]",
                     "", {{"get_weather", {{"city", "Paris"}}}, {"b", json::object()}});
  expect_every_split("mistral", "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]b[ARGS]{}",
                     "Checking.", {{"get_weather", {{"city", "Paris"}}}, {"b", json::object()}});
  expect_every_split("mistral", "[TOOL_CALLS]oops", "[TOOL_CALLS]oops", {});
}

TEST(ToolCallParserTest, DeepSeek) {
  expect_every_split("deepseek_v3",
                     "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                     "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>b\n```json\n{}\n```"
                     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                     "Checking.", {{"get_weather", {{"city", "Paris"}}}, {"b", json::object()}});
  const std::string bad = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n{}<｜tool▁call▁end｜>";
  expect_every_split("deepseek_v3", bad, bad, {});
}

TEST(ToolCallParserTest, IdsHaveTheFamilysShape) {
  const Parsed hermes = run("hermes", {"<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"a\"}</tool_call>"});
  ASSERT_EQ(hermes.ids.size(), 2u);
  EXPECT_TRUE(std::regex_match(hermes.ids[0], std::regex("call_[A-Za-z0-9]{24}"))) << hermes.ids[0];
  EXPECT_NE(hermes.ids[0], hermes.ids[1]);
  const Parsed mistral = run("mistral", {"[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}]"});
  ASSERT_EQ(mistral.ids.size(), 1u);
  EXPECT_TRUE(std::regex_match(mistral.ids[0], std::regex("[A-Za-z0-9]{9}"))) << mistral.ids[0];
}

TEST(ToolCallParserTest, RealTokenizerPieces) {
  const auto tok = tokenizer::Tokenizer::load(std::filesystem::path(SPINDLE_SOURCE_DIR) / "tests" / "golden" /
                                              "qwen3-qknorm-f32");
  const std::string text = "I will look.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"naïve café\"}}\n"
                           "</tool_call>";
  tokenizer::IncrementalDetokenizer detok(tok, true);
  std::vector<std::string> pieces;
  for (int id : tok.encode(text, false)) pieces.push_back(detok.push(id));
  pieces.push_back(detok.finish());
  ASSERT_GT(pieces.size(), 10u);
  const Parsed p = run("hermes", pieces);
  EXPECT_EQ(p.content, "I will look.\n");
  EXPECT_EQ(p.calls, (Calls{{"search", {{"q", "naïve café"}}}}));
}

TEST(ToolCallParserTest, DetectionFromTemplates) {
  const auto dir = std::filesystem::path(SPINDLE_SOURCE_DIR) / "tests" / "golden" / "chat_templates";
  auto detect = [&dir](const char* file) -> std::string {
    std::ifstream in(dir / file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(text.empty()) << file;
    const ToolCallFormat* f = detect_tool_call_format(text);
    return f ? std::string(f->name) : "none";
  };
  EXPECT_EQ(detect("Qwen-Qwen2.5-7B-Instruct.jinja"), "hermes");
  EXPECT_EQ(detect("Qwen-Qwen3-0.6B.jinja"), "hermes");
  EXPECT_EQ(detect("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"), "hermes");
  EXPECT_EQ(detect("Qwen3-Coder.jinja"), "qwen3_coder");
  EXPECT_EQ(detect("meta-llama-Llama-3.1-8B-Instruct.jinja"), "llama3_json");
  EXPECT_EQ(detect("meta-llama-Llama-3.2-3B-Instruct.jinja"), "llama3_json");
  EXPECT_EQ(detect("mistralai-Mistral-Nemo-Instruct-2407.jinja"), "mistral");
  EXPECT_EQ(detect("Mistral-Small-3.2-24B-Instruct-2506.jinja"), "mistral");
  EXPECT_EQ(detect("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"), "deepseek_v3");
  EXPECT_EQ(detect("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"), "deepseek_v3");
  EXPECT_EQ(detect("google-gemma-2-2b-it.jinja"), "none");
  EXPECT_EQ(detect("microsoft-Phi-3.5-mini-instruct.jinja"), "none");
}

}  // namespace
}  // namespace spindle::chat
