// The engine: one thread that owns the scheduler, the KV pages and the model, and runs steps.
//
// Clients (HTTP handlers, `spindle generate`) call submit() from any thread and read the
// returned RequestStream. Each step: schedule (admit waiting requests by free pages, reuse
// prefix-cache pages, chunk long prompts, preempt the newest request by recompute when pages run
// out) -> one model forward over every scheduled token -> sample -> detokenize, match stop
// strings -> push events -> free the pages of finished or cancelled requests.
//
// The engine in parts (as vLLM's EngineCore, Scheduler.update_from_output and OutputProcessor):
//   - Engine (here): the queue of submitted requests, the thread and its loop, integrity checks,
//     the gauges, what happens when a step throws;
//   - StepExecutor (step_executor.h): one step from the plan to the emitted tokens: launch,
//     collect, the step in flight and the overlap schedule, the decode log window;
//   - speculative::Speculator (speculative/speculator.h): proposals, acceptance, the cost model;
//   - OutputProcessor (output_processor.h): each request's RequestOutputState: detokenizing, stop
//     policies (finishing is decided there alone), logprobs, stream transformers, the stream.
//
// Structured output (SamplingParams::grammar, compiled by the caller): the request's matcher is a
// fork of its grammar's root matcher on the engine thread (grammar_state.h); each step its mask
// is applied to its logits before anything else of sampling (host: engine::Sampler; device: the
// sampling rows); the token drawn advances the matcher; the grammar ends it (GrammarStopPolicy).
// A constrained request's drafts are checked against its matcher and each verify row is masked by
// the grammar after the drafts before it; its forced continuations are drafts too (jump-forward),
// with or without a proposer (step_executor.h). While one runs, steps do not overlap.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/metrics.h"
#include "engine/output_processor.h"
#include "engine/request_stream.h"
#include "engine/runner.h"
#include "engine/sampling_params.h"
#include "engine/scheduler.h"
#include "engine/speculative/proposer.h"
#include "engine/speculative/speculator.h"
#include "engine/step_executor.h"
#include "kv/page_pool.h"
#include "kv/prefix_cache.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace spindle::engine {

// submit() when the waiting queue is full: the server answers 503.
class EngineOverloaded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One request of a batch (Engine::submit_batch, DpGroup::submit_batch): its prompt and sampling.
struct Submission {
  std::vector<TokenId> prompt;
  SamplingParams params;
};

// No defaults here: config::resolve() decides them (config/server_config.h).
struct EngineOptions {
  SchedulerOptions scheduler;
  int max_queued_requests = 0;
  bool enable_prefix_cache = true;
  std::string model_name;
  // >= 0: the engine thread binds this CUDA device before its first step (a CUDA model's forward
  // runs on the engine thread, and the current device is per thread).
  int cuda_device = -1;
  // Speculative decoding (engine/speculative/): the proposer (borrowed, outlives the engine; null:
  // off), draft tokens per request and step, and speculate on every step (no cost model).
  speculative::Proposer* proposer = nullptr;
  int num_draft_tokens = 0;
  bool speculate_always = false;
  // Decode steps between throughput log lines (and the spec metrics' logging window); 0: none.
  int decode_log_interval = 0;
  // Data parallelism (engine/dp_group.h): the rank of the pool this engine allocates from.
  int dp_rank = 0;
  // Runs on the engine thread before its first step (after cuda_device is bound): CPU ranks pin
  // the thread to their core share there.
  std::function<void()> on_thread_start;
  // Called on the engine thread when a step throws, with the reason, before the step's requests
  // fail (their error reads "DP rank R failed: reason" when dp_name is set).
  std::function<void(const std::string&)> on_step_failure;
  std::string dp_name;  // "DP rank R" with data parallelism; empty for a single engine
  // Schedule and launch the next step while the device runs this one (step_executor.h); only where
  // the runner samples on the device and no proposer is set (--enable-overlap-schedule; off by default).
  bool overlap_schedule = false;
  // Structured output's forced continuations become drafts (step_executor.h). On everywhere
  // (bench/results/2026-12-07-devvm-jump-forward: a 6-key schema 0.73-0.80x the time of
  // unconstrained decoding of its token count on kjv-tiny, 0.76-0.90x its time without); false
  // only where a test or bench needs decoding without it, never a user's switch.
  bool jump_forward = true;
};

class Engine {
 public:
  // Borrows everything; they must outlive the engine. The KV pool's caches must already be bound
  // to the runner's backends (Runner::bind_kv_caches).
  Engine(Runner& runner, const tokenizer::Tokenizer& tokenizer, const tokenizer::ChatTemplate* chat_template,
         kv::PagePool& pool, Metrics& metrics, EngineOptions options);
  ~Engine();

  void start();
  void stop();

  // Thread-safe. The prompt must already be validated (length, vocabulary); params too.
  // Throws EngineOverloaded when max_queued_requests are waiting.
  std::shared_ptr<RequestStream> submit(std::vector<TokenId> prompt, SamplingParams params);
  // The n choices of one request: the prompt once per params, all queued or none
  // (EngineOverloaded when fewer than params.size() places are left), next to each other, so the
  // scheduler takes them in together and computes the shared prompt once (scheduler.h). The
  // streams are in params' order.
  std::vector<std::shared_ptr<RequestStream>> submit_choices(std::vector<TokenId> prompt,
                                                             std::vector<SamplingParams> params);
  // Several requests queued under one lock, all or none (EngineOverloaded when fewer than
  // batch.size() places are left), in batch's order: the engine thread takes them into the
  // scheduler together, so the first step that schedules one of them has seen all of them
  // (`spindle generate` with several prompts: the same batches whatever the threads' timing).
  // The streams are in batch's order. Throws spindle::Error on an empty batch.
  std::vector<std::shared_ptr<RequestStream>> submit_batch(std::vector<Submission> batch);

  // Helpers for clients (thread-safe: the tokenizer is immutable).
  const tokenizer::Tokenizer& tokenizer() const { return tokenizer_; }
  const tokenizer::ChatTemplate* chat_template() const { return chat_template_; }
  int max_model_len() const { return options_.scheduler.max_model_len; }
  // Token ids a request may use: those both the tokenizer and the model's embedding know.
  int vocab_size() const { return std::min(tokenizer_.vocab_size(), runner_.model().config().vocab_size); }
  const std::string& model_name() const { return options_.model_name; }
  // The width of an embedding (the model's hidden size).
  int hidden_size() const { return runner_.model().config().hidden_size; }
  Metrics& metrics() { return metrics_; }
  // The tokens this engine holds: every scheduled request's (prompt + output so far, as of the
  // last step) plus the prompts submitted since. Thread-safe; the router's queue length.
  int64_t num_load_tokens() const { return scheduled_tokens_.load() + incoming_tokens_.load(); }
  // check_integrity() of the KV pool, run on the engine thread between steps (for tests).
  // Throws spindle::Error once stop() has begun.
  bool kv_integrity_ok();

 private:
  void loop();
  // Moves submitted requests into the scheduler (mutex_ held); count: into scheduled_tokens_.
  void take_incoming(bool count);
  void run_step();  // executor_.step(); a step that throws fails every request
  void run_pending_checks();
  void publish_gauges();

  Runner& runner_;
  const tokenizer::Tokenizer& tokenizer_;
  const tokenizer::ChatTemplate* chat_template_;
  Metrics& metrics_;
  EngineOptions options_;
  kv::PageAllocator& allocator_;   // rank 0 of the pool (data parallelism: one engine per rank)
  kv::PrefixCache prefix_cache_;
  Scheduler scheduler_;
  OutputProcessor output_;             // engine thread, but make_state()
  speculative::Speculator speculator_;  // engine thread
  StepExecutor executor_;               // engine thread

  std::mutex mutex_;
  std::condition_variable wake_;
  struct Incoming {
    std::unique_ptr<Request> request;
    std::unique_ptr<RequestOutputState> output;
  };
  std::deque<Incoming> incoming_;
  bool stopping_ = false;
  int num_waiting_ = 0;                      // as of the last step (guarded by mutex_)
  std::vector<std::promise<bool>> checks_;   // integrity checks asked for (guarded by mutex_)
  std::atomic<uint64_t> next_id_{1};
  std::atomic<int64_t> scheduled_tokens_{0};  // set by publish_gauges (engine thread)
  std::atomic<int64_t> incoming_tokens_{0};   // prompts in incoming_
  std::thread thread_;
};

}  // namespace spindle::engine
