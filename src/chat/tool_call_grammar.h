// The grammar that forces tool calls (tool_choice "required" or a named function): the format's
// call syntax around each allowed tool's name and arguments, the arguments following that tool's
// `parameters` schema. What the grammar accepts, the format's ToolCallParser reads back as calls.
//
//   hermes       <tool_call>\n{"name": "f", "arguments": ARGS}\n</tool_call>, calls joined by "\n"
//   llama3_json  {"name": "f", "parameters": ARGS}, calls joined by "; "
//   qwen3_coder  <tool_call>\n<function=f>\nPARAMETERS</function>\n</tool_call>, joined by "\n"
//                (PARAMETERS: chat/qwen3_coder_format.h)
//   mistral      [TOOL_CALLS][{"name": "f", "arguments": ARGS}, ...] (Nemo) or
//                [TOOL_CALLS]f[ARGS]ARGS, one such section per call (Small 3.2 and later); either
//                (a model takes the one it learned; the parser reads both), each with the call
//                id its template writes in history allowed: , "id": "<9 alphanumerics>" before
//                the object's "}" / [CALL_ID]<9 alphanumerics> before [ARGS]
//   deepseek_v3  <｜tool▁calls▁begin｜>CALL("\n"CALL)*<｜tool▁calls▁end｜>, CALL being
//                <｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\nARGS\n```<｜tool▁call▁end｜>
//   generic      {"tool_calls": [CALL, ...]} (parallel) or {"tool_call": CALL}, CALL being
//                {"name": "f", "arguments": ARGS}; with allow_response also {"response": "..."}
//                (chat/generic_tool_format.h; constrained from the first byte, no trigger)
// ARGS is the JSON the tool's parameters schema allows (grammar/json_schema.h, compact whitespace;
// a tool without parameters takes {} only, as OpenAI defines; a schema without "type" is read
// as an object schema). A name outside JSON is written as it is and must be letters, digits,
// '_', '-', '.' and ':'. With a named function or parallel false: exactly one call; else one
// or more.
//
// The formats' markers are allowed as special tokens (grammar::Grammar::allow_special_token):
// "[TOOL_CALLS]", "[ARGS]", DeepSeek's markers and "<tool_call>" are control tokens in some
// vocabularies and text in others; either way the grammar reads them as their text.
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

// The strings that open a call in the format's output, where the grammar of the calls is armed
// under tool_choice "auto" (each is where tool_call_grammar's text starts): hermes and
// qwen3_coder "<tool_call>", llama3_json "{\"name\"", mistral "[TOOL_CALLS]", deepseek_v3
// "<｜tool▁calls▁begin｜>"; generic none (its answer is constrained from the start).
std::vector<std::string> tool_call_triggers(const ToolCallFormat& format);

// Throws spindle::Error naming the tool ("tools[k].function.parameters: ...") when a schema does
// not convert ("tools[k].function.name: ..." for a name the format cannot write), or when the named
// function is not among the tools.
grammar::Grammar tool_call_grammar(const ToolCallFormat& format, const ForcedToolCalls& forced);

}  // namespace spindle::chat
