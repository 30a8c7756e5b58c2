// The scheduler's two-call contract: schedule() says which tokens of which requests to compute
// this step (engine::Runner builds the step's batch from it), update() applies the step's result.
// It needs no model and no tokenizer: requests are token ids and pages (request.h).
//
// Policy (continuous batching with chunked prefill):
//  1. Running requests first, oldest first (skipping those already finished, which the overlap
//     schedule releases after the step in flight, and those the engine holds: Request::hold). A
//     request's context counts its pending tokens (request.h): a decoding request whose last
//     token is still on the device is scheduled over it. A decoding request needs one token; one still in
//     its prompt gets a chunk of what remains of the token budget (--max-num-batched-tokens).
//     While some running request decodes, prompt tokens (chunks, recomputations, admissions)
//     also share a smaller budget when --max-mixed-prefill-tokens is set: prompts are spread
//     over the steps that decode, so the decode rows ride in steps of a few hundred rows
//     instead of a few steps of thousands of prompt tokens followed by many decode-only steps.
//     When the pool cannot provide a page, the newest running request is preempted: its full
//     pages go to the prefix cache, the rest back to the pool, and it waits (at the front) to be
//     recomputed from its prompt and output so far. Nothing is lost.
//  2. Then waiting requests, first come first served, while there is budget, a running slot
//     (--max-running-requests) and pages: each first reuses its longest cached prefix.
//     Shared prompts are computed once: a waiting request stays waiting (the others behind it
//     are still admitted) while a running request that has not yet published its prompt
//     (Request::prompt_published) holds more full pages of its context than the prefix cache
//     does, and at least half of them (the n choices of one OpenAI request, or identical
//     prompts submitted together; a short shared system prompt is not worth the wait). That
//     request publishes its prompt's full pages when its prefill ends (publish_prompts), and the
//     waiting one is then admitted on them. If it is preempted, aborted or fails first, the
//     waiting one stops waiting for it (it is no longer running or no longer unpublished).
// A request whose whole context (prompt + output) is computed gets a logits row; one that wants
// prompt rows (Request::wants_prompt_rows) gets, before it, a row for each prompt position of the
// step whose row it has not had (never reading cached pages past those: try_admit), and does
// not wait for a shared prompt. A decoding
// request with draft tokens (Request::draft, speculative decoding) computes its last token and
// the drafts in one sequence and gets a logits row for each of them (1 + drafts); after the step
// the engine verifies them, appends the accepted tokens and calls finish_speculation(), which
// rolls back the rejected positions (their pages freed, their slots reused). A request whose
// context needs more pages than the whole pool holds can never run: it is taken out of the queues
// (over_capacity_requests()) for the engine to finish, so it blocks no one behind it.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "kv/prefix_cache.h"

namespace spindle::engine {

// No defaults here: config::resolve() decides them (config/server_config.h).
struct SchedulerOptions {
  int max_num_batched_tokens = 0;
  int max_running_requests = 0;
  int max_model_len = 0;
  // Prompt tokens a step computes at most while some running request decodes (0: no cap beyond
  // max_num_batched_tokens).
  int max_mixed_prefill_tokens = 0;
};

// What is left of one step's budget: `tokens` for every token, `prompt_tokens` for prompt tokens
// (chunks of prompts, recomputations after preemption, admissions) on top of that.
struct StepBudget {
  int tokens = 0;
  int prompt_tokens = 0;
  int prompt_room() const { return tokens < prompt_tokens ? tokens : prompt_tokens; }
};

// One request's share of a step: tokens [num_cached_tokens, num_cached_tokens + num_new_tokens)
// of its prompt + output, on its pages.
struct ScheduledSequence {
  Request* request = nullptr;
  int num_new_tokens = 0;
  int num_cached_tokens = 0;
  int logits_row = -1;  // index into the step's logits (its context is then complete), or -1
  int num_draft_tokens = 0;  // the last num_draft_tokens of the new tokens are Request::draft's
  // Prompt rows (Request::wants_prompt_rows): logit rows [prompt_rows_offset, + num_prompt_rows)
  // hold the rows of prompt positions [first_prompt_row, + num_prompt_rows), right before
  // logits_row; they are the sequence's last query rows but the sampling one.
  int prompt_rows_offset = -1;
  int num_prompt_rows = 0;
  int first_prompt_row = 0;
  // Logit rows from logits_row on: 1 + num_draft_tokens when the context completes, else 0.
  int num_logit_rows() const { return logits_row < 0 ? 0 : 1 + num_draft_tokens; }
  // Every logit row of the sequence: its prompt rows, then its sampling rows.
  int num_all_logit_rows() const { return num_prompt_rows + num_logit_rows(); }
};

struct StepPlan {
  std::vector<ScheduledSequence> sequences;  // in batch order
  int num_tokens = 0;                        // sum of num_new_tokens
  int num_logit_rows = 0;
  int num_preempted = 0;

  bool empty() const { return sequences.empty(); }
};

class Scheduler {
 public:
  Scheduler(kv::PageAllocator& allocator, kv::PrefixCache& prefix_cache, SchedulerOptions options);

  void add(std::unique_ptr<Request> request);
  StepPlan schedule();
  // Marks the scheduled tokens computed, drafts excepted. Call after the forward succeeded.
  void update(const StepPlan& plan);
  // Publishes to the prefix cache the full prompt pages of every planned request whose prompt
  // is now computed (its prefill ended this step) and that has not failed: the pages stay the
  // request's (referenced, so not evictable) and are shared with requests admitted on them.
  // Call after update() and after the step's tokens were sampled (Request::failed is known:
  // the prompt's K/V of a request whose logits were non-finite are never published).
  void publish_prompts(const StepPlan& plan);
  // After a speculating request's accepted tokens were appended to its output: the drafts that
  // were appended had their K/V computed by the step, so every token but the last now is;
  // positions past that (rejected drafts) are rolled back, and pages holding only them are freed.
  void finish_speculation(Request& request);
  // Releases a finished or aborted request's pages (full pages of a finished one go to the prefix
  // cache) and forgets it.
  void release(Request* request, bool cache_pages);
  // The running requests, oldest first.
  std::vector<Request*> running_requests() const { return running_requests_in_order(); }
  // Every request, running, waiting, then over capacity.
  std::vector<Request*> all_requests() const;
  // Running requests that finished this step (to release).
  std::vector<Request*> finished_requests() const;
  // Requests taken out of the queues because their context cannot fit the pool (to finish and
  // release): a waiting prompt longer than the pool, or a running request that grew past it.
  std::vector<Request*> over_capacity_requests() const;

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty() || !over_capacity_.empty(); }
  const kv::PageAllocator& allocator() const { return allocator_; }
  const kv::PrefixCache& prefix_cache() const { return prefix_cache_; }
  // Pages, reference counts and the radix tree are consistent.
  void check_integrity() const;

 private:
  std::vector<Request*> running_requests_in_order() const;  // oldest first
  bool try_schedule_running(Request& r, StepBudget& budget, StepPlan& plan);
  bool try_admit(Request& r, StepBudget& budget, StepPlan& plan);
  // The step's budget: max_num_batched_tokens, and the mixed-step prompt cap when a running
  // request that will be scheduled decodes.
  StepBudget step_budget() const;
  void preempt(Request& r);
  void add_to_plan(Request& r, int num_new_tokens, StepPlan& plan, int num_draft_tokens = 0);
  bool try_schedule_with_draft(Request& r, StepBudget& budget, StepPlan& plan);
  bool fits_pool(const Request& r) const;
  bool waits_for_shared_prompt(const Request& r) const;

  kv::PageAllocator& allocator_;
  kv::PrefixCache& prefix_cache_;
  SchedulerOptions options_;
  std::vector<std::unique_ptr<Request>> running_;   // admission order (oldest first)
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> over_capacity_;
};

}  // namespace spindle::engine
