#include "server/chat_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "chat/generic_tool_format.h"
#include "server/request_fields.h"
#include "tokenizer/chat_template.h"

namespace spindle::server {

using nlohmann::ordered_json;

namespace {

// The field lists read nlohmann::json; a message or part is small, so it is converted.
void check_fields(FieldScope scope, const ordered_json& object, const std::string& path) {
  check_request_fields(scope, nlohmann::json::parse(object.dump()), path);
}


// Only these keys in an object the field lists do not cover (a tool call, a tool definition).
void check_keys(const ordered_json& o, std::initializer_list<std::string_view> keys, const std::string& path) {
  if (!o.is_object()) bad_request(path.substr(0, path.size() - 1), fmt::format("'{}' must be an object", path.substr(0, path.size() - 1)));
  for (const auto& [key, value] : o.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      bad_request(path + key, fmt::format("Unrecognized request argument supplied: {}{}", path, key));
    }
  }
}

std::string message_content(const ordered_json& m, const std::string& path, bool may_be_null) {
  const ordered_json* c = get_member(m, "content");
  if (!c) {
    if (may_be_null) return {};
    bad_request(path + "content", fmt::format("'{}content' is required for this role", path));
  }
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) bad_request(path + "content", "message content must be a string or text parts");
  std::string text;  // [{"type": "text", "text": "..."}]
  for (size_t k = 0; k < c->size(); ++k) {
    const ordered_json& part = (*c)[k];
    const bool text_part = part.is_object() && part.contains("type") && part["type"] == "text" &&
                           part.contains("text") && part["text"].is_string();
    if (!text_part) bad_request(path + "content", "only text content parts are supported");
    check_fields(kContentPart, part, fmt::format("{}content[{}].", path, k));
    text += part["text"].get<std::string>();
  }
  return text;
}

// An assistant turn's tool_calls: [{id, type: "function", function: {name, arguments: "JSON"}}],
// for the template with the arguments as the object they hold.
ordered_json template_tool_calls(const ordered_json& calls, const std::string& path) {
  if (!calls.is_array()) bad_request(path, fmt::format("'{}' must be an array", path));
  ordered_json out = ordered_json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string at = fmt::format("{}[{}].", path, k);
    check_keys(calls[k], {"id", "type", "function"}, at);
    if (string_member(calls[k], "type", at, false) != "function" && get_member(calls[k], "type")) {
      bad_request(at + "type", fmt::format("'{}type' must be \"function\"", at));
    }
    const ordered_json* f = get_member(calls[k], "function");
    if (!f) bad_request(at + "function", fmt::format("'{}function' is required", at));
    check_keys(*f, {"name", "arguments"}, at + "function.");
    const std::string args_text = string_member(*f, "arguments", at + "function.", true);
    ordered_json args = ordered_json::parse(args_text, nullptr, false);
    if (args.is_discarded()) {
      bad_request(at + "function.arguments", fmt::format("'{}function.arguments' is not valid JSON", at));
    }
    out.push_back({{"id", string_member(calls[k], "id", at, true)},
                   {"type", "function"},
                   {"function", {{"name", string_member(*f, "name", at + "function.", true)}, {"arguments", std::move(args)}}}});
  }
  return out;
}

ordered_json parse_message(const ordered_json& m, size_t i, ChatContext& c, std::vector<ChatMessage>& messages) {
  const std::string path = fmt::format("messages[{}].", i);
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
    bad_request(fmt::format("messages[{}]", i), "each message needs a string 'role' and a 'content'");
  }
  std::string role = m["role"].get<std::string>();
  if (role != "system" && role != "user" && role != "assistant" && role != "developer" && role != "tool") {
    bad_request(path + "role", fmt::format("role '{}' is not supported (system, developer, user, assistant, tool){}", role,
                                           role == "function" ? "; send function results as role 'tool'" : ""));
  }
  if (role == "developer") role = "system";
  check_fields(kMessage, m, path);
  const bool assistant = role == "assistant";
  for (const char* key : {"tool_calls", "reasoning_content"}) {  // an empty tool_calls list asks for nothing
    const ordered_json* v = get_member(m, key);
    if (v && !assistant && !(v->is_array() && v->empty())) {
      bad_request(path + key, fmt::format("'{}{}' is for assistant messages", path, key));
    }
  }
  if (get_member(m, "tool_call_id") && role != "tool") {
    bad_request(path + "tool_call_id", fmt::format("'{}tool_call_id' is for tool messages", path));
  }
  ordered_json t = {{"role", role}, {"content", message_content(m, path, assistant)}};
  if (const ordered_json* name = get_member(m, "name")) {
    if (!name->is_string()) bad_request(path + "name", fmt::format("'{}name' must be a string", path));
    t["name"] = *name;
  }
  if (role == "tool") t["tool_call_id"] = string_member(m, "tool_call_id", path, true);
  if (const ordered_json* calls = get_member(m, "tool_calls"); calls && !calls->empty()) {
    t["tool_calls"] = template_tool_calls(*calls, path + "tool_calls");
  }
  if (assistant && get_member(m, "reasoning_content")) t["reasoning_content"] = string_member(m, "reasoning_content", path, false);
  c.has_tool_turns = c.has_tool_turns || role == "tool" || t.contains("tool_calls");
  messages.push_back({role, t["content"].get<std::string>()});
  return t;
}

// tools: [{type: "function", function: {name, description?, parameters?, strict?}}].
void parse_tools(const ordered_json& body, ChatContext& c) {
  const ordered_json* tools = get_member(body, "tools");
  if (!tools) return;
  if (!tools->is_array()) bad_request("tools", "'tools' must be an array");
  for (size_t k = 0; k < tools->size(); ++k) {
    const std::string at = fmt::format("tools[{}].", k);
    const ordered_json& tool = (*tools)[k];
    check_keys(tool, {"type", "function"}, at);
    if (string_member(tool, "type", at, true) != "function") {
      bad_request(at + "type", fmt::format("'{}type' must be \"function\" (the only tool type)", at));
    }
    const ordered_json* f = get_member(tool, "function");
    if (!f) bad_request(at + "function", fmt::format("'{}function' is required", at));
    check_keys(*f, {"name", "description", "parameters", "strict"}, at + "function.");
    if (string_member(*f, "name", at + "function.", true).empty()) {
      bad_request(at + "function.name", fmt::format("'{}function.name' must not be empty", at));
    }
    string_member(*f, "description", at + "function.", false);
    if (const ordered_json* p = get_member(*f, "parameters"); p && !p->is_object()) {
      bad_request(at + "function.parameters", fmt::format("'{}function.parameters' must be a JSON schema object", at));
    }
  }
  if (!tools->empty()) c.tools = *tools;
}

// Chat's named tool choice: {"type": "function", "function": {"name": "f"}}.
NamedToolChoice read_chat_named_choice(const ordered_json& choice) {
  check_keys(choice, {"type", "function"}, "tool_choice.");
  if (string_member(choice, "type", "tool_choice.", true) != "function") {
    bad_request("tool_choice.type", "'tool_choice.type' must be \"function\"");
  }
  const ordered_json* f = get_member(choice, "function");
  if (!f || !f->is_object()) bad_request("tool_choice.function", "'tool_choice.function' must be an object");
  check_keys(*f, {"name"}, "tool_choice.function.");
  return {string_member(*f, "name", "tool_choice.function.", true), "tool_choice.function.name"};
}

}  // namespace

void parse_tool_choice(const ordered_json& body, ChatContext& c, std::string_view named_form,
                       NamedToolChoice (*read_named)(const ordered_json& choice)) {
  if (const ordered_json* choice = get_member(body, "tool_choice")) {
    if (*choice == "none") {
      c.tool_choice = ToolChoice::kNone;
    } else if (*choice == "required") {
      c.tool_choice = ToolChoice::kRequired;
    } else if (choice->is_object()) {
      NamedToolChoice named = read_named(*choice);
      c.tool_choice = ToolChoice::kNamed;
      c.tool_choice_name = std::move(named.name);
      if (!c.has_tool(c.tool_choice_name)) {
        bad_request(named.param,
                    fmt::format("'{}' is '{}', which is not among the tools", named.param, c.tool_choice_name));
      }
    } else if (*choice != "auto") {
      bad_request("tool_choice",
                  fmt::format("'tool_choice' must be \"auto\", \"none\", \"required\" or {}", named_form));
    }
    if (c.tool_choice == ToolChoice::kRequired && !c.has_tools()) {
      bad_request("tool_choice", "'tool_choice' \"required\" needs a non-empty 'tools'");
    }
  }
  if (const ordered_json* parallel = get_member(body, "parallel_tool_calls")) {
    if (!parallel->is_boolean()) bad_request("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    c.parallel_tool_calls = parallel->get<bool>();
  }
}

void parse_template_kwargs(const ordered_json& body, ChatContext& c) {
  if (const ordered_json* kwargs = get_member(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (const auto& [key, value] : kwargs->items()) {
      static constexpr std::array kReserved = {"messages", "tools", "documents", "add_generation_prompt", "bos_token",
                                               "eos_token"};
      if (std::find(kReserved.begin(), kReserved.end(), key) != kReserved.end()) {
        bad_request("chat_template_kwargs." + key,
                    fmt::format("'chat_template_kwargs.{}' is set by the server; send it as its own field", key));
      }
      c.template_kwargs[key] = value;
    }
  }
  if (const ordered_json* effort = get_member(body, "reasoning_effort")) {
    if (!effort->is_string() || (*effort != "low" && *effort != "medium" && *effort != "high" && *effort != "minimal")) {
      bad_request("reasoning_effort", "'reasoning_effort' must be \"minimal\", \"low\", \"medium\" or \"high\"");
    }
    c.template_kwargs["reasoning_effort"] = *effort;
  }
}

void parse_chat_context(const ordered_json& body, GenerationRequest& r) {
  const ordered_json* messages = get_member(body, "messages");
  if (!messages || !messages->is_array() || messages->empty()) {
    bad_request("messages", "'messages' must be a non-empty array");
  }
  ChatContext& c = r.chat_context;
  for (size_t i = 0; i < messages->size(); ++i) {
    c.template_messages.push_back(parse_message((*messages)[i], i, c, r.messages));
  }
  parse_tools(body, c);
  parse_tool_choice(body, c, R"({"type": "function", "function": {"name": ...}})", read_chat_named_choice);
  parse_template_kwargs(body, c);
}

ordered_json template_context(const ChatContext& c, bool add_generation_prompt) {
  ordered_json context = {{"messages", c.template_messages}, {"tools", c.tools},
                          {"add_generation_prompt", add_generation_prompt}};
  for (const auto& [key, value] : c.template_kwargs.items()) context[key] = value;
  return context;
}

std::string render_chat(const tokenizer::ChatTemplate& t, const GenerationRequest& r, bool add_generation_prompt) {
  const ChatContext& c = r.chat_context;
  if (t.format() == tokenizer::ChatFormat::kJinja && t.tool_call_parser() == "generic" && c.has_tools() &&
      c.tool_choice != ToolChoice::kNone) {
    // The generic tool format (chat/generic_tool_format.h): the template sees the tools only in
    // the system message it asks for, and history calls as the answers it asks for.
    const bool named = c.tool_choice == ToolChoice::kNamed;
    const chat::GenericToolChoice choice{named ? c.tool_choice_name : "", c.tool_choice != ToolChoice::kAuto,
                                         c.parallel_tool_calls && !named};
    ChatContext generic = c;
    generic.template_messages = chat::generic_tool_messages(c.template_messages, c.tools, choice);
    generic.tools = nullptr;
    return t.render_context(template_context(generic, add_generation_prompt));
  }
  if (t.format() == tokenizer::ChatFormat::kJinja) return t.render_context(template_context(c, add_generation_prompt));
  const std::string why = fmt::format("the built-in {} chat template does not render tools; serve a Jinja template "
                                      "(the model's own, or --chat-template FILE)", tokenizer::to_string(t.format()));
  if (c.has_tools()) bad_request("tools", why);
  if (c.has_tool_turns) bad_request("messages", why);
  std::vector<tokenizer::ChatMessage> messages;
  for (const auto& m : r.messages) messages.push_back({m.role, m.content});
  return t.render(messages, add_generation_prompt);
}

}  // namespace spindle::server
