// /v1/responses bodies read into the chat machinery (src/server/responses_request.h): input as
// text and as items (messages with parts, function_call / function_call_output history, reasoning),
// instructions, the flat function tools, tool_choice, max_output_tokens, the sampling fields; and
// every refused or unknown field a 400 naming it, in the Responses API's parameter names. The
// expected chat messages are written from OpenAI's item definitions (the API reference), by hand.
#include <gtest/gtest.h>

#include "server/responses_request.h"

namespace spindle::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

ResponsesRequest parse(const std::string& body) { return parse_responses_request(body, 1 << 20); }

// The param of the 400 the body gets ("<no error>" when it parses).
std::string refused_param(const std::string& body) {
  try {
    parse(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body;
    return e.param();
  }
  return "<no error>";
}

TEST(ResponsesRequestTest, TextInputAndInstructions) {
  const ResponsesRequest r = parse(R"({"model": "m", "input": "Amen?", "instructions": "Be brief.",
                                       "max_output_tokens": 7, "temperature": 0.5, "top_p": 0.9})");
  const GenerationRequest& g = r.generation;
  EXPECT_TRUE(g.chat);
  EXPECT_FALSE(g.stream);
  EXPECT_EQ(g.model, "m");
  EXPECT_EQ(g.sampling.max_tokens, 7);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.chat_context.template_messages,
            ordered_json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Amen?"}])"));
  EXPECT_FALSE(g.chat_context.has_tools());
  // What the response repeats; store is false though absent.
  EXPECT_EQ(r.echo["store"], false);
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
  EXPECT_EQ(r.echo["max_output_tokens"], 7);
  EXPECT_EQ(r.echo["tool_choice"], "auto");
  EXPECT_EQ(r.echo["tools"], json::array());
  EXPECT_TRUE(r.echo["previous_response_id"].is_null());
  // No max_output_tokens: up to the context.
  EXPECT_EQ(parse(R"({"input": "x"})").generation.sampling.max_tokens, -1);
}

// A conversation with a tool round trip: the reasoning, assistant text and function_call items
// that follow one another are one assistant turn (arguments as an object), the output a tool turn.
TEST(ResponsesRequestTest, ItemsBecomeChatTurns) {
  const ResponsesRequest r = parse(R"({"input": [
      {"role": "developer", "content": "Use tools."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in "}, {"type": "input_text", "text": "Ur?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Ask the tool."}]},
      {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
       "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
      {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get_weather", "arguments": "{\"city\": \"Ur\", \"days\": 2}"},
      {"type": "function_call", "call_id": "call_b", "name": "amen", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_a", "output": "hot"},
      {"type": "function_call_output", "call_id": "call_b", "output": "amen"},
      {"type": "message", "role": "assistant", "content": "Hot."},
      {"role": "user", "content": "Thanks"}]})");
  const ordered_json expected = ordered_json::parse(R"([
      {"role": "system", "content": "Use tools."},
      {"role": "user", "content": "Weather in Ur?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "Ask the tool.", "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Ur", "days": 2}}},
        {"id": "call_b", "type": "function", "function": {"name": "amen", "arguments": {}}}]},
      {"role": "tool", "content": "hot", "tool_call_id": "call_a"},
      {"role": "tool", "content": "amen", "tool_call_id": "call_b"},
      {"role": "assistant", "content": "Hot."},
      {"role": "user", "content": "Thanks"}])");
  EXPECT_EQ(r.generation.chat_context.template_messages, expected) << r.generation.chat_context.template_messages.dump(1);
  EXPECT_TRUE(r.generation.chat_context.has_tool_turns);
  ASSERT_EQ(r.generation.messages.size(), 7u);
  EXPECT_EQ(r.generation.messages[3].role, "tool");
}

TEST(ResponsesRequestTest, FlatFunctionToolsBecomeChatTools) {
  const ResponsesRequest r = parse(R"({"input": "x", "tools": [
      {"type": "function", "name": "get_weather", "description": "Weather.", "strict": true,
       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
      {"type": "function", "name": "amen", "parameters": null, "strict": null}],
      "tool_choice": {"type": "function", "name": "amen"}, "parallel_tool_calls": false})");
  const ChatContext& c = r.generation.chat_context;
  EXPECT_EQ(c.tools, ordered_json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "strict": true,
       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
      {"type": "function", "function": {"name": "amen"}}])"));
  EXPECT_EQ(c.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(c.tool_choice_name, "amen");
  EXPECT_FALSE(c.parallel_tool_calls);
  EXPECT_EQ(r.echo["parallel_tool_calls"], false);
  EXPECT_EQ(r.echo["tool_choice"], json::parse(R"({"type": "function", "name": "amen"})"));
  EXPECT_EQ(r.echo["tools"][0]["name"], "get_weather");
  EXPECT_EQ(parse(R"({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": "required"})")
                .generation.chat_context.tool_choice,
            ToolChoice::kRequired);
  EXPECT_EQ(parse(R"({"input": "x", "tool_choice": "none"})").generation.chat_context.tool_choice, ToolChoice::kNone);
  // reasoning.effort reaches the template as chat's reasoning_effort does.
  EXPECT_EQ(parse(R"({"input": "x", "reasoning": {"effort": "low"}})").generation.chat_context.template_kwargs["reasoning_effort"], "low");
}

TEST(ResponsesRequestTest, SamplingFieldsAsChat) {
  const GenerationRequest g = parse(R"({"input": "x", "stream": true, "seed": 7, "top_k": 3, "min_p": 0.1,
      "presence_penalty": 0.5, "frequency_penalty": 0.25, "repetition_penalty": 1.1, "ignore_eos": true,
      "user": "u", "metadata": {"a": "b"}, "service_tier": "auto", "truncation": "disabled", "store": false,
      "include": [], "background": false, "text": {"format": {"type": "text"}}})").generation;
  EXPECT_TRUE(g.stream);
  EXPECT_EQ(g.sampling.seed, 7u);
  EXPECT_EQ(g.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(g.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.frequency_penalty, 0.25f);
  EXPECT_FLOAT_EQ(g.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(g.sampling.ignore_eos);
  EXPECT_EQ(g.n, 1);
}

TEST(ResponsesRequestTest, RefusalsNameTheParameter) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"input": "x", "store": true})", "store"},
      {R"({"input": "x", "previous_response_id": "resp_1"})", "previous_response_id"},
      {R"({"input": "x", "background": true})", "background"},
      {R"({"input": "x", "include": ["message.output_text.logprobs"]})", "include"},
      {R"({"input": "x", "text": {"format": {"type": "grammar"}}})", "text.format.type"},
      {R"({"input": "x", "text": {"verbosity": "low"}})", "text.verbosity"},
      {R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "x"}}})", "text.format.schema"},
      {R"({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}, "strict": 1}}})", "text.format.strict"},
      {R"({"input": "x", "text": {"format": {"type": "json_object", "x": 1}}})", "text.format.x"},
      {R"({"input": "x", "truncation": "auto"})", "truncation"},
      {R"({"input": "x", "top_logprobs": 2})", "top_logprobs"},
      {R"({"input": "x", "conversation": "conv_1"})", "conversation"},
      {R"({"input": "x", "n": 2})", "n"},
      {R"({"input": "x", "stop": "a"})", "stop"},
      {R"({"input": "x", "max_tokens": 5})", "max_tokens"},
      {R"({"input": "x", "messages": []})", "messages"},
      {R"({"input": "x", "foo": 1})", "foo"},
      {R"({})", "input"},
      {R"({"input": []})", "input"},
      {R"({"input": 3})", "input"},
      {R"({"input": "x", "instructions": 3})", "instructions"},
      {R"({"input": "x", "max_output_tokens": 0})", "max_output_tokens"},
      {R"({"input": "x", "temperature": 3})", "temperature"},
      {R"({"input": [{"type": "item_reference", "id": "msg_1"}]})", "input[0].type"},
      {R"({"input": [{"type": "web_search_call", "id": "ws_1"}]})", "input[0].type"},
      {R"({"input": [{"role": "tool", "content": "x"}]})", "input[0].role"},
      {R"({"input": [{"role": "user"}]})", "input[0].content"},
      {R"({"input": [{"role": "user", "content": "x", "foo": 1}]})", "input[0].foo"},
      {R"({"input": [{"role": "user", "content": "x", "call_id": "c"}]})", "input[0].call_id"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]})",
       "input[0].content[0].image_url"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})", "input[0].content[0].type"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_text"}]}]})", "input[0].content[0].text"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a", "x": 1}]}]})", "input[0].content[0].x"},
      {R"({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}]})", "input[0].arguments"},
      {R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})", "input[0].call_id"},
      {R"({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]})", "input[0].call_id"},
      {R"({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                     {"type": "function_call_output", "call_id": "c"}]})", "input[1].output"},
      {R"({"input": [{"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}]})", "input[0].encrypted_content"},
      {R"({"input": "x", "tools": [{"type": "web_search_preview"}]})", "tools[0].type"},
      {R"({"input": "x", "tools": [{"type": "function", "function": {"name": "f"}}]})", "tools[0].function"},
      {R"({"input": "x", "tools": [{"type": "function", "name": ""}]})", "tools[0].name"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": 1}]})", "tools[0].parameters"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}})",
       "tool_choice.name"},
      {R"({"input": "x", "tool_choice": {"type": "file_search"}})", "tool_choice.type"},
      {R"({"input": "x", "tool_choice": "required"})", "tool_choice"},
      {R"({"input": "x", "reasoning": {"summary": "auto"}})", "reasoning.summary"},
      {R"({"input": "x", "reasoning": {"effort": "max"}})", "reasoning.effort"},
      {R"({"input": "x", "stream_options": {"include_usage": true}, "stream": true})", "stream_options"},
  };
  for (const auto& [body, param] : cases) EXPECT_EQ(refused_param(body), param) << body;
  EXPECT_EQ(refused_param(R"({"input": "x", "store": false, "previous_response_id": null})"), "<no error>");
}

// tool_choice's errors name the Responses API's spelling of a named choice (written by hand).
TEST(ResponsesRequestTest, ToolChoiceErrorsSpellTheResponsesShape) {
  const auto message_of = [](const std::string& body) -> std::string {
    try {
      parse(body);
    } catch (const ApiError& e) {
      return e.what();
    }
    return "<no error>";
  };
  EXPECT_EQ(message_of(R"({"input": "x", "tool_choice": "maybe"})"),
            R"('tool_choice' must be "auto", "none", "required" or {"type": "function", "name": ...})");
  EXPECT_EQ(message_of(R"({"input": "x", "tools": [{"type": "function", "name": "f"}],
                           "tool_choice": {"type": "function", "name": "g"}})"),
            "'tool_choice.name' is 'g', which is not among the tools");
  EXPECT_EQ(message_of(R"({"input": "x", "tools": [{"type": "function", "name": "f"}],
                           "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": 1})"),
            "'parallel_tool_calls' must be a boolean");
}

// text.format is chat's response_format: the schema in the client's key order, strict, the param
// a later compile error names.
TEST(ResponsesRequestTest, TextFormatIsAnOutputConstraint) {
  const ResponsesRequest r = parse(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "v", "strict": true,
      "schema": {"type": "object", "properties": {"word": {"type": "string"}, "verse": {"type": "integer"}}}}}})");
  const OutputConstraint& c = r.generation.constraint;
  EXPECT_EQ(c.kind, OutputConstraint::Kind::kJsonSchema);
  EXPECT_TRUE(c.strict);
  EXPECT_EQ(c.param, "text.format.schema");
  EXPECT_EQ(c.text, R"({"type":"object","properties":{"word":{"type":"string"},"verse":{"type":"integer"}}})");
  EXPECT_EQ(r.echo["text"]["format"]["name"], "v");
  EXPECT_EQ(parse(R"({"input": "x", "text": {"format": {"type": "json_object"}}})").generation.constraint.kind,
            OutputConstraint::Kind::kJsonObject);
  EXPECT_EQ(parse(R"({"input": "x", "text": {"format": {"type": "text"}}})").generation.constraint.kind,
            OutputConstraint::Kind::kNone);
}

TEST(ResponsesRequestTest, ChatParamsAreRenamed) {
  EXPECT_EQ(responses_param("messages"), "input");
  EXPECT_EQ(responses_param("max_completion_tokens"), "max_output_tokens");
  EXPECT_EQ(responses_param("tools[3].function.parameters"), "tools[3].parameters");
  EXPECT_EQ(responses_param("tool_choice.function.name"), "tool_choice.name");
  EXPECT_EQ(responses_param("tool_choice"), "tool_choice");
  EXPECT_EQ(responses_param("temperature"), "temperature");
}

}  // namespace
}  // namespace spindle::server
