// Turns one row of logits into the next token, per request (DESIGN.md: engine/).
//
// Order of operations (as vLLM): the grammar mask (structured output) -> repetition, presence and frequency penalties -> logit bias ->
// (greedy: argmax) -> temperature -> top-k -> top-p -> min-p -> draw from the renormalised
// distribution with the request's own generator. Without top-k and top-p nothing is sorted (a
// full sort of a 128k vocabulary per token was the cost of plain temperature sampling). Log-probabilities are reported from the raw
// model distribution (log_softmax of the unprocessed logits), as OpenAI and vLLM do; under a
// grammar mask, of the masked logits (vLLM applies its bitmask to the logits its sampler then
// reads): a refused token's logprob is -inf and it is never listed among the alternatives.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/sampling_params.h"
#include "kernels/sampling_batch.h"

namespace spindle::engine {

struct TokenLogprob {
  TokenId token = 0;
  float logprob = 0.0f;
};

// One candidate of a processed distribution (after penalties, bias, temperature, top-k, top-p,
// min-p): its token and its probability among the kept candidates (they sum to 1).
struct TokenProb {
  TokenId token = 0;
  double prob = 0.0;
};

struct SampledToken {
  TokenId token = 0;
  // The row held NaN or Inf (the model's output is garbage): no token was drawn, and the engine
  // ends the request with an error instead of emitting one.
  bool non_finite = false;
  float logprob = 0.0f;                 // raw log-probability of `token` (when requested)
  std::vector<TokenLogprob> top;        // top_logprobs alternatives, best first
};

class Sampler {
 public:
  // default_seed is used when params.seed is unset (the engine passes a fresh random value).
  Sampler(SamplingParams params, uint64_t default_seed);

  // logits: [vocab] of this request's last position; modified in place (scratch). A row with a
  // NaN or infinite value gives non_finite (checked before anything else).
  // Test-only fault: switches().sampler_fault (SPINDLE_SAMPLER_FAULT) ="nan:SEED" fills the row with NaN, "throw:SEED"
  // throws spindle::Error (a failed step, as a device error is), for requests of that seed.
  // prompt and output: this request's tokens so far (penalties look at them).
  // mask: the grammar's [ceil(vocab / 32)] words (grammar::Matcher::fill_mask), applied first
  // (apply_grammar_mask); empty: unconstrained. The mask must allow at least one token.
  SampledToken sample(std::span<float> logits, std::span<const TokenId> prompt, std::span<const TokenId> output,
                      std::span<const uint32_t> mask = {});

  // Speculative verification (engine/speculative/): the processed distribution this sampler would draw
  // from for `logits` (penalties and bias applied in place, as sample() does), the kept candidates
  // only; greedy: the argmax with probability 1.
  std::vector<TokenProb> distribution(std::span<float> logits, std::span<const TokenId> prompt,
                                      std::span<const TokenId> output);
  // One uniform draw in [0, 1) from this request's generator (the same stream sample() uses).
  double uniform();
  // A draw from `dist` (probabilities summing to ~1) with one uniform from the generator.
  TokenId draw_from(std::span<const TokenProb> dist);

  const SamplingParams& params() const { return params_; }
  // The seed of this request's draws (params.seed, else the engine's default for it).
  uint64_t seed() const { return seed_; }

 private:
  void apply_penalties(std::span<float> logits, std::span<const TokenId> prompt, std::span<const TokenId> output);
  int draw(std::span<float> logits);
  // The kept candidates (order_) with their unnormalised weights (probs_), returning their sum.
  double candidates(std::span<float> logits);
  double candidates_unsorted(std::span<float> logits);  // no top-k / top-p: no sort of the vocabulary

  SamplingParams params_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::vector<int> order_;      // scratch: candidate ids
  std::vector<int> counts_;     // scratch: output token counts
  std::vector<double> probs_;   // scratch: candidate weights
};

// No NaN and no infinity in the row.
bool all_finite(std::span<const float> logits);

// logits[i] = -inf for every i whose bit in mask (bit i % 32 of word i / 32) is clear; returns
// how many tokens the mask allows within the row. mask holds at least ceil(logits.size() / 32) words.
int apply_grammar_mask(std::span<float> logits, std::span<const uint32_t> mask);

// log_softmax of one row, for the top `k` entries (best first) and for `token`.
void raw_logprobs(std::span<const float> logits, TokenId token, int k, SampledToken& out);

// A prompt token's log-probability (prompt logprobs: completions' echo + logprobs, vLLM's
// prompt_logprobs) under the raw distribution of the position before it: its rank (1 + the
// tokens whose logit is larger) and the top `k` alternatives, best first.
struct PromptLogprob {
  TokenId token = 0;
  float logprob = 0.0f;
  int rank = 0;
  std::vector<TokenLogprob> top;
};
// logits: [vocab], the model's row of the position before `token`.
PromptLogprob prompt_logprob(std::span<const float> logits, TokenId token, int k);

// Sets batch.rows[row] to what a device sampler needs for one request (kernels/sampling_batch.h):
// its parameters, seed and counter (tokens it drew before), and appends its penalty list (every
// distinct prompt and output token with its output count, when a penalty is set) and its logit
// bias. batch.rows must already have row + 1 entries.
void add_sampling_row(const SamplingParams& params, uint64_t seed, uint64_t counter, std::span<const TokenId> prompt,
                      std::span<const TokenId> output, size_t row, SamplingBatch& batch);
// A device sampler's result as the engine's SampledToken.
SampledToken to_sampled_token(const SampledRow& row);

// The device sampler's contract on the host (kernels/sampling_batch.h): logits [rows, vocab] (the
// first batch.rows.size() rows; modified in place), one result per row. The same processing as
// Sampler (penalties from the row's list, then the bias; greedy: argmax, the lowest id on ties;
// else the kept set of Sampler::distribution) and a draw that is a function of (seed, counter,
// token) only: the Gumbel-max draw over the kept set with the CUDA sampler's noise. Not bit for bit
// the CUDA sampler's (its top-p sums in fixed point). engine::Runner's sample_on_host uses it.
void sample_rows_on_host(std::span<float> logits, int vocab, const SamplingBatch& batch, std::vector<SampledRow>& out);

}  // namespace spindle::engine
