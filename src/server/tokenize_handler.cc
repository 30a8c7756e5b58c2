#include "server/tokenize_handler.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "engine/dp_group.h"
#include "server/chat_request.h"
#include "server/openai_protocol.h"
#include "util/error.h"

namespace spindle::server {

using nlohmann::json;

namespace {

void check_keys(const json& body, std::initializer_list<std::string_view> keys, std::string_view route) {
  for (const auto& [key, value] : body.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      bad_request(key, fmt::format("Unrecognized request argument supplied: {} ({} takes {})", key, route,
                                   fmt::join(keys, ", ")));
    }
  }
}

void check_model(const engine::DpGroup& engine, const json& body) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_string()) bad_request("model", "'model' must be a string");
  if (it->get<std::string>() != engine.model_name()) {
    throw ApiError(404, "invalid_request_error", "model",
                   fmt::format("the model '{}' does not exist; this server serves '{}'", it->get<std::string>(),
                               engine.model_name()));
  }
}

bool flag(const json& body, const char* key, bool fallback) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) bad_request(key, fmt::format("'{}' must be a boolean", key));
  return it->get<bool>();
}

// The chat form: the prompt a chat completion with these messages would get.
std::string chat_prompt(const engine::DpGroup& engine, const json& body, const std::string& text) {
  check_keys(body, {"model", "messages", "add_generation_prompt", "continue_final_message", "add_special_tokens",
                    "chat_template_kwargs", "reasoning_effort", "tools", "return_token_strs"}, "/tokenize with messages");
  if (flag(body, "continue_final_message", false)) {
    bad_request("continue_final_message", "continuing the last message is not built yet");
  }
  if (engine.chat_template() == nullptr) bad_request("messages", "this model has no chat template");
  GenerationRequest r;
  r.chat = true;
  parse_chat_context(nlohmann::ordered_json::parse(text), r);
  try {
    return render_chat(*engine.chat_template(), r, flag(body, "add_generation_prompt", true));
  } catch (const Error& e) {
    bad_request("messages", e.message());
  }
}

}  // namespace

json tokenize_response(const engine::DpGroup& engine, const std::string& text, size_t max_body_bytes) {
  const json body = parse_body(text, max_body_bytes);
  check_model(engine, body);
  const bool chat = body.contains("messages");
  std::string prompt;
  if (chat) {
    prompt = chat_prompt(engine, body, text);
  } else {
    check_keys(body, {"model", "prompt", "add_special_tokens", "return_token_strs"}, "/tokenize");
    auto it = body.find("prompt");
    if (it == body.end() || !it->is_string()) bad_request("prompt", "'prompt' (a string) or 'messages' is required");
    prompt = it->get<std::string>();
  }
  const auto& tok = engine.tokenizer();
  const std::vector<TokenId> ids = tok.encode(prompt, flag(body, "add_special_tokens", !chat));
  json strs = nullptr;
  if (flag(body, "return_token_strs", false)) {
    strs = json::array();
    for (TokenId id : ids) strs.push_back(tok.id_to_token(id));
  }
  return {{"count", ids.size()}, {"max_model_len", engine.max_model_len()}, {"tokens", ids}, {"token_strs", strs}};
}

json detokenize_response(const engine::DpGroup& engine, const std::string& text, size_t max_body_bytes) {
  const json body = parse_body(text, max_body_bytes);
  check_keys(body, {"model", "tokens"}, "/detokenize");
  check_model(engine, body);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) bad_request("tokens", "'tokens' must be an array of token ids");
  std::vector<TokenId> ids;
  const int vocab = engine.tokenizer().vocab_size();
  for (const auto& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
      bad_request("tokens", fmt::format("'tokens' holds {}, which is not a token id of this model (0..{})", t.dump(),
                                        vocab - 1));
    }
    ids.push_back(t.get<TokenId>());
  }
  return {{"prompt", engine.tokenizer().decode(ids, /*skip_special_tokens=*/false)}};
}

}  // namespace spindle::server
