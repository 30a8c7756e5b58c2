// The grammar that forces tool calls (tool_choice "required" or a named function): the format's
// call syntax around a JSON body whose "name" is one of the tools' names and whose arguments
// follow that tool's `parameters` schema. What the grammar accepts, the format's ToolCallParser
// reads back as calls.
//
//   hermes       <tool_call>\n{"name": "f", "arguments": ARGS}\n</tool_call>, calls joined by "\n"
//   llama3_json  {"name": "f", "parameters": ARGS}, calls joined by "; "
// ARGS is the JSON the tool's parameters schema allows (grammar/json_schema.h, compact whitespace;
// a tool without parameters takes {} only, as OpenAI defines; a schema without "type" is read
// as an object schema). The other formats are not enforceable yet.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "chat/tool_call_parser.h"
#include "grammar/grammar.h"

namespace spindle::chat {

struct ForcedToolCalls {
  // The request's tools: [{type: "function", function: {name, parameters?, strict?}}], validated.
  const nlohmann::ordered_json* tools = nullptr;
  std::string name;  // a named function: exactly one call of it; empty: "required", any tool
  bool parallel = true;  // "required" only: false allows exactly one call, true one or more
};

// "" when `format` can be enforced, else why not (names the parser).
std::string tool_call_grammar_unsupported(const ToolCallFormat& format);

// Throws spindle::Error naming the tool ("tools[k].function.parameters: ...") when a schema does
// not convert, or when the format is not enforceable or the named function is not among the tools.
grammar::Grammar tool_call_grammar(const ToolCallFormat& format, const ForcedToolCalls& forced);

}  // namespace spindle::chat
