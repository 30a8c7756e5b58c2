// Engine metrics in the Prometheus text exposition format (version 0.0.4).
//
// The engine thread updates them; HTTP threads render them. Every update and render takes one
// mutex (a few hundred updates per step at most: cheap next to a forward pass).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace spindle::engine {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Lines "name_bucket{le=...} n", "name_sum", "name_count".
  void render(const std::string& name, std::string& out) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> buckets_;  // cumulative at render time
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct MetricsSnapshot {
  int64_t num_requests_running = 0;
  int64_t num_requests_waiting = 0;
  int64_t kv_pages_used = 0;    // not on the free list: referenced by a request or cached
  int64_t kv_pages_in_use = 0;  // referenced by at least one request
  int64_t kv_pages_total = 0;
  uint64_t prefix_cache_queries = 0;  // tokens looked up
  uint64_t prefix_cache_hits = 0;     // tokens found
  uint64_t prompt_tokens_total = 0;
  uint64_t generation_tokens_total = 0;
  uint64_t preemptions_total = 0;
  uint64_t requests_finished_total = 0;
  uint64_t requests_aborted_total = 0;
  uint64_t non_finite_logits_total = 0;   // requests ended because their logits held NaN or Inf
  uint64_t step_failures_total = 0;       // engine steps that threw (every running request failed)
  // Non-empty once a step failed (a device error, say): the server answers /health with 503 and
  // this reason, and refuses new requests. Never cleared: the process must be restarted.
  std::string unhealthy_reason;
  // CUDA step graphs (DeviceOps::GraphStats), where the model has them.
  int64_t cuda_graphs = 0;
  uint64_t cuda_graph_captures_total = 0;
  uint64_t cuda_graph_replays_total = 0;
  double cuda_graph_capture_seconds_total = 0;
  uint64_t cuda_graph_memory_bytes = 0;
  // Speculative decoding. A verify is one sequence's step with k >= 1 draft tokens; it accepts
  // a <= k of them and emits a + 1 tokens (the last one the target's own: the bonus token).
  // SGLang's names: accepted tokens include the bonus, forward_ct counts verifies.
  uint64_t spec_total_num_accepted_tokens = 0;  // sum of a + 1
  uint64_t spec_total_num_forward_ct = 0;       // verifies
  uint64_t spec_num_accepted_tokens = 0;        // the last logging window's (--decode-log-interval)
  uint64_t spec_num_forward_ct = 0;
  // vLLM's: drafts (verifies), draft tokens proposed (sum of k), accepted draft tokens (sum of a,
  // no bonus), and per draft position how often it was accepted.
  uint64_t spec_num_drafts = 0;
  uint64_t spec_num_draft_tokens = 0;
  uint64_t spec_num_accepted_draft_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_position;
  uint64_t spec_skipped_steps = 0;  // decode steps the cost model ran without speculation
  // Jump-forward (structured output: the grammar's forced continuation verified as drafts; not in
  // the spec_* counts, which are the proposer's): draft tokens verified and accepted.
  uint64_t jump_forward_draft_tokens_total = 0;
  uint64_t jump_forward_accepted_tokens_total = 0;
  // The overlap schedule (engine.h): steps launched while the step before was still in flight.
  uint64_t overlapped_steps_total = 0;
};

// Where one engine step's wall time went, in seconds (engine.cc measures it). Everything but
// `forward` is host work around the device's forward pass (schedule + build + sample + output).
struct StepSeconds {
  double schedule = 0;  // abort cancelled requests, schedule()
  double build = 0;     // the StepBatch from the plan (Runner::build)
  double forward = 0;   // upload, attention prepare, every layer, logits to the host (Runner::run);
                        // where the device samples: only until the step's work is queued (launches
                        // or a graph replay)
  double device = 0;    // where the device samples: waiting for its forward and sampling
  double sample = 0;    // the host sampler over each logit row (or reading the device's results)
  double output = 0;    // accept: stop checks, detokenize, stream push; release finished requests
  bool decode = false;  // a decode step (every sequence one new token)
};

// Running totals of StepSeconds, per phase (decode steps, prefill or mixed steps).
struct StepTotals {
  uint64_t num_steps = 0;
  StepSeconds seconds;
};

class Metrics {
 public:
  Metrics();

  // Static labels for the info metric (chosen attention backends, model).
  void set_info(std::map<std::string, std::string> labels);
  template <typename F>
  void update(F&& f) {
    std::lock_guard lock(mutex_);
    f(snapshot_);
  }
  void observe_time_to_first_token(double seconds);
  void observe_inter_token_latency(double seconds);
  void observe_e2e_latency(double seconds);
  // Arrival to first being scheduled (vLLM's request_queue_time_seconds).
  void observe_queue_time(double seconds);
  void observe_step(const StepSeconds& step);
  // Totals since start: [0] prefill or mixed steps, [1] decode steps.
  StepTotals step_totals(bool decode) const;
  MetricsSnapshot snapshot() const;
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  MetricsSnapshot snapshot_;
  std::map<std::string, std::string> info_;
  Histogram ttft_, itl_, e2e_, queue_;
  StepTotals steps_[2];
};

}  // namespace spindle::engine
