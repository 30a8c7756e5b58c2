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
      allocator_(pool.allocator(0)),
      prefix_cache_(allocator_, options_.enable_prefix_cache),
      scheduler_(allocator_, prefix_cache_, options_.scheduler) {
  metrics_.update([&](MetricsSnapshot& s) { s.kv_pages_total = allocator_.num_pages(); });
}

Engine::~Engine() { stop(); }

void Engine::start() {
  SPINDLE_CHECK(!thread_.joinable(), "engine already started");
  thread_ = std::thread([this] {
    if (options_.cuda_device >= 0) bind_cuda_device(options_.cuda_device);
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
  auto stream = std::make_shared<RequestStream>();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw EngineOverloaded("the server is shutting down");
    if (num_waiting_ + static_cast<int>(incoming_.size()) >= options_.max_queued_requests) {
      throw EngineOverloaded("too many requests are waiting (" + std::to_string(options_.max_queued_requests) +
                             "); retry later");
    }
    Incoming in;
    in.request = std::make_unique<Request>(next_id_++, std::move(prompt), allocator_);
    in.output = std::make_unique<RequestOutputState>(std::move(params), random_seed(), stream, tokenizer_);
    incoming_.push_back(std::move(in));
  }
  wake_.notify_one();
  return stream;
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
      wake_.wait(lock, [&] { return stopping_ || !incoming_.empty() || !checks_.empty() || scheduler_.has_work(); });
      if (stopping_) break;
      while (!incoming_.empty()) {
        outputs_[incoming_.front().request->id] = std::move(incoming_.front().output);
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
      // A step failed (should not happen): fail every request rather than the process.
      spdlog::error("engine step failed: {}", e.what());
      metrics_.update([&](MetricsSnapshot& s) {  // the server turns unhealthy (device errors are sticky)
        ++s.step_failures_total;
        if (s.unhealthy_reason.empty()) s.unhealthy_reason = std::string("an engine step failed: ") + e.what();
      });
      fail_all(e.what());
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
  fail_all("the server is shutting down");
  run_pending_checks();  // a kv_integrity_ok() caller must not wait forever on a stopped engine
}

void Engine::publish_gauges() {
  const auto& stats = prefix_cache_.stats();
  const int running = scheduler_.num_running(), waiting = scheduler_.num_waiting();
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
    if (!o.stream->cancelled()) continue;
    RequestOutput out;
    out.finished = true;
    out.finish_reason = FinishReason::kAbort;
    out.num_prompt_tokens = static_cast<int>(r->prompt.size());
    out.num_output_tokens = static_cast<int>(r->output.size());
    o.stream->push(std::move(out));
    release(r, /*cache_pages=*/true);
    metrics_.update([](MetricsSnapshot& s) { ++s.requests_aborted_total; });
  }
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

void Engine::run_step() {
  StepTimer timer;
  abort_cancelled();
  const StepPlan plan = scheduler_.schedule();
  if (plan.num_preempted > 0) {
    metrics_.update([&](MetricsSnapshot& s) { s.preemptions_total += plan.num_preempted; });
  }
  finish_over_capacity();
  if (plan.empty()) return;
  StepSeconds t;
  t.schedule = timer.lap();
  const StepBatch& batch = runner_.build(plan);
  const bool decode = batch.is_decode();
  const bool on_device = runner_.samples_on_device();
  std::span<float> logits;
  const std::vector<SampledRow>* device_rows = nullptr;
  if (on_device) {  // the logits stay on the device; only the chosen tokens come back
    sampling_.clear();
    sampling_.rows.resize(static_cast<size_t>(batch.num_logit_rows()));
    for (const auto& s : plan.sequences) {
      if (s.logits_row < 0) continue;
      const Request& r = *s.request;
      const Sampler& sampler = outputs_.at(r.id)->sampler;
      add_sampling_row(sampler.params(), sampler.seed(), r.output.size(), r.prompt, r.output,
                       static_cast<size_t>(s.logits_row), sampling_);
    }
    t.build = timer.lap();
    device_rows = &runner_.run_and_sample(sampling_);
    const double step = timer.lap();
    t.forward = std::min(step, runner_.last_launch_seconds());
    t.device = step - t.forward;
  } else {
    t.build = timer.lap();
    logits = runner_.run(batch);
    t.forward = timer.lap();
  }
  scheduler_.update(plan);

  const int vocab = runner_.model().config().vocab_size;
  int num_prompt_tokens = 0;
  for (const auto& s : plan.sequences) {
    Request& r = *s.request;
    num_prompt_tokens += std::max(0, std::min(s.num_cached_tokens + s.num_new_tokens, static_cast<int>(r.prompt.size())) -
                                         s.num_cached_tokens);
    if (s.logits_row < 0) continue;
    RequestOutputState& o = *outputs_.at(r.id);
    timer.lap();
    SampledToken sampled;
    if (on_device) {
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
  for (Request* r : scheduler_.finished_requests()) release(r, /*cache_pages=*/true);
  t.output += timer.lap();
  t.decode = decode;
  metrics_.observe_step(t);
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
  if (!out.finished && (static_cast<int>(r.output.size()) >= p.max_tokens || r.num_tokens() >= max_model_len())) {
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
  if (out.finished) {
    r.finished = true;
    count_finished(r, now);
  }
  o.stream->push(std::move(out));
}

}  // namespace spindle::engine
