// A chat choice's output text sorted into OpenAI's message fields as it streams: reasoning_content
// (a reasoning parser, src/chat/reasoning_parser.h), tool_calls (a tool-call parser,
// src/chat/tool_call_parser.h, on what the reasoning parser left as content) and content.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/reasoning_parser.h"
#include "chat/tool_call_parser.h"

namespace spindle::server {

// How a request's output is read, decided when it is submitted.
struct OutputParsing {
  const chat::ReasoningFormat* reasoning = nullptr;  // null: no reasoning_content
  bool reasoning_opened = false;                     // the rendered prompt opened the section
  const chat::ToolCallFormat* tool_calls = nullptr;  // null: calls are not parsed (no tools, tool_choice none)
  bool parallel_tool_calls = true;                   // false: calls after the first are dropped
  std::shared_ptr<const nlohmann::ordered_json> tools;  // the request's tools (with tool_calls)
};

struct ChoiceDelta {
  std::string content;
  std::string reasoning;
  std::vector<chat::ToolCall> calls;
  bool empty() const { return content.empty() && reasoning.empty() && calls.empty(); }
};

class ChoiceFields {
 public:
  explicit ChoiceFields(const OutputParsing& parsing);
  // The next piece of the choice's text; `finished`: it is the last (everything held is released).
  ChoiceDelta push(std::string_view text, bool finished);
  int num_calls() const { return num_calls_; }

 private:
  void add_content(std::string_view text, ChoiceDelta& out);

  std::optional<chat::ReasoningParser> reasoning_;
  std::unique_ptr<chat::ToolCallParser> tool_calls_;
  bool parallel_;
  int num_calls_ = 0;
};

// OpenAI's tool_calls entries: [{id, type: "function", function: {name, arguments}}].
nlohmann::json tool_calls_json(const std::vector<chat::ToolCall>& calls);
// Streaming: the deltas announcing calls first_index.. (one with id, type and name and empty
// arguments, then one with the arguments), in the order the openai client accumulates them.
std::vector<nlohmann::json> tool_call_deltas(const std::vector<chat::ToolCall>& calls, int first_index);

}  // namespace spindle::server
