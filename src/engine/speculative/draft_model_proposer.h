// DraftModelProposer: a smaller model with the same tokenizer proposes by decoding ahead. It runs
// through its own engine::Runner (its own backends, the same device as the target) on its own KV
// pool (planned next to the target's: kv/capacity_planner.h draft_kv_bytes_per_token), one
// Request of its own per target request: the same prompt, the target's output, then its drafts.
//
// Each propose(): every request's draft context is synced with the target's (positions past the
// longest common prefix are rolled back: its rejected drafts), then round 0 computes what the
// draft has not yet seen (the target's accepted tokens; the whole prompt the first time, chunked
// by the step budget, no proposal until it is complete) and draws d_1; rounds 1..k-1 compute one
// token each (the previous draft) and draw the next. A greedy request's drafts are the draft
// model's argmax (q a point mass); a sampling request's are drawn from the draft's processed
// distribution q (same parameters, a generator seeded from the request's seed), q kept for the
// rejection rule. A request whose draft pages run out gets no proposal and its draft state is
// dropped (it catches up later).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/runner.h"
#include "engine/speculative/proposer.h"
#include "kernels/sampling_batch.h"
#include "kv/page_pool.h"

namespace spindle::engine::speculative {

class DraftModelProposer final : public Proposer {
 public:
  // The runner's KV caches must be bound to `pool`'s (rank 0). max_num_batched_tokens bounds the
  // tokens of one draft step (round 0's catch-up over all requests).
  DraftModelProposer(Runner& runner, kv::PagePool& pool, int max_num_batched_tokens);
  ~DraftModelProposer() override;

  const char* name() const override { return "draft"; }
  void propose(std::span<const ProposalRequest> requests) override;
  void forget(uint64_t request_id) override;
  void check_integrity() const override;
  int num_states() const { return static_cast<int>(states_.size()); }

 private:
  struct State {
    std::unique_ptr<Request> request;  // the draft's view: prompt, output + drafts, its pages
    std::unique_ptr<Sampler> sampler;  // the request's parameters, the draft's own generator
  };
  struct Active {
    State* state = nullptr;
    const ProposalRequest* proposal = nullptr;
  };
  State& state_for(const ProposalRequest& p);
  // One draft step over `sequences`; appends a draft token to each one that got a logits row.
  // active[k] is the request that owns logit row k of the plan.
  void run_round(std::vector<Active>& active, StepPlan& plan);

  Runner& runner_;
  kv::PageAllocator& allocator_;
  int max_num_batched_tokens_;
  std::unordered_map<uint64_t, State> states_;
  SamplingBatch sampling_;
};

}  // namespace spindle::engine::speculative
