#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "server/chat_request.h"
#include "server/request_fields.h"

namespace spindle::server {

bool ChatContext::has_tool(const std::string& name) const {
  if (!tools.is_array()) return false;
  return std::any_of(tools.begin(), tools.end(),
                     [&](const nlohmann::ordered_json& tool) { return tool["function"]["name"] == name; });
}

using nlohmann::json;

json ApiError::to_json() const {
  json e = {{"message", what()}, {"type", type_}, {"code", status_}};
  e["param"] = param_.empty() ? json(nullptr) : json(param_);
  return {{"error", e}};
}

void bad_request(const std::string& param, const std::string& message) {
  throw ApiError(400, "invalid_request_error", param, message);
}

const nlohmann::ordered_json* get_member(const nlohmann::ordered_json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

std::string string_member(const nlohmann::ordered_json& o, const char* key, const std::string& path, bool required) {
  const nlohmann::ordered_json* v = get_member(o, key);
  if (!v) {
    if (required) bad_request(path + key, fmt::format("'{}{}' is required", path, key));
    return {};
  }
  if (!v->is_string()) bad_request(path + key, fmt::format("'{}{}' must be a string", path, key));
  return v->get<std::string>();
}

namespace {

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return v.is_number_integer() || v.is_number_unsigned() ? "an integer" : "a number";
  }
}

// Reads optional fields of a JSON object with type and range checks; null means absent.
class Fields {
 public:
  explicit Fields(const json& object) : o_(object) {}

  const json* get(const char* name) const {
    auto it = o_.find(name);
    return it == o_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<double> number(const char* name, double lo, double hi) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) bad_request(name, fmt::format("'{}' must be a number, got {}", name, type_name(*v)));
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
      bad_request(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
    }
    return x;
  }
  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() && !v->is_number_unsigned()) {
      bad_request(name, fmt::format("'{}' must be an integer, got {}", name, type_name(*v)));
    }
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
      bad_request(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
    }
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) bad_request(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
    return x;
  }
  std::optional<bool> boolean(const char* name) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad_request(name, fmt::format("'{}' must be a boolean, got {}", name, type_name(*v)));
    return v->get<bool>();
  }
  std::optional<std::string> string(const char* name) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) bad_request(name, fmt::format("'{}' must be a string, got {}", name, type_name(*v)));
    return v->get<std::string>();
  }

 private:
  const json& o_;
};

constexpr int64_t kMaxTokensLimit = 1 << 20;

// A token id from JSON, range-checked before narrowing (get<int>() would wrap 2^32 + 1 to 1).
int token_id(const json& v, const char* param, const char* what) {
  if (!v.is_number_integer()) bad_request(param, fmt::format("{} must hold only integers", what));
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())) {
    bad_request(param, fmt::format("{} holds {}, which is not a token id", what, v.dump()));
  }
  return v.get<int>();
}

std::vector<std::string> parse_stop(const json* v) {
  std::vector<std::string> out;
  if (!v) return out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const auto& s : *v) {
      if (!s.is_string()) bad_request("stop", "'stop' must be a string or an array of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    bad_request("stop", fmt::format("'stop' must be a string or an array of strings, got {}", type_name(*v)));
  }
  if (out.size() > 16) bad_request("stop", "'stop' may hold at most 16 strings");
  for (const auto& s : out) {
    if (s.empty()) bad_request("stop", "'stop' strings must not be empty");
  }
  return out;
}

// stream, and stream_options (only with stream: true, as OpenAI and vLLM require).
void parse_stream(const Fields& f, GenerationRequest& r) {
  if (auto v = f.boolean("stream")) r.stream = *v;
  const json* so = f.get("stream_options");
  if (!so) return;
  if (!so->is_object()) bad_request("stream_options", "'stream_options' must be an object");
  if (!r.stream) bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
  check_request_fields(kStreamOptions, *so, "stream_options.");
  try {
    if (auto v = Fields(*so).boolean("include_usage")) r.include_usage = *v;
  } catch (const ApiError& e) {
    bad_request("stream_options.include_usage", e.what());
  }
}

// The no-op fields (request_fields.cc) are checked for their type only.
void check_no_op_fields(const json& j) {
  const Fields f(j);
  f.string("user");
  f.string("service_tier");
  if (const json* m = f.get("metadata")) {
    if (!m->is_object()) bad_request("metadata", fmt::format("'metadata' must be an object, got {}", type_name(*m)));
    for (const auto& [key, value] : m->items()) {
      if (!value.is_string()) bad_request("metadata", fmt::format("'metadata' value of '{}' must be a string", key));
    }
  }
}

}  // namespace

void parse_common_fields(const json& j, FieldScope scope, GenerationRequest& r) {
  check_request_fields(scope, j, "");
  check_no_op_fields(j);
  const Fields f(j);
  r.model = f.string("model").value_or("");
  auto& s = r.sampling;
  if (auto n = f.integer("n", 1, kMaxChoices)) r.n = static_cast<int>(*n);
  if (auto v = f.number("temperature", 0, 2)) s.temperature = static_cast<float>(*v);
  if (auto v = f.number("top_p", 0, 1)) {
    if (*v == 0) bad_request("top_p", "'top_p' must be greater than 0");
    s.top_p = static_cast<float>(*v);
  }
  if (auto v = f.integer("top_k", -1, 1 << 20)) s.top_k = static_cast<int>(*v);
  if (auto v = f.number("min_p", 0, 1)) s.min_p = static_cast<float>(*v);
  if (auto v = f.number("presence_penalty", -2, 2)) s.presence_penalty = static_cast<float>(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) s.frequency_penalty = static_cast<float>(*v);
  if (auto v = f.number("repetition_penalty", 1e-3, 100)) s.repetition_penalty = static_cast<float>(*v);
  if (auto v = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*v);
  }
  s.stop = parse_stop(f.get("stop"));
  if (const json* ids = f.get("stop_token_ids")) {
    if (!ids->is_array()) bad_request("stop_token_ids", "'stop_token_ids' must be an array of integers");
    for (const auto& t : *ids) s.stop_token_ids.push_back(token_id(t, "stop_token_ids", "'stop_token_ids'"));
  }
  if (const json* bias = f.get("logit_bias")) {
    if (!bias->is_object()) bad_request("logit_bias", "'logit_bias' must be an object of token id -> bias");
    for (const auto& [key, value] : bias->items()) {
      size_t used = 0;
      int token = -1;
      try {
        token = std::stoi(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || token < 0) {
        bad_request("logit_bias", fmt::format("'logit_bias' key '{}' is not a token id", key));
      }
      if (!value.is_number() || std::fabs(value.get<double>()) > 100) {
        bad_request("logit_bias", fmt::format("'logit_bias' value for {} must be a number in [-100, 100]", key));
      }
      s.logit_bias[token] = value.get<float>();
    }
  }
  if (auto v = f.boolean("ignore_eos")) s.ignore_eos = *v;
  // vLLM: the prompt's logprobs with this many alternatives (its -1, the whole vocabulary, is not).
  if (auto v = f.integer("prompt_logprobs", 0, 20)) {
    s.prompt_logprobs = static_cast<int>(*v);
    r.vllm_prompt_logprobs = true;
  }
  // Spindle extension: false keeps this request out of speculative decoding.
  if (auto v = f.boolean("speculative")) s.speculative = *v;
  parse_stream(f, r);
  if (r.vllm_prompt_logprobs && r.stream) {
    bad_request("prompt_logprobs", "'prompt_logprobs' is not available when 'stream' is true (as in vLLM)");
  }
}

json parse_body(const std::string& body, size_t max_body_bytes) {
  if (body.size() > max_body_bytes) {
    throw ApiError(413, "invalid_request_error", "",
                   fmt::format("request body is {} bytes; the limit is {}", body.size(), max_body_bytes));
  }
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad_request("", "request body is not valid JSON");
  if (!j.is_object()) bad_request("", fmt::format("request body must be a JSON object, got {}", type_name(j)));
  return j;
}

GenerationRequest parse_completion_request(const std::string& body, size_t max_body_bytes) {
  const json j = parse_body(body, max_body_bytes);
  GenerationRequest r;
  parse_common_fields(j, kCompletionBody, r);
  const Fields f(j);
  const json* prompt = f.get("prompt");
  if (!prompt) bad_request("prompt", "'prompt' is required");
  if (prompt->is_string()) {
    r.prompt = prompt->get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    r.prompt = (*prompt)[0].get<std::string>();
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()) {
    for (const auto& t : *prompt) r.prompt_token_ids.push_back(token_id(t, "prompt", "a token-id prompt"));
  } else {
    bad_request("prompt", "'prompt' must be a string, a one-string array or an array of token ids (batches are not supported)");
  }
  if (auto v = f.integer("max_tokens", 1, kMaxTokensLimit)) r.sampling.max_tokens = static_cast<int>(*v);
  if (auto v = f.integer("logprobs", 0, 20)) {
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = static_cast<int>(*v);
  }
  if (auto v = f.boolean("echo")) r.echo = *v;
  if (r.echo && r.sampling.logprobs) {  // the prompt's entries too, with as many alternatives
    r.sampling.prompt_logprobs = std::max(r.sampling.prompt_logprobs, r.sampling.top_logprobs);
  }
  // best_of is refused unless 1 (request_fields.cc); OpenAI's rule best_of >= n still holds.
  if (f.integer("best_of", 1, 1) && r.n > 1) bad_request("best_of", "'best_of' must be at least 'n'");
  r.constraint = parse_output_constraint(j, body);
  return r;
}

GenerationRequest parse_chat_request(const std::string& body, size_t max_body_bytes) {
  const json j = parse_body(body, max_body_bytes);
  GenerationRequest r;
  r.chat = true;
  parse_common_fields(j, kChatBody, r);
  const Fields f(j);
  // Parsed again keeping the client's key order: tools and arguments reach the template as sent.
  parse_chat_context(nlohmann::ordered_json::parse(body), r);
  auto max_tokens = f.integer("max_completion_tokens", 1, kMaxTokensLimit);
  if (!max_tokens) max_tokens = f.integer("max_tokens", 1, kMaxTokensLimit);
  r.sampling.max_tokens = max_tokens ? static_cast<int>(*max_tokens) : -1;  // -1: up to the context
  if (auto v = f.boolean("logprobs")) r.sampling.logprobs = *v;
  if (auto v = f.integer("top_logprobs", 0, 20)) {
    if (!r.sampling.logprobs) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.sampling.top_logprobs = static_cast<int>(*v);
  }
  r.constraint = parse_output_constraint(j, body);
  return r;
}

std::string to_json_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage_json(const Usage& u) {
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}}};
  if (u.accepted_draft_tokens > 0) j["completion_tokens_details"] = {{"accepted_prediction_tokens", u.accepted_draft_tokens}};
  return j;
}

}  // namespace spindle::server
