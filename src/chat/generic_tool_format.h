// The generic tool-call format, for chat templates that teach none (the embedded model's; what
// llama.cpp falls back to): the tools are described in a system message, and the model answers
// with one JSON object, constrained by a grammar from its first byte (chat/tool_call_grammar.h),
// so even a model that never learned the format answers in it:
//   {"tool_calls": [{"name": "f", "arguments": {...}}, ...]}   calls (parallel_tool_calls true)
//   {"tool_call": {"name": "f", "arguments": {...}}}            one call (parallel_tool_calls false)
//   {"response": "text"}                                        a reply (tool_choice "auto" only)
// The parser reads the object back at the end of the output: calls, or the response as content;
// anything else (an object cut by max_tokens) is returned as content, as written.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "chat/tool_call_parser.h"

namespace spindle::chat {

// How the request asks for tools in the generic format.
struct GenericToolChoice {
  std::string name;       // a named function: only it may be called; empty: any tool
  bool required = false;  // "required" or a named function: no {"response": ...}
  bool parallel = true;   // false: {"tool_call": ...}, exactly one call
};

// The system message's text: what the answer object may be, then the tools (name, description,
// parameters) as compact JSON. tools: the request's [{type: "function", function: {...}}].
std::string generic_tool_instructions(const nlohmann::ordered_json& tools, const GenericToolChoice& choice);

// The messages a template without tool syntax renders: the instructions as the first system
// message (appended to the first message's content, after a blank line, when it is a system
// message), and each assistant turn's tool_calls written into its content as the object the
// model is asked to answer with. messages: the template's messages (tool call arguments as objects).
nlohmann::ordered_json generic_tool_messages(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                             const GenericToolChoice& choice);

std::unique_ptr<ToolCallParser> make_generic_tool_call_parser(ToolCallIdStyle style);

}  // namespace spindle::chat
