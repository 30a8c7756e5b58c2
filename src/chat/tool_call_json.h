// JSON pieces of tool-call formats: a call object read from model text, a JSON value's extent.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "chat/tool_call_parser.h"

namespace spindle::chat {

// {"name": "f", "arguments": {...}} (or "parameters", Llama's key; absent: {}) as a call with a
// fresh id; arguments given as a JSON string holding an object are taken as that object. nullopt
// when the object has no string name or its arguments are not an object.
std::optional<ToolCall> call_from_json(const nlohmann::ordered_json& object, ToolCallIdStyle style);

// `text` parsed whole as JSON (leading and trailing whitespace allowed); nullopt when it is not.
std::optional<nlohmann::ordered_json> parse_json(std::string_view text);

// The index one past the JSON object or array that opens at text[begin] ('{' or '['), strings and
// escapes respected; npos when it does not close within `text`.
size_t json_value_end(std::string_view text, size_t begin);

}  // namespace spindle::chat
