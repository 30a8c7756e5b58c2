// The engine: one thread that owns the scheduler, the KV pages and the model, and runs steps.
//
// Clients (HTTP handlers, `spindle generate`) call submit() from any thread and read the
// returned RequestStream. Each step: schedule (admit waiting requests by free pages, reuse
// prefix-cache pages, chunk long prompts, preempt the newest request by recompute when pages run
// out) -> one model forward over every scheduled token -> sample -> detokenize, match stop
// strings -> push events -> free the pages of finished or cancelled requests.
//
// The overlap schedule (EngineOptions::overlap_schedule, SGLang's idea; one step of lookahead):
// where the runner samples on the device, step N+1 is scheduled, built and launched while the
// device still runs step N, and only then are N's tokens collected and emitted. Step N's tokens
// are pending in N+1's plan (Request::num_pending_tokens count in the context; the runner has the
// device copy them into N+1's batch), so the host's work of a step hides behind the device's.
// Outputs do not change: a request that N ends (EOS, a stop string) has computed one more token
// in N+1, which is dropped, and it is released after N+1 is collected; a request whose pending
// token surely ends it (max_tokens, the model length) is not scheduled in N+1 (Request::hold).
// Steps whose next draw needs the last token on the host (a penalty of a request with a pending
// token), speculative decoding and host sampling run one step at a time, as without it; so do
// steps with prefill work, and the step after a request arrives or waits (collecting first admits
// it one step sooner): only decode steps run ahead.
#pragma once

#include <algorithm>
#include <atomic>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/metrics.h"
#include "engine/request_stream.h"
#include "engine/sampling_params.h"
#include "engine/scheduler.h"
#include "engine/speculative/verifier.h"
#include "kv/page_pool.h"
#include "kv/prefix_cache.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/speculative/cost_model.h"
#include "engine/speculative/proposer.h"
#include "engine/stop_matcher.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace spindle::engine {

// submit() when the waiting queue is full: the server answers 503.
class EngineOverloaded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the client of a request reads, kept next to (not inside) the scheduler's Request.
struct RequestOutputState {
  RequestOutputState(SamplingParams params, uint64_t seed, std::shared_ptr<RequestStream> stream,
                     const tokenizer::Tokenizer& tokenizer);

  Sampler sampler;
  std::shared_ptr<RequestStream> stream;
  tokenizer::IncrementalDetokenizer detokenizer;
  StopMatcher stop_matcher;
  std::optional<Clock::time_point> last_token_time;
  // Speculative decoding: this request's measured acceptance, as decayed counts of accepted
  // drafts and of rejections (a verify that stopped before its last draft).
  double spec_accepted = 0, spec_rejected = 0;
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
  // Speculative decoding (engine/speculative/): the proposer (borrowed, outlives the engine; null: off),
  // draft tokens per request and step, and speculate on every step (no cost model).
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
  // Schedule and launch the next step while the device runs this one (above); only where the
  // runner samples on the device and no proposer is set (--enable-overlap-schedule; off by default).
  bool overlap_schedule = false;
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

  // Helpers for clients (thread-safe: the tokenizer is immutable).
  const tokenizer::Tokenizer& tokenizer() const { return tokenizer_; }
  const tokenizer::ChatTemplate* chat_template() const { return chat_template_; }
  int max_model_len() const { return options_.scheduler.max_model_len; }
  // Token ids a request may use: those both the tokenizer and the model's embedding know.
  int vocab_size() const { return std::min(tokenizer_.vocab_size(), runner_.model().config().vocab_size); }
  const std::string& model_name() const { return options_.model_name; }
  Metrics& metrics() { return metrics_; }
  // The tokens this engine holds: every scheduled request's (prompt + output so far, as of the
  // last step) plus the prompts submitted since. Thread-safe; the router's queue length.
  int64_t num_load_tokens() const { return scheduled_tokens_.load() + incoming_tokens_.load(); }
  // check_integrity() of the KV pool, run on the engine thread between steps (for tests).
  // Throws spindle::Error once stop() has begun.
  bool kv_integrity_ok();

 private:
  void loop();
  void run_step();
  // A launched step not yet collected (the overlap schedule): its plan and its times so far.
  struct LaunchedStep {
    StepPlan plan;
    StepSeconds seconds;
    int max_drafts = 0;
    Clock::time_point start;
  };
  // Whether the next step may be launched before the one in flight is collected.
  bool can_overlap() const;
  // Sets Request::hold on running requests whose pending token surely ends them.
  void hold_finishing_requests(bool hold);
  // Collects `step` (launched; not in_flight_ any more) and emits its tokens.
  void finish_step(LaunchedStep& step);
  // finish_step of in_flight_, if any.
  void collect_in_flight();
  // A step's results: tokens accepted (or verified), requests finished, prompts published, the
  // step's metrics. device_rows: the device's samples (null: host logits in `logits`).
  void process_step(LaunchedStep& step, std::span<float> logits, const std::vector<SampledRow>* device_rows);
  // Releases every finished request that no launched step holds.
  void release_finished();
  // After a failed step or at shutdown: forgets launched steps (waits for the device's work).
  void drop_in_flight();
  // Fills Request::draft of the decoding requests that may speculate this step (cost model
  // permitting); true when any got a draft.
  bool propose_drafts();
  // A speculating sequence's logit rows verified and its accepted tokens appended.
  void accept_verified(Request& r, RequestOutputState& o, const speculative::Verified& v, int match_length);
  void log_decode_window(int num_running);
  void run_pending_checks();
  void publish_gauges();
  void fail_all(const std::string& message);
  void abort_cancelled();
  void finish_over_capacity();
  // The text a finishing request still holds back (a partial UTF-8 sequence, the start of a
  // possible stop string), cut at a stop string if one completes.
  static std::string flush_held_text(RequestOutputState& o);
  void count_finished(const Request& r, Clock::time_point now);
  void accept_token(Request& r, RequestOutputState& o, const SampledToken& sampled);
  bool is_stop_token(const RequestOutputState& o, TokenId token) const;
  void release(Request* r, bool cache_pages);  // the scheduler's pages and the output state

  Runner& runner_;
  const tokenizer::Tokenizer& tokenizer_;
  const tokenizer::ChatTemplate* chat_template_;
  Metrics& metrics_;
  EngineOptions options_;
  kv::PageAllocator& allocator_;   // rank 0 of the pool (data parallelism: one engine per rank)
  kv::PrefixCache prefix_cache_;
  Scheduler scheduler_;

  std::mutex mutex_;
  std::condition_variable wake_;
  struct Incoming {
    std::unique_ptr<Request> request;
    std::unique_ptr<RequestOutputState> output;
  };
  std::deque<Incoming> incoming_;
  std::unordered_map<uint64_t, std::unique_ptr<RequestOutputState>> outputs_;  // by Request::id (engine thread)
  SamplingBatch sampling_;  // the step's device sampling rows (engine thread)
  std::optional<LaunchedStep> in_flight_;  // the overlap schedule's step on the device (engine thread)
  // Speculative decoding (engine thread): this step's proposals by request id, the cost model.
  std::unordered_map<uint64_t, speculative::DraftProposal> proposals_;
  std::vector<speculative::ProposalRequest> proposal_requests_;
  speculative::CostModel cost_model_;
  int step_tokens_ = 0;  // tokens appended in the current step (engine thread)
  // Every request's verifies together, the same decayed counts: the prior for a new request.
  double spec_accepted_all_ = 0, spec_rejected_all_ = 0;
  // N-gram drafts by match length (DraftProposal::match_length: 1, 2, ..., kMatchClasses - 1 or
  // more; [0] unused), every request's verifies together: a longer match is accepted more often.
  static constexpr int kMatchClasses = 7;
  std::array<double, kMatchClasses> match_accepted_{}, match_rejected_{};
  static int match_class(int match_length) { return std::min(match_length, kMatchClasses - 1); }
  // Per-token acceptance of the request's next drafts: by match length for an n-gram proposal
  // (match_length > 0), else the request's own (both with the pool's as a prior).
  double acceptance_of(const RequestOutputState& o, int match_length) const;
  std::vector<double> expected_;  // scratch: expected tokens per draft count (propose_drafts)
  // The decode log window: steps, tokens and spec counts since the last line.
  struct DecodeWindow {
    int steps = 0;
    uint64_t tokens = 0;
    uint64_t spec_accepted = 0, spec_forwards = 0, spec_drafted = 0, spec_accepted_drafts = 0;
    Clock::time_point start = Clock::now();
  } window_;
  bool stopping_ = false;
  int num_waiting_ = 0;                      // as of the last step (guarded by mutex_)
  std::vector<std::promise<bool>> checks_;   // integrity checks asked for (guarded by mutex_)
  std::atomic<uint64_t> next_id_{1};
  std::atomic<int64_t> scheduled_tokens_{0};  // set by publish_gauges (engine thread)
  std::atomic<int64_t> incoming_tokens_{0};   // prompts in incoming_
  std::thread thread_;
};

}  // namespace spindle::engine
