// Per-request sampling parameters (the OpenAI and vLLM knobs) and their validation.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/pooling_config.h"
#include "util/token_id.h"

namespace spindle::grammar {
class CompiledGrammar;
struct LazyArming;
}

namespace spindle::engine {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int top_k = 0;                    // 0 or -1: disabled
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]: drop tokens below min_p * p(max)
  float repetition_penalty = 1.0f;  // > 0; HF style, over prompt and output tokens
  float presence_penalty = 0.0f;    // [-2, 2]; OpenAI style, over output tokens
  float frequency_penalty = 0.0f;   // [-2, 2]; OpenAI style, over output tokens
  std::map<int, float> logit_bias;  // token id -> added to its logit ([-100, 100])
  std::optional<uint64_t> seed;     // same seed, same tokens
  std::vector<std::string> stop;    // stop strings (not included in the output)
  std::vector<TokenId> stop_token_ids;  // besides the model's EOS ids
  int max_tokens = 16;              // >= 1
  bool ignore_eos = false;
  int top_logprobs = 0;             // alternatives to report per token, [0, 20]
  bool logprobs = false;            // report the chosen token's log-probability
  // Prompt logprobs: -1 none; k in [0, 20]: every prompt token after the first gets its raw
  // log-probability, rank and k alternatives (RequestOutput::prompt_logprobs, with the first
  // token). Such a request computes every prompt position's logits row: it reads no prefix-cache
  // pages past the positions whose rows it has (scheduler.h). On a device that samples, the rows
  // are copied to the host at launch (engine/step_executor.h).
  int prompt_logprobs = -1;
  // An embedding request (/v1/embeddings): no token is drawn; the step that computes its last
  // prompt position ends it with RequestOutput::embedding, the final normed hidden states pooled
  // by `pooling` (last token; mean over the prompt; the first token), not L2-normalised. Mean and
  // first-token pooling read every prompt position's row (prompt rows, as prompt_logprobs: no
  // cached pages); the rows reach the host as prompt_logprobs' do.
  bool embedding = false;
  PoolingConfig::Mode pooling = PoolingConfig::Mode::kLastToken;
  bool speculative = true;          // may use speculative decoding where the server runs it
  // Structured output (grammar/): every token is drawn from the tokens this grammar allows next
  // (the mask applies first: before penalties, bias, temperature, top-k, top-p, min-p, and the
  // logprobs reported are those of the masked distribution); the request ends ("stop") when the
  // grammar is complete and nothing but end-of-sequence may follow, or when an allowed EOS is
  // drawn. Null: unconstrained. Constrained requests' drafts are checked against the grammar, its
  // forced continuations are drafts too (jump-forward), and they never run ahead in the overlap
  // schedule (engine.h).
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // With `grammar`: when it arms (grammar/lazy_matcher.h): free text until a trigger (a tool call's
  // opening marker under tool_choice "auto") or until the content begins after a reasoning section;
  // null: from the first token. The unarmed mask allows every token the arming accepts.
  std::shared_ptr<const grammar::LazyArming> grammar_arming;
  // Special tokens left out of the text (false: kept, for tool-call formats whose markers are
  // special tokens, e.g. Mistral's [TOOL_CALLS]); end-of-sequence tokens are never text.
  bool skip_special_tokens = true;

  bool greedy() const { return temperature == 0.0f || top_k == 1; }
  // A penalty reads the tokens drawn so far (so the next draw needs the last one on the host).
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

// Throws spindle::Error naming the field and the accepted range.
void validate_sampling_params(const SamplingParams& params, int vocab_size);

}  // namespace spindle::engine
