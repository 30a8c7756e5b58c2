#include "server/completion_handler.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <ctime>

#include "engine/dp_group.h"
#include "util/error.h"

namespace spindle::server {

using nlohmann::json;

namespace {

std::string new_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}-{:x}{:06x}", prefix, static_cast<uint64_t>(std::time(nullptr)), counter++);
}

// The token's own bytes (a byte-level token may hold part of a UTF-8 sequence), for "bytes".
std::vector<uint8_t> token_bytes(const engine::DpGroup& engine, TokenId token) {
  std::string raw;
  engine.tokenizer().append_token_bytes(token, /*skip_special_tokens=*/false, raw);
  return std::vector<uint8_t>(raw.begin(), raw.end());
}

std::string token_text(const engine::DpGroup& engine, TokenId token) {
  return engine.tokenizer().decode(std::vector<TokenId>{token}, /*skip_special_tokens=*/false);
}

// Completions logprobs: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
void append_completion_logprobs(const engine::DpGroup& engine, const engine::RequestOutput& out, json& lp,
                                size_t& text_offset) {
  for (const auto& s : out.logprobs) {
    const std::string text = token_text(engine, s.token);
    lp["tokens"].push_back(text);
    lp["token_logprobs"].push_back(s.logprob);
    json top = json::object();
    for (const auto& t : s.top) top[token_text(engine, t.token)] = t.logprob;
    lp["top_logprobs"].push_back(top);
    lp["text_offset"].push_back(text_offset);
    text_offset += text.size();
  }
}

// Chat logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
void append_chat_logprobs(const engine::DpGroup& engine, const engine::RequestOutput& out, json& content) {
  for (const auto& s : out.logprobs) {
    const std::string text = token_text(engine, s.token);
    json top = json::array();
    for (const auto& t : s.top) {
      const std::string tt = token_text(engine, t.token);
      top.push_back({{"token", tt}, {"logprob", t.logprob}, {"bytes", token_bytes(engine, t.token)}});
    }
    content.push_back({{"token", text},
                       {"logprob", s.logprob},
                       {"bytes", token_bytes(engine, s.token)},
                       {"top_logprobs", top}});
  }
}

json empty_completion_logprobs() {
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

json finish_reason_json(const engine::RequestOutput& out) {
  if (!out.finished) return nullptr;
  return std::string(engine::finish_reason_name(out.finish_reason));
}

void check_not_failed(const engine::RequestOutput& out) {
  if (out.finish_reason == engine::FinishReason::kError) {
    throw ApiError(500, "internal_error", "", "generation failed: " + out.error);
  }
}

}  // namespace

Submitted submit_request(engine::DpGroup& engine, GenerationRequest& r) {
  if (!r.model.empty() && r.model != engine.model_name()) {
    throw ApiError(404, "invalid_request_error", "model",
                   fmt::format("the model '{}' does not exist; this server serves '{}'", r.model, engine.model_name()));
  }
  Submitted s;
  std::vector<TokenId> ids;
  const auto& tok = engine.tokenizer();
  try {
    if (r.chat) {
      if (engine.chat_template() == nullptr) bad_request("messages", "this model has no chat template");
      std::vector<tokenizer::ChatMessage> messages;
      for (const auto& m : r.messages) messages.push_back({m.role, m.content});
      s.prompt_text = engine.chat_template()->render(messages, /*add_generation_prompt=*/true);
      ids = tok.encode(s.prompt_text, /*add_special_tokens=*/false);
    } else if (!r.prompt_token_ids.empty()) {
      ids = r.prompt_token_ids;
      for (int t : ids) {
        if (t < 0 || t >= engine.vocab_size()) bad_request("prompt", fmt::format("token id {} is outside the vocabulary", t));
      }
      s.prompt_text = tok.decode(ids, false);
    } else {
      s.prompt_text = r.prompt;
      ids = tok.encode(r.prompt, /*add_special_tokens=*/true);
    }
  } catch (const Error& e) {
    bad_request(r.chat ? "messages" : "prompt", e.message());
  }
  if (ids.empty()) bad_request(r.chat ? "messages" : "prompt", "the prompt is empty");
  for (int t : ids) {
    // A tokenizer may know added tokens beyond the model's embedding rows.
    if (t >= engine.vocab_size()) {
      bad_request(r.chat ? "messages" : "prompt",
                  fmt::format("the prompt holds token {} ('{}'), which this model's embedding does not have", t,
                              tok.id_to_token(t)));
    }
  }
  const int max_len = engine.max_model_len();
  const int n = static_cast<int>(ids.size());
  if (n >= max_len) {
    bad_request(r.chat ? "messages" : "prompt",
                fmt::format("the prompt has {} tokens; this model's context is {} tokens", n, max_len));
  }
  if (r.sampling.max_tokens < 0) r.sampling.max_tokens = max_len - n;  // chat default: fill the context
  if (n + r.sampling.max_tokens > max_len) {
    bad_request(r.chat ? "max_completion_tokens" : "max_tokens",
                fmt::format("the prompt ({} tokens) plus max_tokens ({}) exceed this model's context of {} tokens", n,
                            r.sampling.max_tokens, max_len));
  }
  try {
    engine::validate_sampling_params(r.sampling, engine.vocab_size());
  } catch (const Error& e) {
    bad_request("", e.message());
  }
  s.num_prompt_tokens = n;
  try {
    s.stream = engine.submit(std::move(ids), r.sampling);
  } catch (const engine::EngineOverloaded& e) {
    throw ApiError(503, "server_overloaded", "", e.what());
  }
  return s;
}

json complete(engine::DpGroup& engine, const GenerationRequest& r, Submitted& s,
              const std::function<bool()>& client_alive) {
  std::string text = r.echo ? s.prompt_text : "";
  json completion_lp = empty_completion_logprobs();
  json chat_lp = json::array();
  size_t text_offset = text.size();
  engine::RequestOutput out;
  int num_output_tokens = 0;
  // The client is asked about every 200 ms, whether or not tokens are flowing.
  constexpr auto kProbeInterval = std::chrono::milliseconds(200);
  auto next_probe = std::chrono::steady_clock::now() + kProbeInterval;
  do {
    for (;;) {
      const bool got = s.stream->pop(out, kProbeInterval);
      if (client_alive && std::chrono::steady_clock::now() >= next_probe) {
        next_probe = std::chrono::steady_clock::now() + kProbeInterval;
        if (!client_alive()) {
          s.stream->cancel();
          return nullptr;
        }
      }
      if (got) break;
    }
    check_not_failed(out);
    text += out.text;
    num_output_tokens = out.num_output_tokens;
    if (r.chat) {
      append_chat_logprobs(engine, out, chat_lp);
    } else {
      append_completion_logprobs(engine, out, completion_lp, text_offset);
    }
  } while (!out.finished);

  const Usage usage{s.num_prompt_tokens, num_output_tokens, out.num_accepted_draft_tokens};
  json choice = {{"index", 0}, {"finish_reason", finish_reason_json(out)}};
  const bool want_lp = r.sampling.logprobs;
  if (r.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
    choice["logprobs"] = want_lp ? json{{"content", chat_lp}} : json(nullptr);
  } else {
    choice["text"] = text;
    choice["logprobs"] = want_lp ? completion_lp : json(nullptr);
  }
  return {{"id", new_id(r.chat ? "chatcmpl" : "cmpl")},
          {"object", r.chat ? "chat.completion" : "text_completion"},
          {"created", static_cast<int64_t>(std::time(nullptr))},
          {"model", engine.model_name()},
          {"choices", json::array({choice})},
          {"usage", usage_json(usage)}};
}

void stream_completion(engine::DpGroup& engine, const GenerationRequest& r, Submitted& s,
                       const std::function<bool(const std::string&)>& write) {
  const std::string id = new_id(r.chat ? "chatcmpl" : "cmpl");
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const char* object = r.chat ? "chat.completion.chunk" : "text_completion";
  auto send = [&](const json& chunk) { return write("data: " + to_json_text(chunk) + "\n\n"); };
  auto chunk_with = [&](json choice) {
    return json{{"id", id}, {"object", object}, {"created", created}, {"model", engine.model_name()},
                {"choices", json::array({std::move(choice)})}};
  };

  if (r.chat && !send(chunk_with({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                                  {"finish_reason", nullptr}}))) {
    s.stream->cancel();
    return;
  }
  if (!r.chat && r.echo &&
      !send(chunk_with({{"index", 0}, {"text", s.prompt_text}, {"logprobs", nullptr}, {"finish_reason", nullptr}}))) {
    s.stream->cancel();
    return;
  }
  size_t text_offset = (!r.chat && r.echo) ? s.prompt_text.size() : 0;  // as in complete()
  int num_output_tokens = 0, num_accepted_draft_tokens = 0;
  for (;;) {
    engine::RequestOutput out;
    if (!s.stream->pop(out, std::chrono::milliseconds(1000))) {
      // Nothing yet: probe the connection with an SSE comment so a gone client is noticed.
      if (!write(": keep-alive\n\n")) {
        s.stream->cancel();
        return;
      }
      continue;
    }
    if (out.finish_reason == engine::FinishReason::kError) {
      send(ApiError(500, "internal_error", "", "generation failed: " + out.error).to_json());
      write("data: [DONE]\n\n");
      return;
    }
    num_output_tokens = out.num_output_tokens;
    num_accepted_draft_tokens = out.num_accepted_draft_tokens;
    if (!out.text.empty() || out.finished || !out.logprobs.empty()) {
      json choice = {{"index", 0}, {"finish_reason", finish_reason_json(out)}};
      if (r.chat) {
        choice["delta"] = out.text.empty() ? json::object() : json{{"content", out.text}};
        json lp = json::array();
        append_chat_logprobs(engine, out, lp);
        choice["logprobs"] = r.sampling.logprobs ? json{{"content", lp}} : json(nullptr);
      } else {
        choice["text"] = out.text;
        json lp = empty_completion_logprobs();
        append_completion_logprobs(engine, out, lp, text_offset);
        choice["logprobs"] = r.sampling.logprobs ? lp : json(nullptr);
      }
      if (!send(chunk_with(std::move(choice)))) {
        s.stream->cancel();
        return;
      }
    }
    if (out.finished) break;
  }
  if (r.include_usage) {
    json chunk = {{"id", id}, {"object", object}, {"created", created}, {"model", engine.model_name()},
                  {"choices", json::array()}, {"usage", usage_json({s.num_prompt_tokens, num_output_tokens, num_accepted_draft_tokens})}};
    send(chunk);
  }
  write("data: [DONE]\n\n");
}

}  // namespace spindle::server
