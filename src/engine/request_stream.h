// The channel between the engine thread (producer) and the one client of a request (consumer:
// an HTTP handler or `spindle generate`). Thread-safe; the consumer may cancel, and the engine
// frees the request's pages at its next step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace spindle::engine {

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error"

// One event of a request's output. Text deltas never split a UTF-8 sequence or a stop string.
struct RequestOutput {
  std::string text;                     // new text since the last event (the content)
  // New reasoning text (reasoning_content) since the last event: text a stream transformer (a
  // reasoning parser, stream_transformer.h) moved out of `text`; empty without one.
  std::string reasoning_text;
  std::vector<TokenId> tokens;              // new tokens since the last event
  std::vector<SampledToken> logprobs;   // one per token when logprobs were requested
  // SamplingParams::prompt_logprobs: in the first token's event, one per prompt token after the
  // first (prompt token i + 1's under the model's row of position i).
  std::vector<PromptLogprob> prompt_logprobs;
  // SamplingParams::embedding: the pooled final normed hidden state [hidden_size] (not
  // L2-normalised), in the one event that ends the request.
  std::vector<float> embedding;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  int num_prompt_tokens = 0;
  int num_output_tokens = 0;            // so far
  int num_cached_prompt_tokens = 0;     // served from the prefix cache
  int num_accepted_draft_tokens = 0;    // so far: output tokens that were speculative drafts the target accepted
  std::string error;                    // when finish_reason is kError
};

class RequestStream {
 public:
  void push(RequestOutput output);
  // Waits up to `timeout` for the next event; false on timeout.
  bool pop(RequestOutput& out, std::chrono::milliseconds timeout);
  // Blocks until the next event.
  RequestOutput pop();
  // Takes the next event if one is queued; never waits.
  bool try_pop(RequestOutput& out);
  void cancel();
  bool cancelled() const;
  // An event-driven consumer's wake-up: called on the producer's thread after every push() (and
  // once at once when events are already queued), outside the stream's lock; it must only post
  // work elsewhere, never block or call back into the producer. An empty function removes it.
  void set_notify(std::function<void()> notify);

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestOutput> queue_;
  bool cancelled_ = false;
  std::function<void()> notify_;
};

}  // namespace spindle::engine
