#include "engine/engine.h"

#include "platform/cuda_info.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <random>

#include "util/error.h"

namespace spindle::engine {

namespace {
uint64_t random_seed() {
  static std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Seconds since the last lap().
class StepTimer {
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
}  // namespace

RequestOutputState::RequestOutputState(SamplingParams params, uint64_t seed, std::shared_ptr<RequestStream> stream_,
                                       const tokenizer::Tokenizer& tokenizer)
    : sampler(std::move(params), seed),
      stream(std::move(stream_)),
      detokenizer(tokenizer, /*skip_special_tokens=*/true),
      stop_matcher(sampler.params().stop) {}

Engine::Engine(Runner& runner, const tokenizer::Tokenizer& tokenizer, const tokenizer::ChatTemplate* chat_template,
               kv::PagePool& pool, Metrics& metrics, EngineOptions options)
    : runner_(runner),
      tokenizer_(tokenizer),
      chat_template_(chat_template),
      metrics_(metrics),
      options_(std::move(options)),
      allocator_(pool.allocator(options_.dp_rank)),
      prefix_cache_(allocator_, options_.enable_prefix_cache),
      scheduler_(allocator_, prefix_cache_, options_.scheduler),
      cost_model_(options_.speculate_always) {
  metrics_.update([&](MetricsSnapshot& s) { s.kv_pages_total = allocator_.num_pages(); });
}

Engine::~Engine() { stop(); }

void Engine::start() {
  SPINDLE_CHECK(!thread_.joinable(), "engine already started");
  thread_ = std::thread([this] {
    if (options_.cuda_device >= 0) bind_cuda_device(options_.cuda_device);
    if (options_.on_thread_start) options_.on_thread_start();
    loop();
  });
}

void Engine::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestStream> Engine::submit(std::vector<TokenId> prompt, SamplingParams params) {
  std::vector<SamplingParams> one;
  one.push_back(std::move(params));
  return submit_choices(std::move(prompt), std::move(one)).front();
}

std::vector<std::shared_ptr<RequestStream>> Engine::submit_choices(std::vector<TokenId> prompt,
                                                                   std::vector<SamplingParams> params) {
  SPINDLE_CHECK(!params.empty(), "submit_choices needs at least one choice");
  const int n = static_cast<int>(params.size());
  std::vector<std::shared_ptr<RequestStream>> streams;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw EngineOverloaded("the server is shutting down");
    if (num_waiting_ + static_cast<int>(incoming_.size()) + n > options_.max_queued_requests) {
      throw EngineOverloaded("too many requests are waiting (" + std::to_string(options_.max_queued_requests) +
                             "); retry later");
    }
    for (int i = 0; i < n; ++i) {
      auto stream = std::make_shared<RequestStream>();
      incoming_tokens_ += static_cast<int64_t>(prompt.size());
      Incoming in;
      in.request = std::make_unique<Request>(next_id_++, i + 1 == n ? std::move(prompt) : prompt, allocator_);
      in.output = std::make_unique<RequestOutputState>(std::move(params[static_cast<size_t>(i)]), random_seed(), stream,
                                                       tokenizer_);
      incoming_.push_back(std::move(in));
      streams.push_back(std::move(stream));
    }
  }
  wake_.notify_one();
  return streams;
}

bool Engine::kv_integrity_ok() {
  std::promise<bool> result;
  auto future = result.get_future();
  {
    std::lock_guard lock(mutex_);
    SPINDLE_CHECK(!stopping_, "the engine is stopping");
    checks_.push_back(std::move(result));
  }
  wake_.notify_one();
  return future.get();
}

void Engine::run_pending_checks() {
  std::vector<std::promise<bool>> checks;
  {
    std::lock_guard lock(mutex_);
    checks.swap(checks_);
  }
  for (auto& p : checks) {
    try {
      scheduler_.check_integrity();
      if (options_.proposer != nullptr) options_.proposer->check_integrity();
      p.set_value(true);
    } catch (const std::exception& e) {
      spdlog::error("KV integrity check failed: {}", e.what());
      p.set_value(false);
    }
  }
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        return stopping_ || !incoming_.empty() || !checks_.empty() || scheduler_.has_work() || in_flight_.has_value();
      });
      if (stopping_) break;
      while (!incoming_.empty()) {
        outputs_[incoming_.front().request->id] = std::move(incoming_.front().output);
        scheduled_tokens_ += incoming_.front().request->num_tokens();
        incoming_tokens_ -= incoming_.front().request->num_tokens();
        scheduler_.add(std::move(incoming_.front().request));
        incoming_.pop_front();
      }
      // submit() counts these as waiting from now on (they left incoming_): during the step the
      // count can only fall, so the queue limit is never exceeded (it was stale until the step's end).
      num_waiting_ = scheduler_.num_waiting();
    }
    run_pending_checks();
    try {
      run_step();
    } catch (const std::exception& e) {
      drop_in_flight();
      // A step failed (should not happen): fail every request rather than the process.
      spdlog::error("engine step failed{}: {}", options_.dp_name.empty() ? "" : " on " + options_.dp_name, e.what());
      metrics_.update([&](MetricsSnapshot& s) {  // the server (or this DP rank) turns unhealthy (device errors are sticky)
        ++s.step_failures_total;
        if (s.unhealthy_reason.empty()) s.unhealthy_reason = std::string("an engine step failed: ") + e.what();
      });
      if (options_.on_step_failure) options_.on_step_failure(e.what());
      fail_all(options_.dp_name.empty() ? std::string(e.what()) : fmt::format("{} failed: {}", options_.dp_name, e.what()));
    }
    publish_gauges();
  }
  {
    // Requests submitted but not yet taken into the scheduler get their final event too.
    std::lock_guard lock(mutex_);
    while (!incoming_.empty()) {
      outputs_[incoming_.front().request->id] = std::move(incoming_.front().output);
      scheduler_.add(std::move(incoming_.front().request));
      incoming_.pop_front();
    }
  }
  drop_in_flight();
  fail_all("the server is shutting down");
  run_pending_checks();  // a kv_integrity_ok() caller must not wait forever on a stopped engine
}

void Engine::publish_gauges() {
  const auto& stats = prefix_cache_.stats();
  const int running = scheduler_.num_running(), waiting = scheduler_.num_waiting();
  int64_t tokens = 0;
  for (const Request* r : scheduler_.all_requests()) tokens += r->num_tokens();
  scheduled_tokens_ = tokens;
  {
    std::lock_guard lock(mutex_);
    num_waiting_ = waiting;
  }
  metrics_.update([&](MetricsSnapshot& s) {
    s.num_requests_running = running;
    s.num_requests_waiting = waiting;
    s.kv_pages_used = allocator_.num_pages() - allocator_.num_free_pages();
    s.kv_pages_in_use = allocator_.num_in_use_pages();
    s.prefix_cache_queries = stats.num_lookup_tokens;
    s.prefix_cache_hits = stats.num_hit_tokens;
    const DeviceOps::GraphStats g = runner_.model().graph_stats();
    s.cuda_graphs = g.captured;
    s.cuda_graph_captures_total = static_cast<uint64_t>(g.captures);
    s.cuda_graph_replays_total = static_cast<uint64_t>(g.replays);
    s.cuda_graph_capture_seconds_total = g.capture_seconds;
    s.cuda_graph_memory_bytes = g.memory_bytes;
  });
}

void Engine::release(Request* r, bool cache_pages) {
  const uint64_t id = r->id;
  if (options_.proposer != nullptr) options_.proposer->forget(id);
  scheduler_.release(r, cache_pages);
  outputs_.erase(id);
}

void Engine::fail_all(const std::string& message) {
  for (Request* r : scheduler_.all_requests()) {
    RequestOutput out;
    out.finished = true;
    out.finish_reason = FinishReason::kError;
    out.error = message;
    outputs_.at(r->id)->stream->push(std::move(out));
    release(r, /*cache_pages=*/false);
  }
}

void Engine::abort_cancelled() {
  for (Request* r : scheduler_.all_requests()) {
    const RequestOutputState& o = *outputs_.at(r->id);
    if (r->finished || !o.stream->cancelled()) continue;
    RequestOutput out;
    out.finished = true;
    out.finish_reason = FinishReason::kAbort;
    out.num_prompt_tokens = static_cast<int>(r->prompt.size());
    out.num_output_tokens = static_cast<int>(r->output.size());
    o.stream->push(std::move(out));
    r->finished = true;  // released now, or after the launched steps that hold it (release_finished)
    metrics_.update([](MetricsSnapshot& s) { ++s.requests_aborted_total; });
  }
  release_finished();
}

std::string Engine::flush_held_text(RequestOutputState& o) {
  const auto tail = o.stop_matcher.feed(o.detokenizer.finish());
  return tail.stopped ? tail.emit : tail.emit + o.stop_matcher.flush();
}

void Engine::count_finished(const Request& r, Clock::time_point now) {
  metrics_.observe_e2e_latency(seconds_between(r.arrival, now));
  metrics_.update([](MetricsSnapshot& s) { ++s.requests_finished_total; });
}

void Engine::finish_over_capacity() {
  const int capacity = allocator_.num_pages() * allocator_.page_size();
  for (Request* r : scheduler_.over_capacity_requests()) {
    if (r->steps_in_flight > 0) continue;  // its last token is still coming: finished next step
    RequestOutput out;
    out.finished = true;
    out.num_prompt_tokens = static_cast<int>(r->prompt.size());
    out.num_output_tokens = static_cast<int>(r->output.size());
    if (r->output.empty()) {  // never ran: the prompt alone does not fit
      out.finish_reason = FinishReason::kError;
      out.error = fmt::format("the prompt of {} tokens does not fit the KV cache of {} tokens (--max-total-tokens)",
                              r->prompt.size(), capacity);
    } else {  // grew to the whole KV cache
      out.finish_reason = FinishReason::kLength;
      out.text = flush_held_text(*outputs_.at(r->id));
      count_finished(*r, Clock::now());
    }
    out.num_cached_prompt_tokens = r->num_cached_prompt_tokens;
    outputs_.at(r->id)->stream->push(std::move(out));
    release(r, /*cache_pages=*/false);
  }
}

namespace {
constexpr double kAcceptanceDecay = 0.9;  // per verify: about the last 10 verifies count
// Per verify of a match class: its counts pool every request's drafts, so more of them count.
constexpr double kMatchAcceptanceDecay = 0.98;
}  // namespace

double Engine::acceptance_of(const RequestOutputState& o, int match_length) const {
  // Per-token acceptance a = accepted / (accepted + rejected) with the pool's counts as a prior
  // worth two verifies, itself with an even prior of 1 + 1: never 0, since a draft count that is
  // expected to add nothing is never run again (and so never measured again).
  const double prior_a = (spec_accepted_all_ + 1) / (spec_accepted_all_ + spec_rejected_all_ + 2);
  if (match_length > 0) {
    const size_t c = static_cast<size_t>(match_class(match_length));
    return (match_accepted_[c] + 2 * prior_a) / (match_accepted_[c] + match_rejected_[c] + 2);
  }
  return (o.spec_accepted + 2 * prior_a) / (o.spec_accepted + o.spec_rejected + 2);
}

bool Engine::propose_drafts() {
  const auto running = scheduler_.running_requests();
  for (Request* r : running) r->draft.clear();
  proposals_.clear();
  if (options_.proposer == nullptr || options_.num_draft_tokens <= 0) return false;
  proposal_requests_.clear();
  int num_decoding = 0;
  for (Request* r : running) {
    if (r->preempted || r->finished || r->num_computed_tokens != r->num_tokens() - 1) continue;
    ++num_decoding;
    const Sampler& sampler = outputs_.at(r->id)->sampler;
    const SamplingParams& p = sampler.params();
    // A verify step emits up to k + 1 tokens and writes k positions past the context.
    const int room = std::min({options_.num_draft_tokens, p.max_tokens - static_cast<int>(r->output.size()) - 1,
                               max_model_len() - r->num_tokens()});
    if (!p.speculative || room < 1) continue;
    speculative::ProposalRequest q;
    q.request = r;
    q.params = &p;
    q.seed = sampler.seed();
    q.max_draft_tokens = room;
    proposal_requests_.push_back(q);
  }
  if (proposal_requests_.empty()) return false;
  // A cheap proposer proposes first, so the decision sees which requests really have drafts.
  const bool cheap = options_.proposer->cheap();
  if (cheap) {
    for (speculative::ProposalRequest& q : proposal_requests_) q.out = &proposals_[q.request->id];
    options_.proposer->propose(proposal_requests_);
  }
  // The benefit of at most k drafts per sequence, k = 0 .. the most any request can have: each
  // drafting request's expected tokens at its measured acceptance, 1 for the rest.
  auto drafts_of = [&](const speculative::ProposalRequest& q) {
    return cheap ? static_cast<int>(std::min<size_t>(q.out->tokens.size(), q.max_draft_tokens)) : q.max_draft_tokens;
  };
  int max_k = 0;
  for (const speculative::ProposalRequest& q : proposal_requests_) max_k = std::max(max_k, drafts_of(q));
  if (max_k == 0) return false;
  expected_.assign(static_cast<size_t>(max_k) + 1, static_cast<double>(num_decoding));
  for (const speculative::ProposalRequest& q : proposal_requests_) {
    const int n = drafts_of(q);
    if (n == 0) continue;
    const double a = acceptance_of(*outputs_.at(q.request->id), cheap ? q.out->match_length : 0);
    for (int k = 1; k <= max_k; ++k) expected_[static_cast<size_t>(k)] += speculative::expected_tokens(a, std::min(k, n)) - 1.0;
  }
  const int k = cost_model_.choose_drafts(num_decoding, expected_);
  if (auto change = cost_model_.take_change()) spdlog::info("{}", *change);
  if (k == 0) {
    metrics_.update([](MetricsSnapshot& s) { ++s.spec_skipped_steps; });
    return false;
  }
  for (speculative::ProposalRequest& q : proposal_requests_) q.max_draft_tokens = std::min(q.max_draft_tokens, k);
  if (!cheap) {
    for (speculative::ProposalRequest& q : proposal_requests_) q.out = &proposals_[q.request->id];
    options_.proposer->propose(proposal_requests_);
  }
  bool any = false;
  for (const speculative::ProposalRequest& q : proposal_requests_) {
    Request& r = *const_cast<Request*>(q.request);
    r.draft.assign(q.out->tokens.begin(), q.out->tokens.begin() + std::min<size_t>(q.out->tokens.size(), q.max_draft_tokens));
    any = any || !r.draft.empty();
  }
  return any;
}

bool Engine::can_overlap() const {
  if (!options_.overlap_schedule || !runner_.samples_on_device() || options_.proposer != nullptr) return false;
  // A waiting request (one just arrived, say) is admitted a step sooner when the step in flight is
  // collected first: with the next step scheduled behind it, its prefill would start one whole
  // step later (bench/e2e_gpu run -12: TTFT p50 at C=32 180 ms overlapped vs 126 ms one at a time).
  if (scheduler_.num_waiting() > 0) return false;
  for (const Request* r : scheduler_.running_requests()) {
    // Its next draw's penalties need the pending token on the host.
    if (r->num_pending_tokens > 0 && outputs_.at(r->id)->sampler.params().has_penalties()) return false;
  }
  return true;
}

void Engine::hold_finishing_requests(bool hold) {
  for (Request* r : scheduler_.running_requests()) {
    if (!hold) {
      r->hold = false;
      continue;
    }
    if (r->num_pending_tokens == 0) continue;
    const int outputs = static_cast<int>(r->output.size()) + r->num_pending_tokens;
    r->hold = outputs >= outputs_.at(r->id)->sampler.params().max_tokens || r->num_tokens() >= max_model_len();
  }
}

void Engine::run_step() {
  StepTimer timer;
  const auto step_start = Clock::now();
  abort_cancelled();
  // Only decode steps run ahead: a step with prefill work is collected before the next is
  // scheduled, so a request arriving during it is admitted right after it (a prefill step takes
  // tens of ms; scheduling behind it delayed arrivals by one, run -13: TTFT p50 C=32 176 vs 126 ms).
  const bool overlap = can_overlap() && (!in_flight_ || in_flight_->seconds.decode);
  if (!overlap) collect_in_flight();
  propose_drafts();
  hold_finishing_requests(true);
  const StepPlan plan = scheduler_.schedule();
  hold_finishing_requests(false);
  if (plan.num_preempted > 0) {
    metrics_.update([&](MetricsSnapshot& s) { s.preemptions_total += plan.num_preempted; });
  }
  finish_over_capacity();
  if (plan.empty()) {
    collect_in_flight();  // nothing to launch behind it
    release_finished();
    return;
  }
  LaunchedStep step;
  step.start = step_start;
  StepSeconds& t = step.seconds;
  t.schedule = timer.lap();
  const StepBatch& batch = runner_.build(plan);
  // A decode step: every sequence computes its last token (and its drafts, when it speculates).
  bool decode = true, q_drafts = false;
  for (const auto& s : plan.sequences) {
    decode = decode && s.logits_row >= 0 && s.num_new_tokens - s.num_draft_tokens == 1;
    if (s.num_draft_tokens > 0) {
      step.max_drafts = std::max(step.max_drafts, s.num_draft_tokens);
      q_drafts = q_drafts || !proposals_.at(s.request->id).q.empty();
    }
  }
  t.decode = decode;
  // Drafts drawn from a draft model's q need the target's whole processed distribution for the
  // rejection rule: those steps sample on the host, even where the device could.
  if (!runner_.samples_on_device() ||
      q_drafts) {  // host logits, sampled here (never with a step in flight: can_overlap)
    SPINDLE_CHECK(!in_flight_, "a host-sampled step with a step in flight");
    t.build = timer.lap();
    const std::span<float> logits = runner_.run(batch);
    t.forward = timer.lap();
    scheduler_.update(plan);
    step.plan = plan;
    process_step(step, logits, nullptr);
    return;
  }
  // The logits stay on the device; only the chosen tokens come back.
  sampling_.clear();
  sampling_.rows.resize(static_cast<size_t>(batch.num_logit_rows()));
  std::vector<TokenId> context;  // output + the drafts before a row (scratch)
  for (const auto& s : plan.sequences) {
    if (s.logits_row < 0) continue;
    const Request& r = *s.request;
    const Sampler& sampler = outputs_.at(r.id)->sampler;
    // Tokens drawn before row 0: the known ones and the pending ones (which no penalty reads:
    // can_overlap), then row i draws the token after draft i, as non-speculative decoding would.
    const uint64_t drawn = r.output.size() + static_cast<uint64_t>(r.num_pending_tokens);
    if (s.num_draft_tokens == 0) {
      add_sampling_row(sampler.params(), sampler.seed(), drawn, r.prompt, r.output, static_cast<size_t>(s.logits_row),
                       sampling_);
      continue;
    }
    context.assign(r.output.begin(), r.output.end());
    for (int i = 0; i < s.num_logit_rows(); ++i) {
      if (i > 0) context.push_back(r.draft[static_cast<size_t>(i - 1)]);
      add_sampling_row(sampler.params(), sampler.seed(), drawn + static_cast<uint64_t>(i), r.prompt, context,
                       static_cast<size_t>(s.logits_row + i), sampling_);
    }
  }
  t.build = timer.lap();
  runner_.launch(sampling_);
  t.forward = timer.lap();
  scheduler_.update(plan);
  for (const auto& s : plan.sequences) {
    Request& r = *s.request;
    ++r.steps_in_flight;
    if (s.logits_row >= 0 && s.num_draft_tokens == 0) {  // its next token is chosen on the device
      ++r.num_pending_tokens;
      r.pending_logit_row = s.logits_row;
    }
  }
  step.plan = plan;
  std::optional<LaunchedStep> last = std::exchange(in_flight_, std::move(step));
  if (last) {  // collected while the step just launched runs
    metrics_.update([](MetricsSnapshot& s) { ++s.overlapped_steps_total; });
    finish_step(*last);
  }
  if (!overlap || !decode) collect_in_flight();
}

void Engine::collect_in_flight() {
  if (!in_flight_) return;
  LaunchedStep step = std::move(*in_flight_);
  in_flight_.reset();
  finish_step(step);
}

void Engine::finish_step(LaunchedStep& step) {
  StepTimer timer;
  const std::vector<SampledRow>& rows = runner_.collect();
  step.seconds.device = timer.lap();
  process_step(step, {}, &rows);
}

void Engine::process_step(LaunchedStep& step, std::span<float> logits, const std::vector<SampledRow>* device_rows) {
  StepTimer timer;
  StepSeconds& t = step.seconds;
  const StepPlan& plan = step.plan;
  const int vocab = runner_.model().config().vocab_size;
  int num_prompt_tokens = 0;
  step_tokens_ = 0;
  std::vector<SampledToken> drawn;
  for (const auto& s : plan.sequences) {
    Request& r = *s.request;
    if (device_rows != nullptr) --r.steps_in_flight;
    num_prompt_tokens += std::max(0, std::min(s.num_cached_tokens + s.num_new_tokens - s.num_draft_tokens,
                                              static_cast<int>(r.prompt.size())) -
                                         s.num_cached_tokens);
    if (s.logits_row < 0) continue;
    const bool pending = device_rows != nullptr && s.num_draft_tokens == 0;
    if (pending) --r.num_pending_tokens;
    // Finished (a stop in the step before, aborted, over capacity) while this step was in flight:
    // the token it computed is dropped.
    if (r.finished) continue;
    RequestOutputState& o = *outputs_.at(r.id);
    timer.lap();
    if (s.num_draft_tokens > 0) {
      speculative::Verified v;
      if (device_rows != nullptr) {
        drawn.clear();
        for (int i = 0; i < s.num_logit_rows(); ++i) {
          drawn.push_back(to_sampled_token((*device_rows)[static_cast<size_t>(s.logits_row + i)]));
        }
        v = speculative::verify_sampled(drawn, r.draft);
      } else {
        speculative::DraftProposal& proposal = proposals_.at(r.id);
        proposal.tokens = r.draft;  // the scheduler may have kept fewer than were proposed
        if (!proposal.q.empty()) proposal.q.resize(r.draft.size());
        const size_t offset = static_cast<size_t>(s.logits_row) * vocab;
        v = speculative::verify_on_host(o.sampler, logits.subspan(offset, static_cast<size_t>(s.num_logit_rows()) * vocab),
                                 vocab, r.prompt, r.output, proposal);
      }
      t.sample += timer.lap();
      accept_verified(r, o, v, proposals_.at(r.id).match_length);
      scheduler_.finish_speculation(r);
      t.output += timer.lap();
      continue;
    }
    SampledToken sampled;
    if (device_rows != nullptr) {
      sampled = to_sampled_token((*device_rows)[static_cast<size_t>(s.logits_row)]);
    } else {
      const std::span<float> row = logits.subspan(static_cast<size_t>(s.logits_row) * vocab, vocab);
      sampled = o.sampler.sample(row, r.prompt, r.output);
    }
    t.sample += timer.lap();
    accept_token(r, o, sampled);
    t.output += timer.lap();
  }
  metrics_.update([&](MetricsSnapshot& m) { m.prompt_tokens_total += num_prompt_tokens; });
  // Prompts whose prefill ended (and whose first token was finite) go to the prefix cache now,
  // not at release: requests waiting with the same prompt (the n choices) are admitted on them.
  scheduler_.publish_prompts(plan);
  const int num_running = scheduler_.num_running();
  release_finished();
  t.output += timer.lap();
  metrics_.observe_step(t);
  if (t.decode) {
    const int tokens = step_tokens_;
    cost_model_.record(step.max_drafts, static_cast<int>(plan.sequences.size()),
                       seconds_between(step.start, Clock::now()));
    ++window_.steps;
    window_.tokens += static_cast<uint64_t>(tokens);
    if (options_.decode_log_interval > 0 && window_.steps >= options_.decode_log_interval) log_decode_window(num_running);
  }
}

void Engine::release_finished() {
  for (Request* r : scheduler_.all_requests()) {
    if (r->finished && r->steps_in_flight == 0) release(r, /*cache_pages=*/!r->failed);
  }
}

void Engine::drop_in_flight() {
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

void Engine::accept_verified(Request& r, RequestOutputState& o, const speculative::Verified& v, int match_length) {
  const int k = static_cast<int>(r.draft.size());
  const int a = v.num_accepted_drafts;
  const double rejected = a < k ? 1.0 : 0.0;
  if (match_length > 0) {
    const size_t c = static_cast<size_t>(match_class(match_length));
    match_accepted_[c] = kMatchAcceptanceDecay * match_accepted_[c] + a;
    match_rejected_[c] = kMatchAcceptanceDecay * match_rejected_[c] + rejected;
  }
  o.spec_accepted = kAcceptanceDecay * o.spec_accepted + a;
  o.spec_rejected = kAcceptanceDecay * o.spec_rejected + rejected;
  spec_accepted_all_ = kAcceptanceDecay * spec_accepted_all_ + a;
  spec_rejected_all_ = kAcceptanceDecay * spec_rejected_all_ + rejected;
  window_.spec_accepted += static_cast<uint64_t>(a + 1);
  window_.spec_forwards += 1;
  window_.spec_drafted += static_cast<uint64_t>(k);
  window_.spec_accepted_drafts += static_cast<uint64_t>(a);
  metrics_.update([&](MetricsSnapshot& s) {
    s.spec_total_num_accepted_tokens += static_cast<uint64_t>(a + 1);
    ++s.spec_total_num_forward_ct;
    ++s.spec_num_drafts;
    s.spec_num_draft_tokens += static_cast<uint64_t>(k);
    s.spec_num_accepted_draft_tokens += static_cast<uint64_t>(a);
    if (s.spec_accepted_per_position.size() < static_cast<size_t>(k)) s.spec_accepted_per_position.resize(k, 0);
    for (int i = 0; i < a; ++i) ++s.spec_accepted_per_position[static_cast<size_t>(i)];
  });  // The tokens last: a client that read its final event sees the counts of its last verify.
  for (size_t i = 0; i < v.tokens.size() && !r.finished; ++i) {
    if (static_cast<int>(i) < a) ++r.num_accepted_draft_tokens;
    accept_token(r, o, v.tokens[i]);
  }
}

void Engine::log_decode_window(int num_running) {
  const auto now = Clock::now();
  const double seconds = seconds_between(window_.start, now);
  std::string spec;
  if (window_.spec_forwards > 0) {
    spec = fmt::format(", spec accept length {:.2f}, accept rate {:.2f}",
                       double(window_.spec_accepted) / double(window_.spec_forwards),
                       window_.spec_drafted ? double(window_.spec_accepted_drafts) / double(window_.spec_drafted) : 0.0);
  }
  spdlog::info("decode: {} steps, {} running, {} waiting, {:.1f} tok/s generated{}", window_.steps, num_running,
               scheduler_.num_waiting(), seconds > 0 ? double(window_.tokens) / seconds : 0.0, spec);
  metrics_.update([&](MetricsSnapshot& s) {
    s.spec_num_accepted_tokens = window_.spec_accepted;
    s.spec_num_forward_ct = window_.spec_forwards;
  });
  window_ = DecodeWindow{};
}

bool Engine::is_stop_token(const RequestOutputState& o, TokenId token) const {
  const auto& p = o.sampler.params();
  if (!p.ignore_eos) {
    for (TokenId eos : tokenizer_.eos_ids()) {
      if (token == eos) return true;
    }
    for (TokenId eos : runner_.model().config().eos_token_ids) {
      if (token == eos) return true;
    }
  }
  for (TokenId t : p.stop_token_ids) {
    if (token == t) return true;
  }
  return false;
}

void Engine::accept_token(Request& r, RequestOutputState& o, const SampledToken& sampled) {
  if (sampled.non_finite) {  // NaN or Inf logits: no token; this request ends with an error
    RequestOutput out;
    out.finished = true;
    out.finish_reason = FinishReason::kError;
    out.error = "the model produced non-finite logits (NaN or Inf)";
    out.num_prompt_tokens = static_cast<int>(r.prompt.size());
    out.num_output_tokens = static_cast<int>(r.output.size());
    r.finished = true;
    r.failed = true;  // its KV may hold non-finite values: the prefix cache must not keep them
    metrics_.update([](MetricsSnapshot& s) { ++s.non_finite_logits_total; });
    o.stream->push(std::move(out));
    return;
  }
  const auto now = Clock::now();
  if (r.output.empty()) {
    metrics_.observe_time_to_first_token(seconds_between(r.arrival, now));
  } else if (o.last_token_time && r.num_preemptions == 0) {
    metrics_.observe_inter_token_latency(seconds_between(*o.last_token_time, now));
  }
  o.last_token_time = now;
  r.output.push_back(sampled.token);
  ++step_tokens_;
  metrics_.update([](MetricsSnapshot& s) { ++s.generation_tokens_total; });

  RequestOutput out;
  out.tokens.push_back(sampled.token);
  const auto& p = o.sampler.params();
  if (p.logprobs || p.top_logprobs > 0) out.logprobs.push_back(sampled);
  const bool stop_token = is_stop_token(o, sampled.token);
  bool stopped_by_string = false;
  if (!stop_token) {
    const auto matched = o.stop_matcher.feed(o.detokenizer.push(sampled.token));
    out.text = matched.emit;
    if (matched.stopped) {
      out.finished = true;
      out.finish_reason = FinishReason::kStop;
      stopped_by_string = true;
    }
  } else {
    out.finished = true;
    out.finish_reason = FinishReason::kStop;
  }
  // Known tokens: a later step of the overlap schedule may have one pending already.
  if (!out.finished && (static_cast<int>(r.output.size()) >= p.max_tokens || r.num_known_tokens() >= max_model_len())) {
    out.finished = true;
    out.finish_reason = FinishReason::kLength;
  }
  if (out.finished && !stopped_by_string) {
    // Finished by length, EOS or a stop token.
    out.text += flush_held_text(o);
  }
  out.num_prompt_tokens = static_cast<int>(r.prompt.size());
  out.num_output_tokens = static_cast<int>(r.output.size());
  out.num_cached_prompt_tokens = r.num_cached_prompt_tokens;
  out.num_accepted_draft_tokens = r.num_accepted_draft_tokens;
  if (out.finished) {
    r.finished = true;
    count_finished(r, now);
  }
  o.stream->push(std::move(out));
}

}  // namespace spindle::engine
