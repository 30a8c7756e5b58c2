// One generation request as the scheduler sees it: its tokens and its KV pages. What the client
// reads (sampler, detokenizer, stop strings, stream) is the engine's (RequestOutputState,
// engine.h), so the Scheduler can be built and driven with no model and no tokenizer. Owned by
// the Scheduler, touched only by the engine thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "kernels/step_batch.h"
#include "kv/block_table.h"

namespace spindle::engine {

using Clock = std::chrono::steady_clock;

struct Request {
  Request(uint64_t id, std::vector<TokenId> prompt, kv::PageAllocator& allocator);

  uint64_t id;
  std::vector<TokenId> prompt;
  std::vector<TokenId> output;
  kv::BlockTable table;
  // Tokens (of prompt + output, in order) whose K/V are in table's pages.
  int num_computed_tokens = 0;
  int num_cached_prompt_tokens = 0;  // reused from the prefix cache at first admission
  int num_preemptions = 0;
  int num_accepted_draft_tokens = 0;  // output tokens that were drafts the target accepted
  bool preempted = false;            // waits to be recomputed (set by preemption, cleared on admission)
  bool finished = false;             // set by the engine when its last token was accepted
  bool failed = false;               // finished with an error (non-finite logits): its pages are not cached
  bool exceeds_pool = false;         // its context needs more pages than the whole pool (never scheduled again)
  // The prompt's full pages are in the prefix cache (Scheduler::publish_prompts, at prefill end).
  // While false and running, requests waiting with the same prompt wait for them (scheduler.h).
  // Cleared by preemption: a recomputed prompt is published again (a no-op where still cached).
  bool prompt_published = false;
  // Speculative decoding (engine/spec/): draft tokens proposed to follow prompt + output, for the
  // scheduler to verify in the next step (set before schedule(), consumed by it: the scheduler
  // trims them to what the step can take, and they are cleared when the step ends).
  std::vector<TokenId> draft;
  Clock::time_point arrival = Clock::now();

  int num_tokens() const { return static_cast<int>(prompt.size() + output.size()); }
  TokenId token_at(int index) const {
    return index < static_cast<int>(prompt.size()) ? prompt[index] : output[index - prompt.size()];
  }
  // prompt + output
  std::vector<TokenId> all_tokens() const;
};

}  // namespace spindle::engine
