#include "engine/engine.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <random>

#include "platform/cuda_info.h"
#include "util/error.h"

namespace spindle::engine {

namespace {
uint64_t random_seed() {
  static std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}
}  // namespace

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
      output_(tokenizer, runner.model().config().eos_token_ids, options_.scheduler.max_model_len, metrics,
              runner.model().config().vocab_size),
      speculator_({.proposer = options_.proposer,
                   .num_draft_tokens = options_.num_draft_tokens,
                   .speculate_always = options_.speculate_always,
                   .max_model_len = options_.scheduler.max_model_len},
                  metrics, [this](uint64_t id) -> const Sampler& { return output_.at(id).sampler; }),
      executor_(runner, scheduler_, allocator_, output_, speculator_, metrics,
                {.overlap_schedule = options_.overlap_schedule,
                 .decode_log_interval = options_.decode_log_interval,
                 .max_model_len = options_.scheduler.max_model_len,
                 .jump_forward = options_.jump_forward}) {
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
  std::vector<Submission> batch(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    batch[i].prompt = i + 1 == params.size() ? std::move(prompt) : prompt;
    batch[i].params = std::move(params[i]);
  }
  return submit_batch(std::move(batch));
}

std::vector<std::shared_ptr<RequestStream>> Engine::submit_batch(std::vector<Submission> batch) {
  SPINDLE_CHECK(!batch.empty(), "submit_batch needs at least one request");
  const int n = static_cast<int>(batch.size());
  for (Submission& s : batch) {
    if (s.params.embedding) s.params.speculative = false;  // it never decodes
    if (!s.params.grammar) continue;
    output_.grammar_tokenizer();  // built here, on the caller's thread, the first time
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw EngineOverloaded("the server is shutting down");
    if (num_waiting_ + static_cast<int>(incoming_.size()) + n > options_.max_queued_requests) {
      throw EngineOverloaded("too many requests are waiting (" + std::to_string(options_.max_queued_requests) +
                             "); retry later");
    }
    for (Submission& s : batch) {
      auto stream = std::make_shared<RequestStream>();
      incoming_tokens_ += static_cast<int64_t>(s.prompt.size());
      Incoming in;
      in.request = std::make_unique<Request>(next_id_++, std::move(s.prompt), allocator_);
      in.request->wants_prompt_rows =
          s.params.prompt_logprobs >= 0 || (s.params.embedding && s.params.pooling != PoolingConfig::Mode::kLastToken);
      in.output = output_.make_state(std::move(s.params), random_seed(), stream);
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
      speculator_.check_integrity();
      p.set_value(true);
    } catch (const std::exception& e) {
      spdlog::error("KV integrity check failed: {}", e.what());
      p.set_value(false);
    }
  }
}

void Engine::take_incoming(bool count) {
  while (!incoming_.empty()) {
    Incoming& in = incoming_.front();
    output_.add(in.request->id, std::move(in.output));
    if (count) {
      scheduled_tokens_ += in.request->num_tokens();
      incoming_tokens_ -= in.request->num_tokens();
    }
    scheduler_.add(std::move(in.request));
    incoming_.pop_front();
  }
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        return stopping_ || !incoming_.empty() || !checks_.empty() || scheduler_.has_work() || executor_.has_in_flight();
      });
      if (stopping_) break;
      take_incoming(/*count=*/true);
      // submit() counts these as waiting from now on (they left incoming_): during the step the
      // count can only fall, so the queue limit is never exceeded (it was stale until the step's end).
      num_waiting_ = scheduler_.num_waiting();
    }
    run_pending_checks();
    run_step();
    publish_gauges();
  }
  {
    // Requests submitted but not yet taken into the scheduler get their final event too.
    std::lock_guard lock(mutex_);
    take_incoming(/*count=*/false);
  }
  executor_.drop_in_flight();
  executor_.fail_all("the server is shutting down");
  run_pending_checks();  // a kv_integrity_ok() caller must not wait forever on a stopped engine
}

void Engine::run_step() {
  try {
    executor_.step();
  } catch (const std::exception& e) {
    executor_.drop_in_flight();
    // A step failed (should not happen): fail every request rather than the process.
    spdlog::error("engine step failed{}: {}", options_.dp_name.empty() ? "" : " on " + options_.dp_name, e.what());
    metrics_.update([&](MetricsSnapshot& s) {  // the server (or this DP rank) turns unhealthy (device errors are sticky)
      ++s.step_failures_total;
      if (s.unhealthy_reason.empty()) s.unhealthy_reason = std::string("an engine step failed: ") + e.what();
    });
    if (options_.on_step_failure) options_.on_step_failure(e.what());
    executor_.fail_all(options_.dp_name.empty() ? std::string(e.what())
                                                : fmt::format("{} failed: {}", options_.dp_name, e.what()));
  }
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

}  // namespace spindle::engine
