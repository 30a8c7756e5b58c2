#include "server/responses_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

#include "server/chat_request.h"
#include "server/request_fields.h"

namespace spindle::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

constexpr int64_t kMaxOutputTokens = 1 << 20;


// `path` without its trailing dot: the object itself as a param.
std::string object_param(const std::string& path) { return path.substr(0, path.size() - 1); }

// The field lists first (a refused or unknown key), then only `keys` (what this kind of item has).
void check_keys(FieldScope scope, const ordered_json& o, std::initializer_list<std::string_view> keys,
                const std::string& path, const std::string& what) {
  if (!o.is_object()) bad_request(object_param(path), fmt::format("'{}' must be an object", object_param(path)));
  if (scope != 0) check_request_fields(scope, json::parse(o.dump()), path);
  for (const auto& [key, value] : o.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      bad_request(path + key, fmt::format("'{}{}' is not a field of {}", path, key, what));
    }
  }
}

// A message item's content: a string, or parts of `part_types` joined.
std::string parts_text(const ordered_json& content, const std::string& path,
                       std::initializer_list<std::string_view> part_types) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(object_param(path), fmt::format("'{}' must be a string or an array of parts", object_param(path)));
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string at = fmt::format("{}[{}].", object_param(path), k);
    const ordered_json& part = content[k];
    check_keys(kResponsesPart, part, {"type", "text", "annotations", "logprobs"}, at, "a text part");
    const std::string type = string_member(part, "type", at, true);
    if (std::find(part_types.begin(), part_types.end(), type) == part_types.end()) {
      std::string names;
      for (auto t : part_types) names += (names.empty() ? "" : ", ") + std::string(t);
      bad_request(at + "type", fmt::format("'{}type' is '{}'; only text parts ({}) are supported here", at, type, names));
    }
    text += string_member(part, "text", at, true);
  }
  return text;
}

// Builds the template's messages from the items; an assistant turn gathers the reasoning,
// assistant message and function_call items that follow one another (in that order).
class InputReader {
 public:
  explicit InputReader(GenerationRequest& r) : r_(r), c_(r.chat_context) {}

  void message(const std::string& role, std::string content) {
    flush();
    r_.messages.push_back({role, content});
    c_.template_messages.push_back({{"role", role}, {"content", std::move(content)}});
  }

  void item(const ordered_json& item, size_t i) {
    const std::string path = fmt::format("input[{}].", i);
    if (!item.is_object()) bad_request(object_param(path), fmt::format("'{}' must be an object (an item)", object_param(path)));
    const std::string type = get_member(item, "type") ? string_member(item, "type", path, true) : "message";
    if (type == "message") {
      message_item(item, path);
    } else if (type == "function_call") {
      check_keys(kResponsesItem, item, {"type", "call_id", "name", "arguments", "id", "status"}, path, "a function_call item");
      const std::string args_text = string_member(item, "arguments", path, true);
      ordered_json args = ordered_json::parse(args_text, nullptr, false);
      if (args.is_discarded()) bad_request(path + "arguments", fmt::format("'{}arguments' is not valid JSON", path));
      const std::string call_id = string_member(item, "call_id", path, true);
      if (turn_.is_null()) turn_ = {{"role", "assistant"}, {"content", ""}};
      turn_["tool_calls"].push_back({{"id", call_id}, {"type", "function"},
                                     {"function", {{"name", string_member(item, "name", path, true)}, {"arguments", std::move(args)}}}});
      call_ids_.push_back(call_id);
    } else if (type == "function_call_output") {
      check_keys(kResponsesItem, item, {"type", "call_id", "output", "id", "status"}, path, "a function_call_output item");
      const std::string call_id = string_member(item, "call_id", path, true);
      if (std::find(call_ids_.begin(), call_ids_.end(), call_id) == call_ids_.end()) {
        bad_request(path + "call_id", fmt::format("'{}call_id' is '{}', which no earlier function_call item has", path, call_id));
      }
      flush();
      std::string output = string_member(item, "output", path, true);
      r_.messages.push_back({"tool", output});
      c_.template_messages.push_back({{"role", "tool"}, {"content", std::move(output)}, {"tool_call_id", call_id}});
      c_.has_tool_turns = true;
    } else if (type == "reasoning") {
      check_keys(kResponsesItem, item, {"type", "id", "summary", "content", "status"}, path, "a reasoning item");
      if (!turn_.is_null()) flush();  // reasoning opens the next assistant turn
      turn_ = {{"role", "assistant"}, {"content", ""}};
      if (const ordered_json* content = get_member(item, "content")) {
        turn_["reasoning_content"] = parts_text(*content, path + "content.", {"reasoning_text"});
      }
    } else {
      bad_request(path + "type", fmt::format("'{}type' is '{}'; /v1/responses takes message, function_call, "
                                             "function_call_output and reasoning items{}", path, type,
                                             type == "item_reference" ? " (items are not stored, so none can be referenced)" : ""));
    }
  }

  // The assistant turn being gathered, if any, becomes a message.
  void flush() {
    if (turn_.is_null()) return;
    c_.has_tool_turns = c_.has_tool_turns || turn_.contains("tool_calls");
    r_.messages.push_back({"assistant", turn_["content"].get<std::string>()});
    c_.template_messages.push_back(std::move(turn_));
    turn_ = nullptr;
  }

 private:
  void message_item(const ordered_json& item, const std::string& path) {
    check_keys(kResponsesItem, item, {"type", "role", "content", "id", "status"}, path, "a message item");
    std::string role = string_member(item, "role", path, true);
    if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
      bad_request(path + "role", fmt::format("'{}role' is '{}'; a message is user, system, developer or assistant", path, role));
    }
    const ordered_json* content = get_member(item, "content");
    if (!content) bad_request(path + "content", fmt::format("'{}content' is required", path));
    std::string text = parts_text(*content, path + "content.", {"input_text", "output_text"});
    if (role != "assistant") {
      message(role == "developer" ? "system" : role, std::move(text));
      return;
    }
    // An assistant message after this turn's calls (or its text) begins a new turn.
    if (!turn_.is_null() && (turn_.contains("tool_calls") || !turn_["content"].get<std::string>().empty())) flush();
    if (turn_.is_null()) turn_ = {{"role", "assistant"}, {"content", ""}};
    turn_["content"] = std::move(text);
  }

  GenerationRequest& r_;
  ChatContext& c_;
  ordered_json turn_;                  // the assistant turn being gathered, or null
  std::vector<std::string> call_ids_;  // every function_call's call_id so far
};

// tools: [{type: "function", name, description?, parameters?, strict?}] -> chat's
// [{type: "function", function: {name, description?, parameters?, strict?}}], keys in sent order.
void read_tools(const ordered_json& body, ChatContext& c) {
  const ordered_json* tools = get_member(body, "tools");
  if (!tools) return;
  if (!tools->is_array()) bad_request("tools", "'tools' must be an array");
  ordered_json out = ordered_json::array();
  for (size_t k = 0; k < tools->size(); ++k) {
    const std::string at = fmt::format("tools[{}].", k);
    const ordered_json& tool = (*tools)[k];
    if (!tool.is_object()) bad_request(object_param(at), fmt::format("'{}' must be an object", object_param(at)));
    if (const std::string type = string_member(tool, "type", at, true); type != "function") {
      bad_request(at + "type", fmt::format("'{}type' is '{}'; only function tools are supported (Spindle has no "
                                           "built-in tools)", at, type));
    }
    check_keys(FieldScope{}, tool, {"type", "name", "description", "parameters", "strict"}, at, "a function tool");
    if (string_member(tool, "name", at, true).empty()) bad_request(at + "name", fmt::format("'{}name' must not be empty", at));
    string_member(tool, "description", at, false);
    if (const ordered_json* p = get_member(tool, "parameters"); p && !p->is_object()) {
      bad_request(at + "parameters", fmt::format("'{}parameters' must be a JSON schema object", at));
    }
    if (const ordered_json* s = get_member(tool, "strict"); s && !s->is_boolean()) {
      bad_request(at + "strict", fmt::format("'{}strict' must be a boolean", at));
    }
    ordered_json function = ordered_json::object();
    for (const auto& [key, value] : tool.items()) {
      if (key != "type" && !value.is_null()) function[key] = value;
    }
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  if (!out.empty()) c.tools = std::move(out);
}

// The Responses API's named tool choice: {"type": "function", "name": "f"}.
NamedToolChoice read_responses_named_choice(const ordered_json& choice) {
  const std::string type = string_member(choice, "type", "tool_choice.", true);
  if (type != "function") {
    bad_request("tool_choice.type", fmt::format("'tool_choice.type' is '{}'; only \"function\" is supported", type));
  }
  check_keys(FieldScope{}, choice, {"type", "name"}, "tool_choice.", "a function tool choice");
  return {string_member(choice, "name", "tool_choice.", true), "tool_choice.name"};
}

// reasoning: {effort}; a summary is refused (none is written).
void read_reasoning(const ordered_json& body, ChatContext& c) {
  const ordered_json* reasoning = get_member(body, "reasoning");
  if (!reasoning) return;
  check_keys(FieldScope{}, *reasoning, {"effort", "summary", "generate_summary"}, "reasoning.", "reasoning");
  for (const char* key : {"summary", "generate_summary"}) {
    if (get_member(*reasoning, key)) {
      bad_request(fmt::format("reasoning.{}", key), fmt::format("'reasoning.{}' is not supported: Spindle writes no "
                                                                "reasoning summaries", key));
    }
  }
  if (const ordered_json* effort = get_member(*reasoning, "effort")) {
    if (!effort->is_string() || (*effort != "low" && *effort != "medium" && *effort != "high" && *effort != "minimal")) {
      bad_request("reasoning.effort", "'reasoning.effort' must be \"minimal\", \"low\", \"medium\" or \"high\"");
    }
    c.template_kwargs["reasoning_effort"] = *effort;
  }
}

// Chat's response_format names as text.format's.
std::string text_format_name(std::string s) {
  static const std::regex names(R"(response_format(\.json_schema)?)");
  return std::regex_replace(s, names, "text.format");
}

// text: {format: {type: "text"} | {type: "json_object"} | {type: "json_schema", name, schema,
// description?, strict?}}, read as chat's response_format (structured_output.h).
void read_text_format(const ordered_json& body, GenerationRequest& r) {
  const ordered_json* text = get_member(body, "text");
  if (!text) return;
  check_keys(FieldScope{}, *text, {"format"}, "text.", "text");
  const ordered_json* format = get_member(*text, "format");
  if (!format) return;
  if (!format->is_object()) bad_request("text.format", "'text.format' must be an object");
  ordered_json response_format = *format;
  if (get_member(*format, "type") && (*format)["type"] == "json_schema") {
    ordered_json schema = *format;
    schema.erase("type");
    response_format = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  }
  const std::string synthetic = ordered_json{{"response_format", std::move(response_format)}}.dump();
  try {
    r.constraint = parse_output_constraint(json::parse(synthetic), synthetic);
  } catch (const ApiError& e) {
    throw ApiError(e.status(), e.type(), text_format_name(e.param()), text_format_name(e.what()));
  }
  r.constraint.param = text_format_name(r.constraint.param);
}

void read_input(const ordered_json& body, GenerationRequest& r) {
  InputReader reader(r);
  if (const ordered_json* instructions = get_member(body, "instructions")) {
    if (!instructions->is_string()) bad_request("instructions", "'instructions' must be a string");
    reader.message("system", instructions->get<std::string>());
  }
  const ordered_json* input = get_member(body, "input");
  if (!input) bad_request("input", "'input' is required");
  if (input->is_string()) {
    reader.message("user", input->get<std::string>());
  } else if (input->is_array() && !input->empty()) {
    for (size_t i = 0; i < input->size(); ++i) reader.item((*input)[i], i);
    reader.flush();
  } else {
    bad_request("input", "'input' must be a string or a non-empty array of items");
  }
}

// What the response object repeats of the request.
json echo_of(const json& j, const GenerationRequest& r) {
  auto or_null = [&](const char* key) { return j.contains(key) ? j[key] : json(nullptr); };
  json reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  if (j.contains("reasoning") && j["reasoning"].is_object() && j["reasoning"].contains("effort")) {
    reasoning["effort"] = j["reasoning"]["effort"];
  }
  return {{"instructions", or_null("instructions")},
          {"max_output_tokens", or_null("max_output_tokens")},
          {"metadata", j.contains("metadata") && !j["metadata"].is_null() ? j["metadata"] : json::object()},
          {"parallel_tool_calls", r.chat_context.parallel_tool_calls},
          {"previous_response_id", nullptr},
          {"reasoning", std::move(reasoning)},
          {"service_tier", j.contains("service_tier") && !j["service_tier"].is_null() ? j["service_tier"] : json("default")},
          {"store", false},
          {"temperature", r.sampling.temperature},
          {"text", j.contains("text") && !j["text"].is_null() ? j["text"] : json{{"format", {{"type", "text"}}}}},
          {"tool_choice", j.contains("tool_choice") && !j["tool_choice"].is_null() ? j["tool_choice"] : json("auto")},
          {"tools", j.contains("tools") && !j["tools"].is_null() ? j["tools"] : json::array()},
          {"top_p", r.sampling.top_p},
          {"truncation", "disabled"},
          {"user", or_null("user")}};
}

}  // namespace

ResponsesRequest parse_responses_request(const std::string& body, size_t max_body_bytes) {
  const json j = parse_body(body, max_body_bytes);
  ResponsesRequest out;
  GenerationRequest& r = out.generation;
  r.chat = true;
  parse_common_fields(j, kResponsesBody, r);
  // Parsed again keeping the client's key order: tools and arguments reach the template as sent.
  const ordered_json o = ordered_json::parse(body);
  read_input(o, r);
  read_tools(o, r.chat_context);
  parse_tool_choice(o, r.chat_context, R"({"type": "function", "name": ...})", read_responses_named_choice);
  read_text_format(o, r);
  parse_template_kwargs(o, r.chat_context);  // chat_template_kwargs (reasoning_effort is not a field here)
  read_reasoning(o, r.chat_context);
  r.sampling.max_tokens = -1;  // up to the context
  if (const ordered_json* v = get_member(o, "max_output_tokens")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > kMaxOutputTokens) {
      bad_request("max_output_tokens", fmt::format("'max_output_tokens' must be an integer between 1 and {}", kMaxOutputTokens));
    }
    r.sampling.max_tokens = static_cast<int>(v->get<int64_t>());
  }
  out.echo = echo_of(j, r);
  return out;
}

std::string responses_param(const std::string& p) {
  if (p == "messages" || p.starts_with("messages[")) return "input";
  if (p == "max_completion_tokens" || p == "max_tokens") return "max_output_tokens";
  if (p == "tool_choice.function.name") return "tool_choice.name";
  static const std::regex tool(R"(^tools\[(\d+)\]\.function\.)");
  return std::regex_replace(p, tool, "tools[$1].");
}

Submitted submit_responses_request(engine::DpGroup& engine, GenerationRequest& request) {
  try {
    return submit_request(engine, request);
  } catch (const ApiError& e) {
    const std::string param = responses_param(e.param());
    if (param == e.param()) throw;
    static const std::regex tool(R"(tools\[(\d+)\]\.function\.)");
    std::string message = std::regex_replace(std::string(e.what()), tool, "tools[$1].");
    throw ApiError(e.status(), e.type(), param, message);
  }
}

}  // namespace spindle::server
