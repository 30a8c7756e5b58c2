// Speculative decoding, part 1: proposers. A Proposer guesses the next tokens of decoding
// requests; the engine verifies the guesses in the next target step (engine/speculative/verifier.h)
// and keeps only what the target model itself would have produced.
//
// Two proposers: NgramProposer (prompt lookup: the tokens that followed an earlier occurrence of
// the context's last n tokens) and DraftModelProposer (a smaller model with the same tokenizer,
// run by its own engine::Runner on its own KV pages).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"

namespace spindle::engine::speculative {

// What a proposer guessed for one request.
struct DraftProposal {
  std::vector<TokenId> tokens;  // the draft tokens, in order (empty: no guess this step)
  // Per draft token, the processed distribution q it was drawn from, for the rejection rule (a
  // draft model sampling a non-greedy request); empty: every token was chosen deterministically
  // (q is a point mass), and verification compares it with the target's own draw.
  std::vector<std::vector<TokenProb>> q;
  // The n-gram proposer: how many context tokens matched (its acceptance is measured per match
  // length); 0: no such measure (a draft model).
  int match_length = 0;

  void clear() {
    tokens.clear();
    q.clear();
    match_length = 0;
  }
};

// One request a proposer is asked about. Its context is prompt + output, all but the last token
// computed by the target (a decoding request).
struct ProposalRequest {
  const Request* request = nullptr;
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;          // the request's sampling seed (a draft model derives its own from it)
  int max_draft_tokens = 0;   // >= 1: the proposal may hold at most this many tokens
  DraftProposal* out = nullptr;  // cleared by the caller
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual const char* name() const = 0;
  // Proposing costs next to nothing (no model): the engine then proposes first and asks the cost
  // model only about the requests that got drafts.
  virtual bool cheap() const { return false; }
  // Fills every request's proposal (or leaves it empty). One call per engine step, for the
  // step's decoding requests that may speculate.
  virtual void propose(std::span<const ProposalRequest> requests) = 0;
  // The request is finished or aborted: whatever the proposer keeps for it is released.
  virtual void forget(uint64_t /*request_id*/) {}
  // Throws spindle::Error when its own state (a draft model's KV pages) is inconsistent.
  virtual void check_integrity() const {}
};

}  // namespace spindle::engine::speculative
