// The grammar that forces tool calls (tool_choice "required" or a named function): the format's
// call syntax around a JSON body whose "name" is one of the tools' names and whose arguments
// follow that tool's `parameters` schema. What the grammar accepts, the format's ToolCallParser
// reads back as calls.
//
//   hermes       <tool_call>\n{"name": "f", "arguments": ARGS}\n</tool_call>, calls joined by "\n"
//   llama3_json  {"name": "f", "parameters": ARGS}, calls joined by "; "
//   generic      {"tool_calls": [CALL, ...]} (parallel) or {"tool_call": CALL}, CALL being
//                {"name": "f", "arguments": ARGS}; with allow_response also {"response": "..."}
//                (chat/generic_tool_format.h; constrained from the first byte, no trigger)
// ARGS is the JSON the tool's parameters schema allows (grammar/json_schema.h, compact whitespace;
// a tool without parameters takes {} only, as OpenAI defines; a schema without "type" is read
// as an object schema). The other formats are not enforceable yet.
//
// Under tool_choice "auto" the same grammar is armed lazily (grammar/lazy_matcher.h) at the
// format's trigger: free text until the call's opening marker, the calls from there on.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_call_parser.h"
#include "grammar/grammar.h"

namespace spindle::chat {

struct ForcedToolCalls {
  // The request's tools: [{type: "function", function: {name, parameters?, strict?}}], validated.
  const nlohmann::ordered_json* tools = nullptr;
  std::string name;  // a named function: exactly one call of it; empty: "required", any tool
  bool parallel = true;  // "required" only: false allows exactly one call, true one or more
  // The generic format under "auto": a {"response": "..."} answer instead of calls.
  bool allow_response = false;
};

// "" when `format` can be enforced, else why not (names the parser).
std::string tool_call_grammar_unsupported(const ToolCallFormat& format);

// The strings that open a call in the format's output, where the grammar of the calls is armed
// under tool_choice "auto" (each is where tool_call_grammar's text starts): hermes "<tool_call>",
// llama3_json "{\"name\""; generic none (its answer is constrained from the start). Throws for a
// format that is not enforceable.
std::vector<std::string> tool_call_triggers(const ToolCallFormat& format);

// Throws spindle::Error naming the tool ("tools[k].function.parameters: ...") when a schema does
// not convert, or when the format is not enforceable or the named function is not among the tools.
grammar::Grammar tool_call_grammar(const ToolCallFormat& format, const ForcedToolCalls& forced);

}  // namespace spindle::chat
