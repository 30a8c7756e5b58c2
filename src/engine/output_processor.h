// The output processor: what happens to a request's tokens once they are drawn. It owns every
// request's RequestOutputState (sampler, detokenizer, stop policies, stream transformers, stream)
// and turns an accepted token into one event: the token appended to Request::output, its text
// detokenized (whole UTF-8 sequences only) and passed through the stop policies, its logprob,
// whether the request finished and why (decided here alone, from the request's stop policies:
// stop_policy.h), then the event through the request's stream transformers to its stream.
// Engine thread only, but make_state(), which reads only immutable state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/grammar_state.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/sampler.h"
#include "engine/stop_policy.h"
#include "engine/stream_transformer.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace spindle::engine {

// What the client of a request reads, kept next to (not inside) the scheduler's Request.
struct RequestOutputState {
  RequestOutputState(SamplingParams params, uint64_t seed, std::shared_ptr<RequestStream> stream,
                     const tokenizer::Tokenizer& tokenizer);

  Sampler sampler;
  std::shared_ptr<RequestStream> stream;
  tokenizer::IncrementalDetokenizer detokenizer;
  // Asked in order about each token (stop_policy.h); the first verdict at the earliest point wins.
  std::vector<std::unique_ptr<StopPolicy>> stop_policies;
  // Every event passes through these, in order, before the stream (stream_transformer.h).
  std::vector<std::unique_ptr<StreamTransformer>> transformers;
  std::optional<Clock::time_point> last_token_time;
  // Structured output (SamplingParams::grammar): the tokenizer's grammar view (set by make_state)
  // and the request's matcher, made on the engine thread by OutputProcessor::add (a fork of the
  // grammar's root there). Null when unconstrained.
  std::shared_ptr<const grammar::TokenizerInfo> grammar_tokenizer;
  std::unique_ptr<GrammarState> grammar;
  // Prompt logprobs computed so far, handed out with the first token (accept_token).
  std::vector<PromptLogprob> prompt_logprobs;
  // An embedding's pooled prompt rows so far (SamplingParams::pooling): mean: their sum; first
  // token: row 0. [hidden]
  std::vector<double> pooled;
};

class OutputProcessor {
 public:
  // model_eos_ids: the model's own end-of-sequence ids (config.json's eos_token_id, or the GGUF's);
  // the tokenizer's eos_ids() (tokenizer_config.json's eos_token, generation_config.json's
  // eos_token_id) join them. Borrows the tokenizer and the metrics. vocab_size: the width of a
  // logit row (the grammar masks' width; 0: the tokenizer's vocabulary).
  OutputProcessor(const tokenizer::Tokenizer& tokenizer, std::vector<TokenId> model_eos_ids, int max_model_len,
                  Metrics& metrics, int vocab_size = 0);

  // Any thread. A request's state with its stop policies: its stop token ids (end-of-sequence
  // ids unless ignore_eos, and its stop_token_ids), its stop strings (when it has any), its
  // grammar (GrammarStopPolicy, when constrained: the first make_state of a constrained request
  // builds the tokenizer's grammar view, ~1 s for 128k tokens), its length.
  std::unique_ptr<RequestOutputState> make_state(SamplingParams params, uint64_t seed,
                                                 std::shared_ptr<RequestStream> stream) const;

  // Engine thread: takes the state in (a constrained request's matcher is made here).
  void add(uint64_t request_id, std::unique_ptr<RequestOutputState> state);
  // Any thread: the tokenizer's grammar view, built on first use (GrammarTokenizer).
  std::shared_ptr<const grammar::TokenizerInfo> grammar_tokenizer() const { return grammar_tokenizer_.get(); }
  const tokenizer::Tokenizer& tokenizer() const { return tokenizer_; }
  RequestOutputState& at(uint64_t request_id) { return *states_.at(request_id); }
  const RequestOutputState& at(uint64_t request_id) const { return *states_.at(request_id); }
  void erase(uint64_t request_id) { states_.erase(request_id); }

  // A drawn token of r (non_finite: the request ends with an error instead): appended to
  // r.output, one event pushed; r.finished set when it ends the request. A constrained request's
  // matcher advances by it first; a token its grammar refuses (possible only where the grammar
  // allowed no token of the vocabulary at all) ends the request with an error.
  void accept_token(Request& r, RequestOutputState& o, const SampledToken& sampled);
  // Prompt rows of r (SamplingParams::prompt_logprobs): rows [n, vocab] host logits of prompt
  // positions [first_position, first_position + n); each gives the logprob of the prompt token
  // after it. Advances r.num_prompt_rows_done to first_position + n.
  void accept_prompt_rows(Request& r, RequestOutputState& o, std::span<const float> rows, int vocab,
                          int first_position);
  // An embedding request's prompt rows (mean or first-token pooling): rows [n, hidden] final
  // normed hidden states of positions [first_position, first_position + n), pooled into o.pooled.
  void accept_pooled_rows(Request& r, RequestOutputState& o, std::span<const float> rows, int hidden,
                          int first_position);
  // An embedding request's last prompt position computed (SamplingParams::embedding): its final
  // normed hidden state [hidden], pooled with the rows before, ends r with one event (an error
  // when not finite).
  void accept_embedding(Request& r, RequestOutputState& o, std::span<const float> hidden);
  // A verify's tokens (the accepted drafts first, then one more), until one ends the request.
  void accept_verified(Request& r, RequestOutputState& o, std::span<const SampledToken> tokens, int num_accepted_drafts);
  // Final events of requests the engine ends: cancelled by the client (kAbort; sets r.finished),
  // a failed step (kError), grown to the whole KV cache of capacity_tokens (kLength; kError when
  // the prompt alone does not fit).
  void finish_aborted(Request& r);
  void finish_failed(const Request& r, const std::string& message);
  void finish_over_capacity(const Request& r, int capacity_tokens);

  // Tokens appended to outputs since the processor was made (a step's count is a difference).
  uint64_t num_accepted_tokens() const { return num_accepted_tokens_; }

 private:
  // The event's text and whether (and why) the token ends the request.
  void decide(Request& r, RequestOutputState& o, TokenId token, RequestOutput& out);
  // The text a finishing request still holds back (a partial UTF-8 sequence, the start of a
  // possible stop string), cut at a stop string if one completes.
  static std::string flush_held_text(RequestOutputState& o);
  // Through the request's transformers to its stream.
  static void push(RequestOutputState& o, RequestOutput& out);
  void fail_non_finite(Request& r, RequestOutputState& o);
  // Ends r with an error event (no token emitted); r.failed when its KV is not to be cached.
  void fail(Request& r, RequestOutputState& o, std::string message, bool failed);
  void count_finished(const Request& r, Clock::time_point now);

  const tokenizer::Tokenizer& tokenizer_;
  std::vector<TokenId> model_eos_ids_;
  int max_model_len_;
  Metrics& metrics_;
  std::unordered_map<uint64_t, std::unique_ptr<RequestOutputState>> states_;  // by Request::id
  GrammarTokenizer grammar_tokenizer_;
  GrammarMatchers grammar_matchers_;  // engine thread
  uint64_t num_accepted_tokens_ = 0;
};

}  // namespace spindle::engine
