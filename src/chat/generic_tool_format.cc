#include "chat/generic_tool_format.h"

#include <fmt/format.h>

#include "chat/tool_call_json.h"

namespace spindle::chat {

using nlohmann::ordered_json;

namespace {

std::string dump(const ordered_json& j, int indent = -1) {
  return j.dump(indent, ' ', false, ordered_json::error_handler_t::replace);
}

// {"name": f, "arguments": {...}} of a template message's tool call (arguments already an object).
ordered_json answer_call(const ordered_json& call) {
  const ordered_json& f = call.at("function");
  return {{"name", f.at("name")}, {"arguments", f.contains("arguments") ? f["arguments"] : ordered_json::object()}};
}

// The object the model is asked to answer with, for a history turn's calls.
std::string answer_of_calls(const ordered_json& calls, bool parallel) {
  if (!parallel && calls.size() == 1) return dump({{"tool_call", answer_call(calls[0])}});
  ordered_json list = ordered_json::array();
  for (const auto& c : calls) list.push_back(answer_call(c));
  return dump({{"tool_calls", std::move(list)}});
}

class GenericParser final : public ToolCallParser {
 public:
  explicit GenericParser(ToolCallIdStyle style) : style_(style) {}

  ToolCallDelta push(std::string_view text) override {
    held_ += text;
    return {};
  }

  ToolCallDelta finish() override {
    ToolCallDelta out;
    if (!read(out)) {
      out = {};
      out.content = held_;
    }
    held_.clear();
    return out;
  }

 private:
  // The answer object into out; false when the text is not one.
  bool read(ToolCallDelta& out) const {
    const auto j = parse_json(held_);
    if (!j || !j->is_object() || j->size() != 1) return false;
    if (auto r = j->find("response"); r != j->end()) {
      out.content = r->is_string() ? r->get<std::string>() : dump(*r);
      return true;
    }
    ordered_json calls;
    if (auto one = j->find("tool_call"); one != j->end()) {
      calls = ordered_json::array({*one});
    } else if (auto many = j->find("tool_calls"); many != j->end() && many->is_array() && !many->empty()) {
      calls = *many;
    } else {
      return false;
    }
    for (const auto& c : calls) {
      auto call = call_from_json(c, style_);
      if (!call) return false;
      out.calls.push_back(std::move(*call));
    }
    return true;
  }

  ToolCallIdStyle style_;
  std::string held_;
};

}  // namespace

std::string generic_tool_instructions(const ordered_json& tools, const GenericToolChoice& choice) {
  ordered_json described = ordered_json::array();
  for (const auto& tool : tools) {
    const ordered_json& f = tool.at("function");
    if (!choice.name.empty() && f.at("name") != choice.name) continue;
    ordered_json d = {{"name", f.at("name")}};
    if (f.contains("description")) d["description"] = f["description"];
    d["parameters"] = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : ordered_json::object();
    described.push_back(std::move(d));
  }
  const std::string call_shape = choice.parallel
                                     ? R"({"tool_calls": [{"name": "<tool name>", "arguments": {<arguments>}}]})"
                                     : R"({"tool_call": {"name": "<tool name>", "arguments": {<arguments>}}})";
  std::string text = "Answer with exactly one JSON object and nothing else.\n";
  if (choice.required) {
    text += fmt::format("Call {} with: {}\n", choice.name.empty() ? "one or more of these tools" : "the tool " + choice.name,
                        call_shape);
  } else {
    text += fmt::format("To call tools: {}\nTo reply to the user: {{\"response\": \"<your reply>\"}}\n", call_shape);
  }
  text += "The arguments follow the tool's parameters schema. The tools:\n" + dump(described);
  return text;
}

ordered_json generic_tool_messages(const ordered_json& messages, const ordered_json& tools,
                                   const GenericToolChoice& choice) {
  ordered_json out = ordered_json::array();
  const std::string instructions = generic_tool_instructions(tools, choice);
  for (const auto& m : messages) {
    ordered_json t = m;
    if (t.value("role", "") == "assistant" && t.contains("tool_calls") && t["tool_calls"].is_array() &&
        !t["tool_calls"].empty()) {
      const std::string content = t.value("content", "");
      t["content"] = (content.empty() ? "" : content + "\n") + answer_of_calls(t["tool_calls"], choice.parallel);
      t.erase("tool_calls");
    }
    out.push_back(std::move(t));
  }
  if (!out.empty() && out[0].value("role", "") == "system") {
    const std::string content = out[0].value("content", "");
    out[0]["content"] = content.empty() ? instructions : content + "\n\n" + instructions;
  } else {
    out.insert(out.begin(), ordered_json{{"role", "system"}, {"content", instructions}});
  }
  return out;
}

std::unique_ptr<ToolCallParser> make_generic_tool_call_parser(ToolCallIdStyle style) {
  return std::make_unique<GenericParser>(style);
}

}  // namespace spindle::chat
