// The OpenAI-compatible wire format: parsing and validating request bodies, building responses.
//
// Parsing never trusts the client: every field is type-checked and range-checked, and a problem
// becomes an ApiError (HTTP status, OpenAI error type, the offending parameter, a message that
// says what was wrong). The server turns it into {"error": {...}} with that status. Every key of the
// body, of each message and text part and of stream_options is first checked against the field
// lists (request_fields.h): a refused or unknown field is a 400 naming it, never ignored.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "server/request_fields.h"
#include "server/structured_output.h"

namespace spindle::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string param, const std::string& message)
      : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  nlohmann::json to_json() const;

 private:
  int status_;
  std::string type_;
  std::string param_;
};

// 400 invalid_request_error naming the parameter.
[[noreturn]] void bad_request(const std::string& param, const std::string& message);

// Readers of a request object's members, `path` being the object's parameter path with a trailing
// dot ("messages[2]."): the member, or nullptr when absent or null; a string member, "" when absent
// and not required, else a 400 naming path + key ("is required", "must be a string").
const nlohmann::ordered_json* get_member(const nlohmann::ordered_json& o, const char* key);
std::string string_member(const nlohmann::ordered_json& o, const char* key, const std::string& path, bool required);

struct ChatMessage {
  std::string role;     // system | user | assistant | tool (developer is read as system)
  std::string content;  // text parts joined; "" for an assistant turn with null content
};

// kRequired: one or more calls of the tools (one when parallel_tool_calls is false); kNamed: one
// call of ChatContext::tool_choice_name. Both are enforced by the tool-call grammar.
enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

// Chat: what the Jinja chat template is given (apply_chat_template's arguments) and how tool
// calls are read back (chat_request.h parses them).
struct ChatContext {
  // messages as transformers passes them: role, content (a string), name, and tool_calls (with
  // each call's JSON-string arguments as an object), tool_call_id, reasoning_content where sent.
  nlohmann::ordered_json template_messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null, or the request's tools (function dicts), in the client's key order
  // chat_template_kwargs (enable_thinking, ...) and reasoning_effort: extra template variables.
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;  // kNamed: the function's name (one of the tools')
  bool parallel_tool_calls = true;  // false: at most one call is returned
  bool has_tool_turns = false;      // a tool message or an assistant turn with tool_calls
  bool has_tools() const { return !tools.is_null(); }
  // Whether one of the tools is the function `name` (tools holds {"type", "function": {"name", ...}}
  // dicts, as both chat and responses requests store them).
  bool has_tool(const std::string& name) const;
};

// The most choices one request may ask for ("n").
inline constexpr int kMaxChoices = 8;

struct GenerationRequest {
  bool chat = false;
  int n = 1;                             // choices, 1..kMaxChoices, each its own engine request
  std::string model;                     // may be empty: the served model
  std::string prompt;                    // completions: the prompt text
  std::vector<TokenId> prompt_token_ids;     // completions: a prompt given as token ids
  std::vector<ChatMessage> messages;     // chat
  ChatContext chat_context;              // chat
  engine::SamplingParams sampling;
  bool stream = false;
  bool include_usage = false;            // stream_options.include_usage
  bool echo = false;                     // completions: prepend the prompt
  // sampling.prompt_logprobs >= 0 (prompt_logprobs.h): completions' echo + logprobs puts the
  // prompt's entries in "logprobs"; vllm_prompt_logprobs: vLLM's prompt_logprobs field was sent
  // (answered per choice for completions, once at the top for chat).
  bool vllm_prompt_logprobs = false;
  // Structured output (structured_output.h); submit_request compiles it into sampling.grammar.
  OutputConstraint constraint;
};

// A request body as a JSON object: 413 past max_body_bytes, 400 when it is not a JSON object.
nlohmann::json parse_body(const std::string& body, size_t max_body_bytes);

// The fields completions, chat and responses share (model, sampling, stream), after every key of
// `j` is checked against the lists at `scope` (so a field not listed there never reaches a parser).
// Throws ApiError.
void parse_common_fields(const nlohmann::json& j, FieldScope scope, GenerationRequest& r);

// Body of POST /v1/completions or /v1/chat/completions. Throws ApiError.
GenerationRequest parse_completion_request(const std::string& body, size_t max_body_bytes);
GenerationRequest parse_chat_request(const std::string& body, size_t max_body_bytes);

// Serialises a response body or event. Invalid UTF-8 (a request path echoed in an error, say)
// becomes U+FFFD rather than an exception that would take the server down.
std::string to_json_text(const nlohmann::json& j);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  // Output tokens that were speculative drafts the model accepted; > 0 adds OpenAI's
  // completion_tokens_details.accepted_prediction_tokens.
  int accepted_draft_tokens = 0;
  // Of prompt_tokens, those read from the prefix cache instead of computed: OpenAI's
  // prompt_tokens_details.cached_tokens (always present). With n > 1 choices the prompt is
  // counted once, and so is this: the fewest any choice read (the choices after the first share
  // the first one's prompt pages, but that sharing is inside this one request).
  int cached_prompt_tokens = 0;
};
nlohmann::json usage_json(const Usage& usage);

}  // namespace spindle::server
