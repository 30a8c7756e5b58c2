// Speculative decoding, part 4: the speculator, the engine's one owner of speculation policy. Each
// step it asks the proposer (proposer.h) for drafts of the decoding requests that may speculate,
// as many per request as the cost model (cost_model.h) finds worth it at the acceptance measured
// so far; after each verify (verifier.h) it updates that acceptance and the spec metrics; after
// each decode step it gives the cost model the step's time.
//
// Acceptance: per request, per n-gram match length and over every request, as decayed counts of
// accepted drafts and of rejections (a verify that stopped before its last draft); the per-token
// acceptance a = accepted / (accepted + rejected) with a prior (acceptance_of). Engine thread only.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/speculative/cost_model.h"
#include "engine/speculative/proposer.h"

namespace spindle::engine::speculative {

struct SpeculatorOptions {
  Proposer* proposer = nullptr;  // borrowed, outlives the speculator; null: no speculation
  int num_draft_tokens = 0;      // at most, per request and step
  bool speculate_always = false; // every step with every draft (no cost model)
  int max_model_len = 0;
};

class Speculator {
 public:
  // A request's sampler (its params and seed), by Request::id.
  using SamplerOf = std::function<const Sampler&(uint64_t request_id)>;
  Speculator(SpeculatorOptions options, Metrics& metrics, SamplerOf sampler_of);

  bool enabled() const { return options_.proposer != nullptr; }
  // Clears every running request's draft and this step's proposals, then fills Request::draft of
  // the decoding requests that may speculate, with at most the cost model's draft count; true when
  // any got a draft.
  bool propose(std::span<Request* const> running);
  // This step's proposal for a request that got a draft.
  DraftProposal& proposal(uint64_t request_id) { return proposals_.at(request_id); }
  // A verify of num_drafts drafts accepted the first num_accepted (match_length: the n-gram
  // proposal's, 0 for none): the acceptance counts and the spec metrics.
  void record_verify(uint64_t request_id, int num_drafts, int num_accepted, int match_length);
  // A decode step over num_decoding sequences took `seconds` (max_drafts: the most drafts a
  // sequence verified; 0: none speculated).
  void record_step(int max_drafts, int num_decoding, double seconds) { cost_model_.record(max_drafts, num_decoding, seconds); }
  // Per-token acceptance of the request's next drafts: by match length for an n-gram proposal
  // (match_length > 0), else the request's own, both with every request's as a prior.
  double acceptance_of(uint64_t request_id, int match_length) const;
  // The request is finished: its counts and whatever the proposer keeps for it are released.
  void forget(uint64_t request_id);
  void check_integrity() const;

  static constexpr double kAcceptanceDecay = 0.9;  // per verify: about the last 10 verifies count
  // Per verify of a match class: its counts pool every request's drafts, so more of them count.
  static constexpr double kMatchAcceptanceDecay = 0.98;
  // N-gram match lengths 1, 2, ..., kMatchClasses - 1 or more ([0] unused).
  static constexpr int kMatchClasses = 7;

 private:
  struct Counts {
    double accepted = 0, rejected = 0;
    void add(double decay, int num_accepted, double rejection) {
      accepted = decay * accepted + num_accepted;
      rejected = decay * rejected + rejection;
    }
  };
  // Fills proposal_requests_ with the decoding requests that may speculate; returns how many
  // requests decode.
  int gather(std::span<Request* const> running);
  // The drafts a request would get: its proposal's (cheap proposers propose first) or its room.
  int drafts_of(const ProposalRequest& q, bool cheap) const;
  // expected_[k]: the step's expected tokens with at most k drafts per request; false: no drafts.
  bool expect_tokens(int num_decoding, bool cheap);
  void run_proposer();
  static int match_class(int match_length) { return std::min(match_length, kMatchClasses - 1); }

  SpeculatorOptions options_;
  Metrics& metrics_;
  SamplerOf sampler_of_;
  CostModel cost_model_;
  std::unordered_map<uint64_t, DraftProposal> proposals_;  // this step's, by request id
  std::vector<ProposalRequest> proposal_requests_;
  std::vector<double> expected_;                      // scratch (expect_tokens)
  std::unordered_map<uint64_t, Counts> requests_;     // by request id, once it verified
  Counts all_;                                        // every request's verifies: the prior
  std::array<Counts, kMatchClasses> match_{};         // every request's, by match class
};

}  // namespace spindle::engine::speculative
