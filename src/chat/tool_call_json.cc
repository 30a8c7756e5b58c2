#include "chat/tool_call_json.h"

namespace spindle::chat {

using nlohmann::ordered_json;

std::optional<ordered_json> parse_json(std::string_view text) {
  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

std::optional<ToolCall> call_from_json(const ordered_json& object, ToolCallIdStyle style) {
  if (!object.is_object()) return std::nullopt;
  auto name = object.find("name");
  if (name == object.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  auto args = object.find("arguments");
  if (args == object.end()) args = object.find("parameters");
  ordered_json arguments = ordered_json::object();
  if (args != object.end() && !args->is_null()) {
    if (args->is_string()) {
      auto parsed = parse_json(args->get<std::string>());
      if (!parsed) return std::nullopt;
      arguments = std::move(*parsed);
    } else {
      arguments = *args;
    }
  }
  if (!arguments.is_object()) return std::nullopt;
  return ToolCall{make_tool_call_id(style), name->get<std::string>(),
                  arguments.dump(-1, ' ', false, ordered_json::error_handler_t::replace)};
}

size_t json_value_end(std::string_view text, size_t begin) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

}  // namespace spindle::chat
