// The chat-specific parts of a /v1/chat/completions body: messages (every role, tool calls and
// tool results), tools, tool_choice, parallel_tool_calls, chat_template_kwargs, reasoning_effort.
// Throws ApiError (400 naming the parameter, e.g. messages[2].tool_calls[0].function.arguments).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "server/openai_protocol.h"

namespace spindle::tokenizer {
class ChatTemplate;
}

namespace spindle::server {

// Reads them from `body` (the request, parsed keeping the client's key order) into r.messages
// and r.chat_context. The top-level keys have been checked against the field lists already.
void parse_chat_context(const nlohmann::ordered_json& body, GenerationRequest& r);

// A named tool choice as the request's API spells it: the function's name, and the parameter
// that holds it ("tool_choice.function.name" for chat, "tool_choice.name" for responses).
struct NamedToolChoice {
  std::string name;
  std::string param;
};
// tool_choice and parallel_tool_calls from `body` into c (chat and responses share the rules):
// "auto", "none", "required" (a 400 without tools), or an object, which read_named checks and reads
// (a 400 when its name is not among c.tools); any other value is a 400 showing `named_form`, the
// API's object. c.tools must be read first.
void parse_tool_choice(const nlohmann::ordered_json& body, ChatContext& c, std::string_view named_form,
                       NamedToolChoice (*read_named)(const nlohmann::ordered_json& choice));

// chat_template_kwargs and reasoning_effort from `body` into c.template_kwargs; the variables
// transformers' apply_chat_template sets itself (messages, tools, ...) may not be overridden.
void parse_template_kwargs(const nlohmann::ordered_json& body, ChatContext& c);

// The context a Jinja chat template renders (ChatTemplate::render_context): messages, tools,
// add_generation_prompt, then the template kwargs.
nlohmann::ordered_json template_context(const ChatContext& c, bool add_generation_prompt = true);

// The chat prompt: a Jinja template gets the whole context (tools, tool turns, kwargs); a built-in
// one renders plain turns only, so tools and tool turns are a 400 there. A template's failure is
// a spindle::Error (the caller's 400 naming messages).
std::string render_chat(const tokenizer::ChatTemplate& t, const GenerationRequest& r, bool add_generation_prompt);

}  // namespace spindle::server
