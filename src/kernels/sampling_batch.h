// SamplingBatch: what a device needs to choose the next token of every logit row of a step
// without the logits leaving it (kernels/cuda/device_sampler.h samples it on CUDA; the CPU samples
// host logits with engine::Sampler). Plain data, C++17 (CUDA .cu files include it).
//
// Per logit row, in the order of the step's logit rows: the processing engine::Sampler applies,
// in the same order (sampler.h): the grammar mask (structured output: a token whose bit is clear
// gets -inf before anything else looks at the row) -> repetition, presence and frequency penalties -> logit bias ->
// (greedy: argmax) -> temperature -> top-k -> top-p -> min-p -> a draw. The draw is a function of
// (seed, counter, token) only: the same request seed and the same number of tokens drawn before
// give the same token whatever else is in the batch.
#pragma once

#include <cstdint>
#include <vector>

#include "util/token_id.h"

namespace spindle {

// At most this many alternatives per row (OpenAI's top_logprobs limit).
inline constexpr int kMaxTopLogprobs = 20;
// Candidate slots a row's top_logprobs search returns: the top ones plus ties at the boundary.
inline constexpr int kTopLogprobCandidates = kMaxTopLogprobs + 44;

struct SamplingRow {
  float temperature = 1.0f;  // <= 0: greedy (argmax after penalties and bias)
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_offset = 0;  // the row's entries in penalty_tokens
  int32_t penalty_count = 0;
  int32_t bias_offset = 0;     // the row's entries in biases
  int32_t bias_count = 0;
  int32_t top_logprobs = 0;    // [0, kMaxTopLogprobs] alternatives wanted
  int32_t want_logprob = 0;    // 1: the chosen token's raw log-probability
  uint64_t seed = 0;
  uint64_t counter = 0;        // tokens this request drew before
  // The row's grammar mask: masks[mask_offset .. + ceil(vocab / 32)), bit (id % 32) of word
  // id / 32 set when id is allowed; -1: no mask (every token allowed).
  int32_t mask_offset = -1;
};

// A token the request has seen (prompt or output), listed once per row, with how often it occurs
// in the output (presence and frequency penalties count output tokens only).
struct PenaltyToken {
  TokenId token = 0;
  int32_t output_count = 0;
};

struct LogitBiasEntry {
  TokenId token = 0;
  float bias = 0.0f;
};

struct SamplingBatch {
  std::vector<SamplingRow> rows;
  std::vector<PenaltyToken> penalty_tokens;
  std::vector<LogitBiasEntry> biases;
  std::vector<uint32_t> masks;  // the rows' grammar masks, ceil(vocab / 32) words each

  void clear() {
    rows.clear();
    penalty_tokens.clear();
    biases.clear();
    masks.clear();
  }
};

// The overlap schedule (engine/engine.h) builds a step before the last step's tokens are back
// from the device: query row `row` of the new step's batch takes the token chosen for logit row
// `source` of the last queued sampling (DeviceOps::take_pending_tokens).
struct PendingToken {
  int32_t row = 0;
  int32_t source = 0;
};

// One row's result. logprob and the alternatives are raw log-probabilities (log_softmax of the
// logits before penalties), as OpenAI and vLLM report them; alternatives best first.
struct SampledRow {
  TokenId token = 0;
  bool non_finite = false;  // the row held NaN or Inf: `token` means nothing (SampledToken's rule)
  float logprob = 0.0f;
  std::vector<TokenId> top_tokens;
  std::vector<float> top_logprobs;
};

}  // namespace spindle
