// The body of POST /v1/responses (OpenAI's Responses API, stateless) read into the chat machinery's
// GenerationRequest: `instructions` becomes a system message, `input` (a string, or items:
// messages with text parts, function_call / function_call_output items, reasoning items) becomes
// the chat template's messages (an assistant turn gathers the reasoning, message and function_call
// items that follow one another), the flat function tools {type, name, description, parameters,
// strict} become chat's {type, function: {...}}, tool_choice {type: "function", name} a named
// function, max_output_tokens the token limit, text.format chat's response_format (structured
// output), reasoning.effort the template's reasoning_effort; chat_template_kwargs as in chat.
//
// Every key of the body, of each input item and of each content part is checked against the
// field lists (request_fields.h, scopes kResponsesBody / kResponsesItem / kResponsesPart): a
// refused or unknown one is a 400 naming it (`store: true` and `previous_response_id` among them:
// nothing is stored). Errors name the Responses API's parameters (input[2].call_id,
// tools[0].parameters, max_output_tokens), also those the shared chat code raises later.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "server/completion_handler.h"
#include "server/openai_protocol.h"

namespace spindle::server {

struct ResponsesRequest {
  GenerationRequest generation;  // chat: true, n: 1; stream as asked
  // The settings a response object repeats, in OpenAI's names: instructions, max_output_tokens,
  // metadata, parallel_tool_calls, previous_response_id (null), reasoning {effort, summary},
  // service_tier, store (false), temperature, text, tool_choice, tools (as sent), top_p,
  // truncation, user.
  nlohmann::json echo;
};

// Throws ApiError (413 past max_body_bytes, 400 naming the parameter).
ResponsesRequest parse_responses_request(const std::string& body, size_t max_body_bytes);

// A chat parameter as the Responses API names it: messages[...] -> input, max_completion_tokens
// -> max_output_tokens, tools[k].function.x -> tools[k].x, tool_choice.function.name ->
// tool_choice.name; others unchanged.
std::string responses_param(const std::string& chat_param);

// submit_request (completion_handler.h) for a parsed /v1/responses request, its ApiErrors naming
// the Responses API's parameters (responses_param).
Submitted submit_responses_request(engine::DpGroup& engine, GenerationRequest& request);

}  // namespace spindle::server
