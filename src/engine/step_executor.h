// The step executor: one engine step from the scheduler's plan to the emitted tokens, and the
// overlap schedule. It owns the step in flight (at most one: a launched step not yet collected),
// the device sampling rows, the step timings and the decode log window; it borrows the runner,
// the scheduler, the output processor and the speculator. Engine thread only.
//
// A step: abort cancelled requests -> (collect the step in flight unless this one may overlap
// it) -> drafts (speculator) -> schedule -> finish over-capacity requests -> build the StepBatch
// -> run it with host sampling, or launch it with device sampling (then collect the step before,
// and this one too unless it runs ahead) -> per sequence: sample or verify, emit (output
// processor) -> publish prompts, release finished requests, record the step.
//
// The overlap schedule (StepExecutorOptions::overlap_schedule, SGLang's idea; one step of
// lookahead): where the runner samples on the device, step N+1 is scheduled, built and launched
// while the device still runs step N, and only then are N's tokens collected and emitted. Step N's
// tokens are pending in N+1's plan (Request::num_pending_tokens count in the context; the runner
// has the device copy them into N+1's batch), so the host's work of a step hides behind the
// device's. Outputs do not change: a request that N ends (EOS, a stop string) has computed one more
// token in N+1, which is dropped, and it is released after N+1 is collected; a request whose
// pending token surely ends it (max_tokens, the model length) is not scheduled in N+1
// (Request::hold). Steps whose next draw needs the last token on the host (a penalty of a request
// with a pending token), speculative decoding and host sampling run one step at a time, as without
// it; so do steps with prefill work, and the step after a request arrives or waits (collecting
// first admits it one step sooner): only decode steps run ahead. So do the steps of a batch holding
// a constrained request (structured output): its grammar mask is filled from its matcher when its
// step is built, which needs its last token on the host; its steps equal one-at-a-time ones.
//
// Prompt logprobs and embeddings read rows besides the sampled ones: prompt rows' logits and the
// final normed hidden rows. With host logits they come with run(); with device sampling the step
// asks launch() for host copies (HostRows, taken after the forward and before the sampling) and
// keeps them with the launched step until it is processed, while its sampling rows are drawn on
// the device as in any step (other requests' draws do not depend on whether one asked for rows).
//
// Structured output: host logits get the request's grammar mask between the forward and the
// sampler (engine::Sampler::sample); device sampling gets it in the sampling rows
// (SamplingBatch::masks), uploaded with them after the forward is queued. A constrained request's
// drafts are checked against its matcher before the step is scheduled (constrain_drafts: cut to
// what the grammar accepts), and each verify row i gets the mask of the grammar advanced by drafts
// 1..i, rolled back after the verify (GrammarState::draft_row_mask, end_verify); the tokens the
// verify emits then advance it as sampled ones do. Jump-forward: where the grammar allows one byte
// string next, its tokens (GrammarState::forced_tokens) are the request's drafts for this step,
// with or without a proposer; like every draft they are verified, so outputs equal decoding
// without them (greedy, and seeded sampling draw for draw).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/decode_window.h"
#include "engine/metrics.h"
#include "engine/output_processor.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "engine/speculative/speculator.h"

namespace spindle::engine {

struct StepExecutorOptions {
  bool overlap_schedule = false;  // EngineOptions::overlap_schedule
  int decode_log_interval = 0;    // decode steps between throughput log lines; 0: none
  int max_model_len = 0;
  bool jump_forward = true;       // EngineOptions::jump_forward
};

class StepExecutor {
 public:
  // Borrows everything; allocator: the pool rank the scheduler allocates from.
  StepExecutor(Runner& runner, Scheduler& scheduler, const kv::PageAllocator& allocator, OutputProcessor& output,
               speculative::Speculator& speculator, Metrics& metrics, StepExecutorOptions options);

  void step();
  bool has_in_flight() const { return in_flight_.has_value(); }
  // After a failed step or at shutdown: forgets launched steps (waits for the device's work).
  void drop_in_flight();
  // Every request ends with an error event (kError, `message`) and is released.
  void fail_all(const std::string& message);

  // Jump-forward drafts per request and step, at most (a verify of k drafts computes k + 1 rows).
  static constexpr int kMaxJumpForwardTokens = 16;

 private:
  class Timer;  // seconds since the last lap()
  // A launched step not yet collected (the overlap schedule): its plan and its times so far.
  struct LaunchedStep {
    StepPlan plan;
    StepSeconds seconds;
    int max_drafts = 0;
    Clock::time_point start;
    // Device sampling: its prompt rows' logits and embeddings' final rows, copied at launch
    // (want_host_rows).
    HostRows host_rows;
  };
  // Drafts, then the scheduler's plan into `plan`; false (after collecting and releasing) when it
  // is empty.
  bool schedule(StepPlan& plan);
  // Constrained requests' drafts: a proposer's cut to what the grammar accepts; jump-forward's
  // (the grammar's forced continuation) where there is one (forced_drafts_).
  void constrain_drafts();
  // The proposal a speculating request's drafts came from (forced_proposal_ for jump-forward's).
  const speculative::DraftProposal& proposal_of(const Request& r) const;
  // Whether the next step may be launched before the one in flight is collected.
  bool can_overlap() const;
  // Sets Request::hold on running requests whose pending token surely ends them.
  void hold_finishing_requests(bool hold);
  // Sets step.seconds.decode and step.max_drafts; true when a sequence's drafts come with a draft
  // model's q (its verify needs the target's whole distribution: sampled on the host).
  bool classify(LaunchedStep& step) const;
  // Host logits: runs the step and processes it at once (never with a step in flight).
  void run_on_host(LaunchedStep& step, const StepBatch& batch, Timer& timer);
  // Device sampling: launches the step, collects the one before it, and this one unless it runs ahead.
  void launch(LaunchedStep& step, int num_logit_rows, bool overlap, Timer& timer);
  // Sets step.host_rows' want_ flags: logits for prompt logprobs' prompt rows, final rows for an
  // embedding's pooled rows or its last position.
  void want_host_rows(LaunchedStep& step) const;
  // sampling_'s rows for the plan's logit rows (kernels/sampling_batch.h); prompt rows and an
  // embedding's row get a greedy row whose token nobody reads.
  void fill_sampling_rows(const StepPlan& plan, int num_logit_rows);
  // A constrained request's grammar mask for sampling_.rows[row] (structured output).
  void add_grammar_mask(RequestOutputState& o, size_t row);
  // `mask` ([ceil(vocab / 32)] words; empty: none) for sampling_.rows[row].
  void add_mask(std::span<const uint32_t> mask, size_t row);
  void collect_in_flight();  // finish_step of in_flight_, if any
  // Collects `step` (launched; not in_flight_ any more) and emits its tokens.
  void finish_step(LaunchedStep& step);
  // A step's results. device_rows: the device's samples (null: host logits in `logits`).
  void process_step(LaunchedStep& step, std::span<float> logits, const std::vector<SampledRow>* device_rows);
  // s's prompt rows (host logits: run()'s, or HostRows copied at launch): prompt logprobs, or an
  // embedding's pooled rows.
  void accept_prompt_rows(const ScheduledSequence& s, Request& r, std::span<float> logits);
  void sample_sequence(const ScheduledSequence& s, Request& r, RequestOutputState& o, std::span<float> logits,
                       const std::vector<SampledRow>* device_rows, StepSeconds& t, Timer& timer);
  void verify_sequence(const ScheduledSequence& s, Request& r, RequestOutputState& o, std::span<float> logits,
                       const std::vector<SampledRow>* device_rows, StepSeconds& t, Timer& timer);
  // Prompts published, finished requests released, the step's metrics and cost recorded.
  void end_step(LaunchedStep& step, int num_prompt_tokens, uint64_t num_tokens, Timer& timer);
  void abort_cancelled();
  void finish_over_capacity();
  void release_finished();  // every finished request that no launched step holds
  // The speculator's state, the scheduler's pages and the output state.
  void release(Request* r, bool cache_pages);

  Runner& runner_;
  Scheduler& scheduler_;
  const kv::PageAllocator& allocator_;
  OutputProcessor& output_;
  speculative::Speculator& speculator_;
  Metrics& metrics_;
  StepExecutorOptions options_;
  int vocab_;  // the model's logit row width
  SamplingBatch sampling_;                 // the step's device sampling rows
  std::optional<LaunchedStep> in_flight_;  // the overlap schedule's step on the device
  std::vector<SampledToken> drawn_;        // scratch: a verified sequence's device samples
  std::vector<TokenId> context_;           // scratch: output + the drafts before a row
  std::span<const float> final_rows_;      // the processed step's final hidden rows, when an embedding reads them
  DecodeWindow window_;
  std::unordered_set<uint64_t> forced_drafts_;   // this step's requests drafting jump-forward tokens
  speculative::DraftProposal forced_proposal_;   // theirs: point-mass drafts (q empty)
};

}  // namespace spindle::engine
