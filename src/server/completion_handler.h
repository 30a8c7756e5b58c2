// Runs one (chat) completion against the engine and renders OpenAI responses: a whole JSON body,
// or server-sent-event chunks as the engine produces them. Transport-free: the HTTP layer calls
// these from whatever thread it likes; nothing here waits for the engine.
//
// The engine is used only through submit, tokenizer, chat_template, max_model_len, vocab_size,
// model_name and metrics (its health), so a front object with the same methods can stand in for it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/request_stream.h"
#include "server/chat_output.h"
#include "server/openai_protocol.h"
#include "server/relay.h"
#include "tokenizer/incremental_detokenizer.h"

namespace spindle::engine {
class DpGroup;
}

namespace spindle::server {

// A request's choices as submitted to the engine: one engine request per choice, same prompt (the
// prompt's full KV pages are shared through the prefix cache once one choice has computed them).
struct Submitted {
  std::vector<std::shared_ptr<engine::RequestStream>> streams;  // [request.n]
  int num_prompt_tokens = 0;
  std::string prompt_text;  // for echo
  std::vector<TokenId> prompt_ids;  // for prompt logprobs
  OutputParsing parsing;    // chat: how each choice's text is sorted into message fields
};

// Validates a parsed request against the engine (model name, context length, vocabulary),
// tokenizes it and submits its n choices (choice i > 0 with seed + i when a seed is given).
// Throws ApiError (400, 404, 503 when the queue is full: choices already submitted are cancelled;
// 503 once the engine is unhealthy).
Submitted submit_request(engine::DpGroup& engine, GenerationRequest& request);

// The text of a token in a logprob entry: its bytes as they stand inside a decoded text
// (SentencePiece's "▁the" is " the": the decoder's strip of a leading space applies only at the
// start of a whole text, which decoding the token alone wrongly applied). May hold part of a
// UTF-8 character (to_json_text writes it as U+FFFD).
std::string logprob_token_text(const tokenizer::Tokenizer& tokenizer, TokenId token);

// Turns the events of one submitted request into its OpenAI response, without ever waiting: the
// transport calls take_events() (streaming) or poll() (whole) whenever a stream has news (see
// RequestStream::set_notify). Not thread-safe: one caller at a time. Destroying it cancels the
// choices that have not finished (their pages are freed at the engine's next step; relay.h).
class CompletionRelay : public Relay {
 public:
  CompletionRelay(engine::DpGroup& engine, std::shared_ptr<const GenerationRequest> request, Submitted submitted);

  bool streaming() const override { return request_->stream; }

  // Streaming: every SSE event available now, concatenated ("data: {...}\n\n" each; first the role
  // or echo chunks, last the usage chunk when asked and "data: [DONE]\n\n"). "" when nothing new.
  // A generation failure is an error event followed by [DONE] (the status was 200 already).
  std::string take_events() override;
  // Whole response: consumes what is available; true once every choice has finished.
  bool poll() override;
  // After poll() returned true: the response body. Throws ApiError (500) when a choice failed.
  // done(): [DONE] taken, or poll() returned true.
  nlohmann::json response() const override;

 private:
  // An aborted stream's end: an error event naming `reason`, then [DONE].
  std::string abort_events(const std::string& reason) override;

  struct Choice {
    Choice(const tokenizer::Tokenizer& tokenizer, const OutputParsing& parsing);
    std::string text;                // content
    std::string reasoning;           // reasoning_content
    std::vector<chat::ToolCall> calls;
    ChoiceFields fields;             // sorts the engine's text into the three
    nlohmann::json completion_lp;    // {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    nlohmann::json chat_lp;          // [{"token", "logprob", "bytes", "top_logprobs"}]
    size_t text_offset = 0;          // bytes of the choice's text before the next token
    tokenizer::IncrementalDetokenizer offsets;  // replays the engine's detokenization for text_offset
    int num_output_tokens = 0;
    int num_accepted_draft_tokens = 0;  // speculative drafts accepted (usage details)
    int num_cached_prompt_tokens = 0;   // prompt tokens this choice read from the prefix cache
    engine::FinishReason finish_reason = engine::FinishReason::kNone;
    std::string error;               // when a generation failed
    bool prompt_seen = false;        // its first token came (with the prompt logprobs, when asked)
    nlohmann::json vllm_prompt_lp;   // vLLM's prompt_logprobs (GenerationRequest::vllm_prompt_logprobs)
  };

  // At c's first token: the prompt's logprobs into `completion_lp` (echo + logprobs) and
  // c.vllm_prompt_lp (prompt_logprobs.h).
  void take_prompt_logprobs(Choice& c, const engine::RequestOutput& out, nlohmann::json& completion_lp);
  // Streaming echo + logprobs: the echo chunk of choice `index`, with the prompt's logprobs.
  std::string echo_event(size_t index, Choice& c, const engine::RequestOutput& out);

  // Logprob entries of `out` appended to `lp` (completions or chat form), advancing c's offsets.
  void append_logprobs(Choice& c, const engine::RequestOutput& out, nlohmann::json& completion_lp,
                       nlohmann::json& chat_lp);
  nlohmann::json chunk(nlohmann::json choices) const;
  // Streaming: the chat chunks of one event's sorted text (none when it adds nothing).
  std::string chat_events(size_t index, Choice& c, const engine::RequestOutput& o, nlohmann::json chat_lp);
  nlohmann::json message(const Choice& c) const;
  std::string event(const nlohmann::json& j) const;
  nlohmann::json usage() const;

  engine::DpGroup& engine_;
  std::shared_ptr<const GenerationRequest> request_;
  Submitted submitted_;  // its streams moved into the base (streams())
  std::vector<Choice> choices_;
  std::string id_;
  int64_t created_ = 0;
  bool started_ = false;  // streaming: the opening chunks were taken
};

}  // namespace spindle::server
