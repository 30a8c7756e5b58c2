#include "server/request_fields.h"

#include <fmt/format.h>

#include <array>

#include "server/openai_protocol.h"

namespace spindle::server {

namespace {

using U = FieldUse;
constexpr uint16_t kC = kCompletionBody, kCh = kChatBody, kB = kBothBodies, kM = kMessage, kP = kContentPart,
                  kSo = kStreamOptions, kE = kEmbeddingsBody, kR = kResponsesBody,
                   kRi = kResponsesItem, kRp = kResponsesPart;

constexpr std::string_view kNoFunctions = "the deprecated functions API is not supported; send tools and tool_choice";

// The three lists. Order: honoured, no-op, refused; within each, the pinned client's fields
// first, then the extensions (the structured-output fields, honoured now, keep their places among
// the extensions below).
constexpr std::array kFields = std::to_array<RequestField>({
    // ---- honoured ----
    {kB | kR, "model", U::kHonoured, "", "must name the served model (404 otherwise); may be absent"},
    {kC, "prompt", U::kHonoured, "", "a string, a one-string array or token ids"},
    {kCh, "messages", U::kHonoured, "", "rendered with the model's chat template"},
    {kB, "max_tokens", U::kHonoured, "", "most tokens to generate (chat: max_completion_tokens wins)"},
    {kCh, "max_completion_tokens", U::kHonoured, "", "most tokens to generate"},
    {kB, "n", U::kHonoured, "", "choices, 1-8, the prompt computed once"},
    {kB | kR, "temperature", U::kHonoured, "", "0-2; 0 is greedy"},
    {kB | kR, "top_p", U::kHonoured, "", "nucleus sampling, (0, 1]"},
    {kB | kR, "presence_penalty", U::kHonoured, "", "OpenAI's, over output tokens"},
    {kB | kR, "frequency_penalty", U::kHonoured, "", "OpenAI's, over output tokens"},
    {kB, "logit_bias", U::kHonoured, "", "token id -> bias added to its logit"},
    {kB | kR, "seed", U::kHonoured, "", "same seed, same tokens (choice i: seed + i)"},
    {kB, "stop", U::kHonoured, "", "up to 16 stop strings, not included in the output"},
    {kB | kR, "stream", U::kHonoured, "", "server-sent events"},
    {kB, "stream_options", U::kHonoured, "", "only with stream: true; see its own fields"},
    {kSo, "include_usage", U::kHonoured, "", "a last chunk with usage"},
    {kC, "logprobs", U::kHonoured, "", "0-20: the sampled token's logprob and that many alternatives"},
    {kCh, "logprobs", U::kHonoured, "", "the sampled token's logprob"},
    {kCh, "top_logprobs", U::kHonoured, "", "0-20 alternatives per token (needs logprobs)"},
    {kC, "echo", U::kHonoured, "", "prepends the prompt; with logprobs, the prompt tokens' logprobs too (the first null)"},
    {kB | kR, "top_k", U::kHonoured, "", "vLLM/SGLang: keep the k most likely tokens (0 or -1: off)"},
    {kB | kR, "min_p", U::kHonoured, "", "vLLM/SGLang: drop tokens below min_p * p(max)"},
    {kB | kR, "repetition_penalty", U::kHonoured, "", "vLLM/SGLang: HF style, over prompt and output"},
    {kB | kR, "ignore_eos", U::kHonoured, "", "vLLM/SGLang: generate past end-of-sequence tokens"},
    {kB, "stop_token_ids", U::kHonoured, "", "vLLM/SGLang: token ids that end the output"},
    {kB, "prompt_logprobs", U::kHonoured, "", "vLLM: 0-20, each prompt token's logprob, rank and that many alternatives (not with stream)"},
    {kB, "speculative", U::kHonoured, "", "Spindle: false keeps the request out of speculative decoding"},
    {kCh, "tools", U::kHonoured, "", "function tools, given to the chat template; calls parsed back (--tool-call-parser)"},
    {kCh, "tool_choice", U::kHonoured, "", "\"auto\", \"none\" (no calls parsed), \"required\" (one or more calls; one with parallel_tool_calls false) and a named function (one call of it), the last two enforced by a grammar of the tools' schemas in every tool-call parser's format"},
    {kCh, "parallel_tool_calls", U::kHonoured, "", "false: at most the first call is returned"},
    {kCh, "reasoning_effort", U::kHonoured, "", "given to the chat template as reasoning_effort"},
    {kCh | kR, "chat_template_kwargs", U::kHonoured, "", "extra chat template variables (enable_thinking, ...)"},
    {kM, "role", U::kHonoured, "", "system, developer (as system), user, assistant, tool; function is refused"},
    {kM, "name", U::kHonoured, "", "given to the Jinja chat template (printed where the template prints it)"},
    {kM, "tool_calls", U::kHonoured, "", "an assistant turn's calls, given to the template with arguments as objects"},
    {kM, "tool_call_id", U::kHonoured, "", "a tool message's call id, given to the template"},
    {kM, "reasoning_content", U::kHonoured, "", "an assistant turn's reasoning, given to the template"},
    {kM, "content", U::kHonoured, "", "a string or text parts"},
    {kP, "type", U::kHonoured, "", "\"text\" only; image, audio, file and refusal parts are refused"},
    {kP, "text", U::kHonoured, "", "the part's text"},
    {kE, "model", U::kHonoured, "", "must name the served model (404 otherwise); may be absent"},
    {kE, "input", U::kHonoured, "", "a string, strings, token ids or lists of them (at most 2048 inputs)"},
    {kE, "encoding_format", U::kHonoured, "", "\"float\" (an array) or \"base64\" (little-endian float32 bytes)"},
    {kE, "dimensions", U::kHonoured, "", "keep the first d values, then L2-normalise again (Matryoshka)"},
    // /v1/responses (responses_request.h): the chat machinery under the Responses API's names
    {kR, "input", U::kHonoured, "", "a string (one user message) or items: messages, function_call, function_call_output, reasoning"},
    {kR, "instructions", U::kHonoured, "", "a system message before the input"},
    {kR, "max_output_tokens", U::kHonoured, "", "most tokens to generate (reasoning included)"},
    {kR, "tools", U::kHonoured, "", "function tools {type, name, description, parameters, strict}, as chat's tools"},
    {kR, "tool_choice", U::kHonoured, "", "\"auto\", \"none\", \"required\" or {type: \"function\", name}, as chat's"},
    {kR, "parallel_tool_calls", U::kHonoured, "", "false: at most the first call is returned"},
    {kR, "text", U::kHonoured, "", "{format}: text, json_object or json_schema {name, schema, description, strict}: the output follows it, as chat's response_format"},
    {kR, "reasoning", U::kHonoured, "", "{effort}: given to the chat template as reasoning_effort; summaries are refused"},
    {kRi, "type", U::kHonoured, "", "message, function_call, function_call_output, reasoning (absent: message)"},
    {kRi, "role", U::kHonoured, "", "a message's role: user, system, developer (as system), assistant"},
    {kRi, "content", U::kHonoured, "", "a message's string or parts; a reasoning item's reasoning_text parts"},
    {kRi, "call_id", U::kHonoured, "", "a function_call's id, which its function_call_output names"},
    {kRi, "name", U::kHonoured, "", "a function_call's function name"},
    {kRi, "arguments", U::kHonoured, "", "a function_call's arguments (JSON text), given to the template as an object"},
    {kRi, "output", U::kHonoured, "", "a function_call_output's result text"},
    {kRp, "type", U::kHonoured, "", "input_text, output_text (an assistant message), reasoning_text (a reasoning item)"},
    {kRp, "text", U::kHonoured, "", "the part's text"},

    // ---- accepted, change nothing ----
    {kB | kE | kR, "user", U::kNoOp, "", "an end-user id for the caller's abuse monitoring; Spindle keeps no per-user state"},
    {kCh | kR, "metadata", U::kNoOp, "", "tags for stored completions and responses (a response repeats them); Spindle stores none"},
    {kCh | kR, "store", U::kNoOp, "false", "Spindle stores no completions or responses, so true is refused"},
    {kCh | kR, "service_tier", U::kNoOp, "", "Spindle has one tier"},
    {kR, "truncation", U::kNoOp, "\"disabled\"", "Spindle never truncates input (a prompt past the context is a 400), so auto is refused"},
    {kRi, "id", U::kNoOp, "", "an earlier output item's id; items are read as sent, none is looked up"},
    {kRi, "status", U::kNoOp, "", "an earlier output item's status; it is not given to the template"},
    {kRi, "summary", U::kNoOp, "", "a reasoning item's summary is not the model's own text, so it is not given to the template"},
    {kRp, "annotations", U::kNoOp, "", "an output_text part's citations; Spindle produces none and reads none"},
    {kRp, "logprobs", U::kNoOp, "", "an earlier output_text part's logprobs; they are not given to the template"},

    // ---- refused until built ----
    {kCh, "functions", U::kRefused, "[]", kNoFunctions},
    {kCh, "function_call", U::kRefused, "\"none\"", kNoFunctions},
    {kCh, "audio", U::kRefused, "", "audio output is not supported"},
    {kCh, "modalities", U::kRefused, "[\"text\"]", "only text output is supported"},
    {kCh, "prediction", U::kRefused, "", "predicted outputs are not built yet"},
    {kCh, "web_search_options", U::kRefused, "", "Spindle does not search the web"},
    {kR, "previous_response_id", U::kRefused, "", "Spindle stores no responses (a stateless /v1/responses): send the whole conversation as input items"},
    {kR, "background", U::kRefused, "false", "background responses need stored responses, which Spindle does not keep"},
    {kR, "include", U::kRefused, "[]", "no additional output data (logprobs, encrypted reasoning, tool results) is built"},
    {kR, "top_logprobs", U::kRefused, "0", "logprobs on /v1/responses are not built yet; use /v1/chat/completions"},
    {kR, "max_tool_calls", U::kRefused, "", "a cap on built-in tool calls is not built"},
    {kR, "prompt", U::kRefused, "", "stored prompt templates are not supported; send instructions and input"},
    {kR, "conversation", U::kRefused, "", "Spindle stores no conversations; send the whole conversation as input items"},
    {kRi, "encrypted_content", U::kRefused, "", "Spindle cannot read another server's encrypted reasoning"},
    {kRp, "image_url", U::kRefused, "", "image inputs are not supported"},
    {kRp, "file_id", U::kRefused, "", "file inputs are not supported"},
    {kRp, "file_data", U::kRefused, "", "file inputs are not supported"},
    {kRp, "detail", U::kRefused, "", "image inputs are not supported"},
    {kB, "response_format", U::kHonoured, "", "text, json_object, or json_schema {name, schema, strict}: the output follows it"},
    {kC, "best_of", U::kRefused, "1", "choosing the best of several candidates is not built (as in vLLM V1)"},
    {kC, "suffix", U::kRefused, "", "fill-in-the-middle is not built yet"},
    // vLLM
    {kB, "structured_outputs", U::kHonoured, "", "vLLM: one of json, regex, choice, grammar, json_object; whitespace_pattern, disable_any_whitespace, disable_additional_properties"},
    {kB, "guided_json", U::kHonoured, "", "vLLM before 0.12: the output follows this JSON Schema"},
    {kB, "guided_regex", U::kHonoured, "", "vLLM before 0.12: the whole output matches this regex"},
    {kB, "guided_choice", U::kHonoured, "", "vLLM before 0.12: the output is one of these strings"},
    {kB, "guided_grammar", U::kHonoured, "", "vLLM before 0.12: the output follows this GBNF grammar"},
    {kB, "guided_decoding_backend", U::kRefused, "", "Spindle has one grammar engine (vLLM dropped the field in 0.12)"},
    {kB, "guided_whitespace_pattern", U::kHonoured, "", "vLLM before 0.12: the whitespace between JSON tokens"},
    {kB, "skip_special_tokens", U::kRefused, "true", "special tokens are always left out of the text"},
    {kB, "include_stop_str_in_output", U::kRefused, "false", "stop strings are always left out of the text"},
    {kB, "min_tokens", U::kRefused, "0", "a minimum output length is not built yet"},
    {kCh, "add_generation_prompt", U::kRefused, "true", "the assistant's turn is always opened"},
    {kCh, "continue_final_message", U::kRefused, "false", "continuing the last message is not built yet"},
    // SGLang (and llama.cpp: grammar, json_schema)
    {kB, "regex", U::kHonoured, "", "SGLang: the whole output matches this regex"},
    {kB, "ebnf", U::kHonoured, "", "SGLang: the output follows this grammar (GBNF syntax)"},
    {kB, "json_schema", U::kHonoured, "", "SGLang (a string), llama.cpp (an object): the output follows this JSON Schema"},
    {kB, "grammar", U::kHonoured, "", "llama.cpp: the output follows this GBNF grammar"},
    // message fields
    {kM, "function_call", U::kRefused, "", kNoFunctions},
    {kM, "refusal", U::kRefused, "", "chat templates do not render a refusal; send it as content"},
    {kM, "audio", U::kRefused, "", "audio is not supported"},
});

}  // namespace

std::span<const RequestField> request_fields() { return kFields; }

const RequestField* find_request_field(FieldScope scope, std::string_view name) {
  for (const auto& f : kFields) {
    if ((f.scopes & scope) != 0 && f.name == name) return &f;
  }
  return nullptr;
}

std::string_view field_use_name(FieldUse use) {
  switch (use) {
    case FieldUse::kHonoured: return "honoured";
    case FieldUse::kNoOp: return "no-op";
    case FieldUse::kRefused: return "refused";
  }
  return "?";
}

void check_request_fields(FieldScope scope, const nlohmann::json& object, const std::string& path) {
  for (const auto& [key, value] : object.items()) {
    const std::string param = path + key;
    const RequestField* f = find_request_field(scope, key);
    if (f == nullptr) bad_request(param, fmt::format("Unrecognized request argument supplied: {}", param));
    if (f->use == FieldUse::kHonoured || value.is_null() || f->accepted.empty()) {
      if (f->use == FieldUse::kRefused && !value.is_null()) {
        bad_request(param, fmt::format("'{}' is not supported: {}", param, f->note));
      }
      continue;
    }
    if (value != nlohmann::json::parse(f->accepted)) {
      bad_request(param, fmt::format("'{}' is not supported{}: {} (only {} is accepted)", param,
                                     f->use == FieldUse::kRefused ? "" : " with this value", f->note, f->accepted));
    }
  }
}

}  // namespace spindle::server
