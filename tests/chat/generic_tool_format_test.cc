// The generic tool-call format (templates with no tool syntax): the answer object's grammar accepts
// exactly the shapes the tool choice allows (calls, one call, a response under "auto" only), the
// parser reads them back (a response as content, anything else as content, as written), and the
// messages a template renders carry the instructions in the first system message and history
// calls as answer objects that parse back to the calls sent.
#include <gtest/gtest.h>

#include "chat/generic_tool_format.h"
#include "chat/tool_call_grammar.h"
#include "grammar/matcher.h"
#include "support/byte_grammar.h"

namespace spindle::chat {
namespace {

using nlohmann::ordered_json;

const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
      "additionalProperties": false}}},
  {"type": "function", "function": {"name": "ping"}}])");

bool matches(const ForcedToolCalls& forced, const std::string& text) {
  return testing::matches(grammar::CompiledGrammar::compile(tool_call_grammar(find_tool_call_format("generic"), forced)),
                          text);
}

ToolCallDelta parse(const std::string& text) {
  auto parser = make_tool_call_parser(find_tool_call_format("generic"));
  ToolCallDelta a = parser->push(text.substr(0, text.size() / 2));
  EXPECT_TRUE(a.content.empty() && a.calls.empty());  // held until the end
  ToolCallDelta b = parser->push(text.substr(text.size() / 2));
  ToolCallDelta c = parser->finish();
  c.content = a.content + b.content + c.content;
  return c;
}

TEST(GenericToolFormatTest, TheGrammarAllowsWhatTheToolChoiceAllows) {
  const std::string calls = R"({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Ur"}}, {"name": "ping", "arguments": {}}]})";
  const std::string one = R"({"tool_call": {"name": "ping", "arguments": {}}})";
  const std::string response = R"({"response": "In the beginning"})";
  ForcedToolCalls automatic{&kTools, "", true};
  automatic.allow_response = true;
  EXPECT_TRUE(matches(automatic, calls));
  EXPECT_TRUE(matches(automatic, response));
  EXPECT_FALSE(matches(automatic, one));  // parallel: the list form
  EXPECT_FALSE(matches(automatic, R"({"tool_calls": [{"name": "get_weather", "arguments": {"town": "Ur"}}]})"));
  EXPECT_FALSE(matches(automatic, R"({"tool_calls": [{"name": "nope", "arguments": {}}]})"));
  EXPECT_FALSE(matches(automatic, R"({"tool_calls": []})"));
  const ForcedToolCalls required{&kTools, "", true};
  EXPECT_TRUE(matches(required, calls));
  EXPECT_FALSE(matches(required, response));
  const ForcedToolCalls single{&kTools, "", false};
  EXPECT_TRUE(matches(single, one));
  EXPECT_FALSE(matches(single, calls));
  const ForcedToolCalls named{&kTools, "get_weather", false};
  EXPECT_TRUE(matches(named, R"({"tool_call": {"name": "get_weather", "arguments": {"city": "Ur"}}})"));
  EXPECT_FALSE(matches(named, one));
  EXPECT_TRUE(tool_call_triggers(find_tool_call_format("generic")).empty());  // constrained from the start
}

TEST(GenericToolFormatTest, TheParserReadsCallsAndResponses) {
  ToolCallDelta d = parse(R"({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Ur"}}, {"name": "ping", "arguments": {}}]})");
  ASSERT_EQ(d.calls.size(), 2u);
  EXPECT_EQ(d.calls[0].name, "get_weather");
  EXPECT_EQ(ordered_json::parse(d.calls[0].arguments), ordered_json::parse(R"({"city": "Ur"})"));
  EXPECT_EQ(d.calls[1].arguments, "{}");
  EXPECT_EQ(d.content, "");
  EXPECT_EQ(d.calls[0].id.rfind("call_", 0), 0u);
  d = parse(R"({"tool_call": {"name": "ping", "arguments": {}}})");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "ping");
  d = parse(R"({"response": "Let there be \"light\""})");
  EXPECT_TRUE(d.calls.empty());
  EXPECT_EQ(d.content, "Let there be \"light\"");
  for (const std::string& text : std::vector<std::string>{R"({"response": "cut by max_tok)", "plain text",
                                 R"({"tool_calls": [{"arguments": {}}]})"}) {
    d = parse(text);
    EXPECT_TRUE(d.calls.empty()) << text;
    EXPECT_EQ(d.content, text);  // never dropped
  }
}

TEST(GenericToolFormatTest, MessagesCarryTheInstructionsAndHistoryCalls) {
  const ordered_json history = ordered_json::parse(R"([
    {"role": "user", "content": "Weather in Ur?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Ur"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "hot"}])");
  const ordered_json out = generic_tool_messages(history, kTools, {"", false, true});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0]["role"], "system");
  const std::string system = out[0]["content"];
  EXPECT_NE(system.find(R"({"response": )"), std::string::npos);
  // The tools' JSON closes the message: it parses back to their names and parameters.
  const ordered_json described = ordered_json::parse(system.substr(system.find("\n[") + 1));
  ASSERT_EQ(described.size(), 2u);
  EXPECT_EQ(described[0]["name"], "get_weather");
  EXPECT_EQ(described[0]["parameters"], kTools[0]["function"]["parameters"]);
  EXPECT_EQ(described[1]["parameters"], ordered_json::object());
  EXPECT_FALSE(out[2].contains("tool_calls"));
  ToolCallDelta d = parse(out[2]["content"]);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "get_weather");
  EXPECT_EQ(out[3], history[2]);

  // A system message of the request's keeps its text first; required and named say so.
  const ordered_json with_system = ordered_json::parse(R"([{"role": "system", "content": "Be brief."},
                                                           {"role": "user", "content": "Hi"}])");
  const ordered_json named = generic_tool_messages(with_system, kTools, {"get_weather", true, false});
  ASSERT_EQ(named.size(), 2u);
  const std::string text = named[0]["content"];
  EXPECT_EQ(text.rfind("Be brief.\n\n", 0), 0u);
  EXPECT_EQ(text.find(R"({"response")"), std::string::npos);
  EXPECT_NE(text.find("the tool get_weather"), std::string::npos);
  EXPECT_EQ(text.find("\"ping\""), std::string::npos);
}

}  // namespace
}  // namespace spindle::chat
