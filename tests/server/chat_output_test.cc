// A chat choice's text sorted into reasoning_content, tool_calls and content (ChoiceFields), and
// the streamed tool-call deltas' shape (what the openai client accumulates: index, id, type and
// function.name first, then function.arguments). Expected values written out by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/chat_output.h"

namespace spindle::server {
namespace {

using nlohmann::json;

ChoiceDelta run(const OutputParsing& p, const std::vector<std::string>& pieces) {
  ChoiceFields f(p);
  ChoiceDelta all;
  for (size_t i = 0; i < pieces.size(); ++i) {
    ChoiceDelta d = f.push(pieces[i], i + 1 == pieces.size());
    all.content += d.content;
    all.reasoning += d.reasoning;
    for (auto& c : d.calls) all.calls.push_back(std::move(c));
  }
  return all;
}

const std::string kTwoCalls =
    "<think>Two cities.</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Tokyo\"}}\n</tool_call>";

TEST(ChatOutputTest, ReasoningThenCalls) {
  OutputParsing p;
  p.reasoning = &chat::find_reasoning_format("qwen3");
  p.tool_calls = &chat::find_tool_call_format("hermes");
  for (size_t cut = 0; cut <= kTwoCalls.size(); cut += 7) {
    const ChoiceDelta d = run(p, {kTwoCalls.substr(0, cut), kTwoCalls.substr(cut), ""});
    EXPECT_EQ(d.reasoning, "Two cities.");
    EXPECT_EQ(d.content, "\n\n");
    ASSERT_EQ(d.calls.size(), 2u);
    EXPECT_EQ(d.calls[1].name, "w");
    EXPECT_EQ(json::parse(d.calls[1].arguments), json({{"city", "Tokyo"}}));
  }
}

// "parallel_tool_calls": false returns the first call only.
TEST(ChatOutputTest, ParallelToolCallsFalseKeepsTheFirstCall) {
  OutputParsing p;
  p.tool_calls = &chat::find_tool_call_format("hermes");
  p.parallel_tool_calls = false;
  const std::string text = kTwoCalls.substr(kTwoCalls.find("<tool_call>"));
  const ChoiceDelta d = run(p, {text.substr(0, 50), text.substr(50)});
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(json::parse(d.calls[0].arguments), json({{"city", "Paris"}}));
  p.parallel_tool_calls = true;
  EXPECT_EQ(run(p, {text}).calls.size(), 2u);
}

TEST(ChatOutputTest, NoParsersPassTextThrough) {
  const ChoiceDelta d = run(OutputParsing{}, {"<think>a</think>", "<tool_call>{}</tool_call>"});
  EXPECT_EQ(d.content, "<think>a</think><tool_call>{}</tool_call>");
  EXPECT_TRUE(d.reasoning.empty());
  EXPECT_TRUE(d.calls.empty());
}

TEST(ChatOutputTest, DeltasAndMessageShapes) {
  const std::vector<chat::ToolCall> calls = {{"call_1", "f", "{\"a\":1}"}, {"call_2", "g", "{}"}};
  EXPECT_EQ(tool_calls_json(calls), json::parse(R"([
      {"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},
      {"id":"call_2","type":"function","function":{"name":"g","arguments":"{}"}}])"));
  EXPECT_EQ(json(tool_call_deltas(calls, 3)), json::parse(R"([
      {"index":3,"id":"call_1","type":"function","function":{"name":"f","arguments":""}},
      {"index":3,"function":{"arguments":"{\"a\":1}"}},
      {"index":4,"id":"call_2","type":"function","function":{"name":"g","arguments":""}},
      {"index":4,"function":{"arguments":"{}"}}])"));
}

}  // namespace
}  // namespace spindle::server
