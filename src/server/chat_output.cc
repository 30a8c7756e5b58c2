#include "server/chat_output.h"

namespace spindle::server {

using nlohmann::json;

ChoiceFields::ChoiceFields(const OutputParsing& parsing) : parallel_(parsing.parallel_tool_calls) {
  if (parsing.reasoning) reasoning_.emplace(*parsing.reasoning, parsing.reasoning_opened);
  if (parsing.tool_calls) tool_calls_ = chat::make_tool_call_parser(*parsing.tool_calls, parsing.tools.get());
}

void ChoiceFields::add_content(std::string_view text, ChoiceDelta& out) {
  if (!tool_calls_) {
    out.content += text;
    return;
  }
  chat::ToolCallDelta d = tool_calls_->push(text);
  out.content += d.content;
  for (auto& call : d.calls) out.calls.push_back(std::move(call));
}

ChoiceDelta ChoiceFields::push(std::string_view text, bool finished) {
  ChoiceDelta out;
  if (reasoning_) {
    chat::ReasoningDelta d = reasoning_->push(text);
    if (finished) {
      chat::ReasoningDelta rest = reasoning_->finish();
      d.reasoning += rest.reasoning;
      d.content += rest.content;
    }
    out.reasoning = std::move(d.reasoning);
    add_content(d.content, out);
  } else {
    add_content(text, out);
  }
  if (finished && tool_calls_) {
    chat::ToolCallDelta d = tool_calls_->finish();
    out.content += d.content;
    for (auto& call : d.calls) out.calls.push_back(std::move(call));
  }
  if (!parallel_) {  // parallel_tool_calls false: the first call only
    const size_t keep = num_calls_ > 0 ? 0 : std::min<size_t>(out.calls.size(), 1);
    out.calls.resize(keep);
  }
  num_calls_ += static_cast<int>(out.calls.size());
  return out;
}

json tool_calls_json(const std::vector<chat::ToolCall>& calls) {
  json out = json::array();
  for (const auto& c : calls) {
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

std::vector<json> tool_call_deltas(const std::vector<chat::ToolCall>& calls, int first_index) {
  std::vector<json> out;
  for (size_t k = 0; k < calls.size(); ++k) {
    const int index = first_index + static_cast<int>(k);
    out.push_back({{"index", index}, {"id", calls[k].id}, {"type", "function"},
                   {"function", {{"name", calls[k].name}, {"arguments", ""}}}});
    out.push_back({{"index", index}, {"function", {{"arguments", calls[k].arguments}}}});
  }
  return out;
}

}  // namespace spindle::server
