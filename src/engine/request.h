// One generation request as the scheduler sees it: its tokens and its KV pages. What the client
// reads (sampler, detokenizer, stop policies, stream) is the output processor's (RequestOutputState,
// output_processor.h), so the Scheduler can be built and driven with no model and no tokenizer. Owned by
// the Scheduler, touched only by the engine thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "kernels/step_batch.h"
#include "kv/block_table.h"

namespace spindle::engine {

using Clock = std::chrono::steady_clock;
inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// token_at() of a token still being chosen on the device (Request::num_pending_tokens).
inline constexpr TokenId kPendingToken = -1;

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
  // Speculative decoding (engine/speculative/): draft tokens proposed to follow prompt + output, for the
  // scheduler to verify in the next step (set before schedule(), consumed by it: the scheduler
  // trims them to what the step can take, and they are cleared when the step ends).
  std::vector<TokenId> draft;
  // The overlap schedule (step_executor.h): tokens a launched step is still choosing on the device for this
  // request, after its output; they count in num_tokens(), so the next step can be scheduled over
  // them before they are known. Each is the token of logit row pending_logit_row of the step in
  // flight (with one step of lookahead there is at most one such step, and a request has at most
  // one pending token when a step is scheduled). The engine appends them to output as they arrive.
  int num_pending_tokens = 0;
  int pending_logit_row = -1;
  // Launched steps it is in that are not yet collected (its Request must outlive them).
  int steps_in_flight = 0;
  // Not scheduled this step (set by the engine before schedule()): its pending token ends it for
  // sure (max_tokens or the model length), so computing past it would be thrown away.
  bool hold = false;
  // Prompt rows (SamplingParams::prompt_logprobs): the step computes a logits row for every prompt
  // position p < prompt.size() - 1 (the distribution of token p + 1) besides the sampling row.
  // Positions [0, num_prompt_rows_done) have had theirs; admission reads no prefix-cache page
  // past them (Scheduler::try_admit), so preemption and a warm cache recompute what is missing.
  bool wants_prompt_rows = false;
  int num_prompt_rows_done = 0;
  // Whether every prompt row it wants is computed.
  bool prompt_rows_complete() const {
    return !wants_prompt_rows || num_prompt_rows_done >= static_cast<int>(prompt.size()) - 1;
  }
  Clock::time_point arrival = Clock::now();
  bool queue_time_observed = false;  // its arrival-to-first-schedule time is in the metrics

  // prompt + output + pending tokens: the context the scheduler plans for.
  int num_tokens() const { return static_cast<int>(prompt.size() + output.size()) + num_pending_tokens; }
  // prompt + output: the tokens known on the host.
  int num_known_tokens() const { return static_cast<int>(prompt.size() + output.size()); }
  // Token `index` of prompt + output; kPendingToken for a pending one (index >= num_known_tokens()).
  TokenId token_at(int index) const {
    if (index < static_cast<int>(prompt.size())) return prompt[index];
    const size_t i = static_cast<size_t>(index) - prompt.size();
    return i < output.size() ? output[i] : kPendingToken;
  }
  // prompt + output (the known tokens)
  std::vector<TokenId> all_tokens() const;
};

}  // namespace spindle::engine
