// POST /tokenize and /detokenize, in vLLM's shapes:
//   /tokenize   {"prompt": "text", "add_special_tokens": true}
//            or {"messages": [...], "add_generation_prompt": true, "tools", "chat_template_kwargs",
//                "add_special_tokens": false}  (the chat template applied, as for a chat completion)
//               either with "return_token_strs" and "model"
//            -> {"count", "max_model_len", "tokens", "token_strs" (null unless asked for)}
//   /detokenize {"tokens": [ids], "model"} -> {"prompt": "text"} (special tokens kept, as vLLM's)
// Throws ApiError: 400 naming the field, 404 for another model, 413 for an oversized body.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace spindle::engine {
class DpGroup;
}

namespace spindle::server {

nlohmann::json tokenize_response(const engine::DpGroup& engine, const std::string& body, size_t max_body_bytes);
nlohmann::json detokenize_response(const engine::DpGroup& engine, const std::string& body, size_t max_body_bytes);

}  // namespace spindle::server
