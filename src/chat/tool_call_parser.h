// Tool calls in a model's output text, in the format its chat template taught it, turned into
// OpenAI's message.tool_calls (and streamed as delta.tool_calls).
//
// Formats (the --tool-call-parser names are vLLM's):
//   hermes       Hermes 2/3, Qwen2.5, Qwen3, QwQ:
//                <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call> (one block per call)
//   qwen3_coder  Qwen3-Coder: <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n
//                </function>\n</tool_call> (a value is JSON when it parses as JSON, else text; a
//                text parameter of the request's tools is always text: chat/qwen3_coder_format.h)
//   llama3_json  Llama 3.1 / 3.2 / 3.3: the whole output is {"name": "f", "parameters": {...}}
//                (optionally after <|python_tag|>; several joined by ';')
//   mistral      Mistral: [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...] (Nemo) or
//                [TOOL_CALLS]f[ARGS]{...} (Small 3.2 and later); the markers are special
//                tokens, so such requests are detokenized with special tokens kept
//   deepseek_v3  DeepSeek R1 (and its distills' templates), V3: <｜tool▁calls▁begin｜>
//                <｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜>
//                ...<｜tool▁calls▁end｜> (special tokens kept, as for mistral)
//   generic      templates with no tool syntax: one JSON object naming calls or a response
//                (chat/generic_tool_format.h)
// A call that does not parse is returned as content, never dropped. Text before the first call is
// content; whitespace between and after calls is dropped, other text after them is content.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::chat {

enum class ToolCallIdStyle {
  kOpenAi,   // "call_" + 24 alphanumerics
  kMistral,  // 9 alphanumerics (Mistral's templates refuse other ids)
};

struct ToolCallFormat {
  std::string_view name;       // the --tool-call-parser name
  ToolCallIdStyle id_style;
  bool keeps_special_tokens;   // the format's markers are special tokens the text must keep
};

std::span<const ToolCallFormat> tool_call_formats();
// The format named `name`; an error listing the names (and "none", "auto") for any other.
const ToolCallFormat& find_tool_call_format(std::string_view name);
// The format a chat template's text teaches, from its markers; null when it has none Spindle reads.
const ToolCallFormat* detect_tool_call_format(std::string_view template_text);

// A fresh id in the style (random; unique with overwhelming probability).
std::string make_tool_call_id(ToolCallIdStyle style);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of the arguments object
};

// One piece of output: content released now, and calls completed by it.
struct ToolCallDelta {
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  // The next piece of content (after any reasoning parser); bytes that may begin a marker or
  // belong to an unfinished call are held back.
  virtual ToolCallDelta push(std::string_view text) = 0;
  // The output ended: an unfinished call that parses is a call, else its text is content.
  virtual ToolCallDelta finish() = 0;
};

// tools: the request's tools ([{type: "function", function: {name, parameters?}}]) or null; the
// qwen3_coder parser reads the values of their text parameters as written (chat/qwen3_coder_format.h).
std::unique_ptr<ToolCallParser> make_tool_call_parser(const ToolCallFormat& format,
                                                      const nlohmann::ordered_json* tools = nullptr);

}  // namespace spindle::chat
