#include "engine/step_executor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "engine/speculative/verifier.h"
#include "util/error.h"

namespace spindle::engine {

class StepExecutor::Timer {
 public:
  double lap() {
    const auto now = Clock::now();
    const double s = seconds_between(last_, now);
    last_ = now;
    return s;
  }

 private:
  Clock::time_point last_ = Clock::now();
};

StepExecutor::StepExecutor(Runner& runner, Scheduler& scheduler, const kv::PageAllocator& allocator,
                           OutputProcessor& output, speculative::Speculator& speculator, Metrics& metrics,
                           StepExecutorOptions options)
    : runner_(runner),
      scheduler_(scheduler),
      allocator_(allocator),
      output_(output),
      speculator_(speculator),
      metrics_(metrics),
      options_(options),
      vocab_(runner.model().config().vocab_size) {}

void StepExecutor::step() {
  Timer timer;
  LaunchedStep step;
  step.start = Clock::now();
  abort_cancelled();
  // Only decode steps run ahead: a step with prefill work is collected before the next is
  // scheduled, so a request arriving during it is admitted right after it (a prefill step takes
  // tens of ms; scheduling behind it delayed arrivals by one, run -13: TTFT p50 C=32 176 vs 126 ms).
  const bool overlap = can_overlap() && (!in_flight_ || in_flight_->seconds.decode);
  if (!overlap) collect_in_flight();
  if (!schedule(step.plan)) return;
  step.seconds.schedule = timer.lap();
  const StepBatch& batch = runner_.build(step.plan);
  const bool q_drafts = classify(step);
  // Drafts drawn from a draft model's q need the target's whole processed distribution for the
  // rejection rule: those steps sample on the host, even where the device could.
  if (!runner_.samples_on_device() || q_drafts) {
    run_on_host(step, batch, timer);
  } else {  // the logits stay on the device; only the chosen tokens come back
    launch(step, batch.num_logit_rows(), overlap, timer);
  }
}

bool StepExecutor::schedule(StepPlan& plan) {
  speculator_.propose(scheduler_.running_requests());
  constrain_drafts();
  hold_finishing_requests(true);
  plan = scheduler_.schedule();
  hold_finishing_requests(false);
  if (plan.num_preempted > 0) {
    metrics_.update([&](MetricsSnapshot& s) { s.preemptions_total += plan.num_preempted; });
  }
  const auto now = Clock::now();
  for (const auto& s : plan.sequences) {
    if (s.request->queue_time_observed) continue;
    s.request->queue_time_observed = true;
    metrics_.observe_queue_time(seconds_between(s.request->arrival, now));
  }
  finish_over_capacity();
  if (plan.empty()) {
    collect_in_flight();  // nothing to launch behind it
    release_finished();
    return false;
  }
  return true;
}

void StepExecutor::constrain_drafts() {
  forced_drafts_.clear();
  for (Request* r : scheduler_.running_requests()) {
    RequestOutputState& o = output_.at(r->id);
    if (!o.grammar) continue;
    if (!r->draft.empty()) {
      // A proposer's drafts, cut to what the grammar accepts. Point-mass drafts (q empty) end
      // before the first refused token: its row's draw is the masked draw either way. A draft
      // model's end after it: its rejection (p = 0 under the mask) draws from the residual
      // max(0, p - q), which keeps the rule lossless; a cut before it would not (q's mass on
      // refused tokens would turn into plain draws from p).
      const int n = o.grammar->num_allowed_drafts(r->draft);
      const bool q_drafts = !speculator_.proposal(r->id).q.empty();
      r->draft.resize(std::min(r->draft.size(), static_cast<size_t>(n) + (q_drafts ? 1 : 0)));
    }
    if (!options_.jump_forward || r->preempted || r->finished || r->num_computed_tokens != r->num_tokens() - 1 ||
        !o.sampler.params().speculative) {
      continue;
    }
    // Jump-forward: the grammar's forced continuation as drafts (they replace a proposer's: a
    // draft the grammar accepts starts with the same bytes). A verify emits up to k + 1 tokens and
    // writes k positions past the context.
    const int room = std::min({kMaxJumpForwardTokens, o.sampler.params().max_tokens - static_cast<int>(r->output.size()) - 1,
                               options_.max_model_len - r->num_tokens()});
    std::vector<TokenId> forced = o.grammar->forced_tokens(output_.tokenizer(), room);
    if (forced.empty()) continue;
    r->draft = std::move(forced);
    forced_drafts_.insert(r->id);
  }
}

const speculative::DraftProposal& StepExecutor::proposal_of(const Request& r) const {
  if (forced_drafts_.count(r.id) != 0) return forced_proposal_;
  return speculator_.proposal(r.id);
}

bool StepExecutor::can_overlap() const {
  if (!options_.overlap_schedule || !runner_.samples_on_device() || speculator_.enabled()) return false;
  // A waiting request (one just arrived, say) is admitted a step sooner when the step in flight is
  // collected first: with the next step scheduled behind it, its prefill would start one whole
  // step later (bench/e2e_gpu run -12: TTFT p50 at C=32 180 ms overlapped vs 126 ms one at a time).
  if (scheduler_.num_waiting() > 0) return false;
  for (const Request* r : scheduler_.running_requests()) {
    const RequestOutputState& o = output_.at(r->id);
    // Its next draw's penalties need the pending token on the host.
    if (r->num_pending_tokens > 0 && o.sampler.params().has_penalties()) return false;
    // Its next mask is the grammar's state after its last token: steps run one at a time while a
    // constrained request runs (its mask is filled when its step is launched, every token known).
    if (o.grammar) return false;
  }
  return true;
}

void StepExecutor::hold_finishing_requests(bool hold) {
  for (Request* r : scheduler_.running_requests()) {
    if (!hold) {
      r->hold = false;
      continue;
    }
    if (r->num_pending_tokens == 0) continue;
    const int outputs = static_cast<int>(r->output.size()) + r->num_pending_tokens;
    r->hold = outputs >= output_.at(r->id).sampler.params().max_tokens || r->num_tokens() >= options_.max_model_len;
  }
}

bool StepExecutor::classify(LaunchedStep& step) const {
  // A decode step: every sequence computes its last token (and its drafts, when it speculates).
  bool decode = true, q_drafts = false;
  for (const auto& s : step.plan.sequences) {
    decode = decode && s.logits_row >= 0 && s.num_new_tokens - s.num_draft_tokens == 1;
    if (s.num_draft_tokens > 0) {
      step.max_drafts = std::max(step.max_drafts, s.num_draft_tokens);
      q_drafts = q_drafts || !proposal_of(*s.request).q.empty();
    }
  }
  step.seconds.decode = decode;
  return q_drafts;
}

void StepExecutor::run_on_host(LaunchedStep& step, const StepBatch& batch, Timer& timer) {
  SPINDLE_CHECK(!in_flight_, "a host-sampled step with a step in flight");  // can_overlap
  step.seconds.build = timer.lap();
  const std::span<float> logits = runner_.run(batch);
  // Embedding requests read the final hidden rows, which the next forward overwrites.
  final_rows_ = {};
  for (const auto& s : step.plan.sequences) {
    if ((s.logits_row >= 0 || s.num_prompt_rows > 0) && output_.at(s.request->id).sampler.params().embedding) {
      final_rows_ = runner_.final_rows(batch);
      break;
    }
  }
  step.seconds.forward = timer.lap();
  scheduler_.update(step.plan);
  process_step(step, logits, nullptr);
}

void StepExecutor::want_host_rows(LaunchedStep& step) const {
  HostRows& h = step.host_rows;
  h.want_logits = h.want_final_rows = false;
  for (const auto& s : step.plan.sequences) {
    const bool embedding = output_.at(s.request->id).sampler.params().embedding;
    if (s.num_prompt_rows > 0) (embedding ? h.want_final_rows : h.want_logits) = true;
    if (embedding && s.logits_row >= 0) h.want_final_rows = true;
  }
}

void StepExecutor::launch(LaunchedStep& step, int num_logit_rows, bool overlap, Timer& timer) {
  fill_sampling_rows(step.plan, num_logit_rows);
  want_host_rows(step);
  step.seconds.build = timer.lap();
  runner_.launch(sampling_, step.host_rows.wanted() ? &step.host_rows : nullptr);
  step.seconds.forward = timer.lap();
  scheduler_.update(step.plan);
  for (const auto& s : step.plan.sequences) {
    Request& r = *s.request;
    ++r.steps_in_flight;
    if (s.logits_row >= 0 && s.num_draft_tokens == 0) {  // its next token is chosen on the device
      ++r.num_pending_tokens;
      r.pending_logit_row = s.logits_row;
    }
  }
  const bool decode = step.seconds.decode;
  std::optional<LaunchedStep> last = std::exchange(in_flight_, std::move(step));
  if (last) {  // collected while the step just launched runs
    metrics_.update([](MetricsSnapshot& s) { ++s.overlapped_steps_total; });
    finish_step(*last);
  }
  if (!overlap || !decode) collect_in_flight();
}

void StepExecutor::fill_sampling_rows(const StepPlan& plan, int num_logit_rows) {
  sampling_.clear();
  sampling_.rows.resize(static_cast<size_t>(num_logit_rows));
  SamplingRow unread;  // prompt rows and embeddings: read from HostRows; the cheapest draw
  unread.temperature = 0.0f;
  for (const auto& s : plan.sequences) {
    for (int i = 0; i < s.num_prompt_rows; ++i) sampling_.rows[static_cast<size_t>(s.prompt_rows_offset + i)] = unread;
    if (s.logits_row < 0) continue;
    const Request& r = *s.request;
    const Sampler& sampler = output_.at(r.id).sampler;
    if (sampler.params().embedding) {  // it draws no token (sample_sequence)
      sampling_.rows[static_cast<size_t>(s.logits_row)] = unread;
      continue;
    }
    // Tokens drawn before row 0: the known ones and the pending ones (which no penalty reads:
    // can_overlap), then row i draws the token after draft i, as non-speculative decoding would.
    const uint64_t drawn = r.output.size() + static_cast<uint64_t>(r.num_pending_tokens);
    if (s.num_draft_tokens == 0) {
      add_sampling_row(sampler.params(), sampler.seed(), drawn, r.prompt, r.output, static_cast<size_t>(s.logits_row),
                       sampling_);
      add_grammar_mask(output_.at(r.id), static_cast<size_t>(s.logits_row));
      continue;
    }
    context_.assign(r.output.begin(), r.output.end());
    RequestOutputState& o = output_.at(r.id);
    for (int i = 0; i < s.num_logit_rows(); ++i) {
      if (i > 0) context_.push_back(r.draft[static_cast<size_t>(i - 1)]);
      const size_t row = static_cast<size_t>(s.logits_row + i);
      add_sampling_row(sampler.params(), sampler.seed(), drawn + static_cast<uint64_t>(i), r.prompt, context_, row,
                       sampling_);
      // Row i's mask: the grammar after drafts 1..i (each accepted: constrain_drafts; device
      // verifies carry point-mass drafts only).
      if (o.grammar) add_mask(o.grammar->draft_row_mask(r.draft, static_cast<size_t>(i)), row);
    }
    if (o.grammar) o.grammar->end_verify();
  }
}

void StepExecutor::add_grammar_mask(RequestOutputState& o, size_t row) {
  if (!o.grammar) return;
  // A row without drafts (fill_sampling_rows masks draft rows) and no pending token (nor run
  // ahead: can_overlap), so the matcher stands after the request's last token.
  const std::span<const uint32_t> mask = o.grammar->fill_mask();
  // A mask allowing nothing is left off: the token drawn is refused by the matcher, which ends
  // the request with an error (OutputProcessor::accept_token).
  if (o.grammar->mask_allows_any()) add_mask(mask, row);
}

void StepExecutor::add_mask(std::span<const uint32_t> mask, size_t row) {
  if (mask.empty()) return;
  sampling_.rows[row].mask_offset = static_cast<int32_t>(sampling_.masks.size());
  sampling_.masks.insert(sampling_.masks.end(), mask.begin(), mask.end());
}

void StepExecutor::collect_in_flight() {
  if (!in_flight_) return;
  LaunchedStep step = std::move(*in_flight_);
  in_flight_.reset();
  finish_step(step);
}

void StepExecutor::finish_step(LaunchedStep& step) {
  Timer timer;
  const std::vector<SampledRow>& rows = runner_.collect();
  step.seconds.device = timer.lap();
  final_rows_ = step.host_rows.final_rows;
  process_step(step, step.host_rows.logits, &rows);
}

void StepExecutor::process_step(LaunchedStep& step, std::span<float> logits, const std::vector<SampledRow>* device_rows) {
  Timer timer;
  const uint64_t tokens_before = output_.num_accepted_tokens();
  int num_prompt_tokens = 0;
  for (const auto& s : step.plan.sequences) {
    Request& r = *s.request;
    if (device_rows != nullptr) --r.steps_in_flight;
    num_prompt_tokens += std::max(0, std::min(s.num_cached_tokens + s.num_new_tokens - s.num_draft_tokens,
                                              static_cast<int>(r.prompt.size())) -
                                         s.num_cached_tokens);
    if (s.num_prompt_rows > 0 && !r.finished) accept_prompt_rows(s, r, logits);
    if (s.logits_row < 0) continue;
    if (device_rows != nullptr && s.num_draft_tokens == 0) --r.num_pending_tokens;
    // Finished (a stop in the step before, aborted, over capacity) while this step was in flight:
    // the token it computed is dropped.
    if (r.finished) continue;
    RequestOutputState& o = output_.at(r.id);
    timer.lap();
    if (s.num_draft_tokens > 0) {
      verify_sequence(s, r, o, logits, device_rows, step.seconds, timer);
    } else {
      sample_sequence(s, r, o, logits, device_rows, step.seconds, timer);
    }
  }
  end_step(step, num_prompt_tokens, output_.num_accepted_tokens() - tokens_before, timer);
}

void StepExecutor::accept_prompt_rows(const ScheduledSequence& s, Request& r, std::span<float> logits) {
  RequestOutputState& o = output_.at(r.id);
  const size_t n = static_cast<size_t>(s.num_prompt_rows), first = static_cast<size_t>(s.prompt_rows_offset);
  if (o.sampler.params().embedding) {
    const size_t hidden = static_cast<size_t>(runner_.model().config().hidden_size);
    SPINDLE_CHECK(final_rows_.size() >= (first + n) * hidden, "request {}: pooled rows without the step's hidden rows",
                  r.id);
    output_.accept_pooled_rows(r, o, final_rows_.subspan(first * hidden, n * hidden), static_cast<int>(hidden),
                               s.first_prompt_row);
    return;
  }
  const size_t vocab = static_cast<size_t>(vocab_);
  SPINDLE_CHECK(logits.size() >= (first + n) * vocab, "request {}: prompt rows without the step's logits", r.id);
  output_.accept_prompt_rows(r, o, logits.subspan(first * vocab, n * vocab), vocab_, s.first_prompt_row);
}

void StepExecutor::sample_sequence(const ScheduledSequence& s, Request& r, RequestOutputState& o,
                                   std::span<float> logits, const std::vector<SampledRow>* device_rows, StepSeconds& t,
                                   Timer& timer) {
  if (o.sampler.params().embedding) {  // its final rows: run_on_host's, or HostRows (want_host_rows)
    const size_t hidden = static_cast<size_t>(runner_.model().config().hidden_size);
    SPINDLE_CHECK(final_rows_.size() >= (static_cast<size_t>(s.logits_row) + 1) * hidden,
                  "request {}: an embedding without its step's hidden rows", r.id);
    output_.accept_embedding(r, o, final_rows_.subspan(static_cast<size_t>(s.logits_row) * hidden, hidden));
    t.output += timer.lap();
    return;
  }
  SampledToken sampled;
  if (device_rows != nullptr) {
    sampled = to_sampled_token((*device_rows)[static_cast<size_t>(s.logits_row)]);
  } else {
    const std::span<float> row = logits.subspan(static_cast<size_t>(s.logits_row) * vocab_, vocab_);
    std::span<const uint32_t> mask;
    if (o.grammar) {  // the grammar's mask, between the forward and the sampler (see add_grammar_mask)
      mask = o.grammar->fill_mask();
      if (!o.grammar->mask_allows_any()) mask = {};
    }
    sampled = o.sampler.sample(row, r.prompt, r.output, mask);
  }
  t.sample += timer.lap();
  output_.accept_token(r, o, sampled);
  t.output += timer.lap();
}

void StepExecutor::verify_sequence(const ScheduledSequence& s, Request& r, RequestOutputState& o,
                                   std::span<float> logits, const std::vector<SampledRow>* device_rows, StepSeconds& t,
                                   Timer& timer) {
  const bool forced = forced_drafts_.count(r.id) != 0;
  speculative::DraftProposal& proposal = forced ? forced_proposal_ : speculator_.proposal(r.id);
  speculative::Verified v;
  if (device_rows != nullptr) {
    drawn_.clear();
    for (int i = 0; i < s.num_logit_rows(); ++i) {
      drawn_.push_back(to_sampled_token((*device_rows)[static_cast<size_t>(s.logits_row + i)]));
    }
    v = speculative::verify_sampled(drawn_, r.draft);
  } else {
    proposal.tokens = r.draft;  // the scheduler may have kept fewer than were proposed
    if (!proposal.q.empty()) proposal.q.resize(r.draft.size());
    const size_t offset = static_cast<size_t>(s.logits_row) * vocab_;
    speculative::RowMask mask_of;
    if (o.grammar) mask_of = [&](size_t row) { return o.grammar->draft_row_mask(r.draft, row); };
    v = speculative::verify_on_host(o.sampler, logits.subspan(offset, static_cast<size_t>(s.num_logit_rows()) * vocab_),
                                    vocab_, r.prompt, r.output, proposal, mask_of);
    if (o.grammar) o.grammar->end_verify();
  }
  t.sample += timer.lap();
  const int k = static_cast<int>(r.draft.size()), a = v.num_accepted_drafts;
  if (forced) {  // not the proposer's: its acceptance and the spec metrics stay the proposer's
    metrics_.update([&](MetricsSnapshot& m) {
      m.jump_forward_draft_tokens_total += static_cast<uint64_t>(k);
      m.jump_forward_accepted_tokens_total += static_cast<uint64_t>(a);
    });
  } else {
    speculator_.record_verify(r.id, k, a, proposal.match_length);
    window_.record_verify(k, a);
  }
  // The tokens last: a client that read its final event sees the counts of its last verify.
  output_.accept_verified(r, o, v.tokens, a);
  scheduler_.finish_speculation(r);
  t.output += timer.lap();
}

void StepExecutor::end_step(LaunchedStep& step, int num_prompt_tokens, uint64_t num_tokens, Timer& timer) {
  StepSeconds& t = step.seconds;
  metrics_.update([&](MetricsSnapshot& m) { m.prompt_tokens_total += num_prompt_tokens; });
  // Prompts whose prefill ended (and whose first token was finite) go to the prefix cache now,
  // not at release: requests waiting with the same prompt (the n choices) are admitted on them.
  scheduler_.publish_prompts(step.plan);
  const int num_running = scheduler_.num_running();
  release_finished();
  t.output += timer.lap();
  metrics_.observe_step(t);
  if (!t.decode) return;
  speculator_.record_step(step.max_drafts, static_cast<int>(step.plan.sequences.size()),
                          seconds_between(step.start, Clock::now()));
  window_.record_step(num_tokens);
  if (options_.decode_log_interval > 0 && window_.num_steps() >= options_.decode_log_interval) {
    window_.log_and_reset(num_running, scheduler_.num_waiting(), metrics_);
  }
}

void StepExecutor::abort_cancelled() {
  for (Request* r : scheduler_.all_requests()) {
    if (r->finished || !output_.at(r->id).stream->cancelled()) continue;
    output_.finish_aborted(*r);  // released now, or after the launched steps that hold it
  }
  release_finished();
}

void StepExecutor::finish_over_capacity() {
  const int capacity = allocator_.num_pages() * allocator_.page_size();
  for (Request* r : scheduler_.over_capacity_requests()) {
    if (r->steps_in_flight > 0) continue;  // its last token is still coming: finished next step
    output_.finish_over_capacity(*r, capacity);
    release(r, /*cache_pages=*/false);
  }
}

void StepExecutor::release_finished() {
  for (Request* r : scheduler_.all_requests()) {
    if (r->finished && r->steps_in_flight == 0) release(r, /*cache_pages=*/!r->failed);
  }
}

void StepExecutor::release(Request* r, bool cache_pages) {
  const uint64_t id = r->id;
  speculator_.forget(id);
  scheduler_.release(r, cache_pages);
  output_.erase(id);
}

void StepExecutor::fail_all(const std::string& message) {
  for (Request* r : scheduler_.all_requests()) {
    output_.finish_failed(*r, message);
    release(r, /*cache_pages=*/false);
  }
}

void StepExecutor::drop_in_flight() {
  in_flight_.reset();
  while (runner_.num_launched() > 0) {
    try {
      runner_.collect();
    } catch (const std::exception& e) {
      spdlog::warn("dropping a launched step: {}", e.what());
    }
  }
  for (Request* r : scheduler_.all_requests()) {
    r->steps_in_flight = 0;
    r->num_pending_tokens = 0;
  }
}

}  // namespace spindle::engine
