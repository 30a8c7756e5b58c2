#include "engine/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace spindle::engine {

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), buckets_(bounds_.size(), 0) {}

void Histogram::observe(double value) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  if (it != bounds_.end()) ++buckets_[it - bounds_.begin()];
  sum_ += value;
  ++count_;
}

void Histogram::render(const std::string& name, std::string& out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += buckets_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
}

namespace {
const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                             0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void gauge(std::string& out, const char* name, const char* help, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, value);
}
void counter(std::string& out, const char* name, const char* help, uint64_t value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, value);
}

// Speculative decoding: SGLang's four names exactly (mission), vLLM's counters under spindle_.
void render_spec(const MetricsSnapshot& s, std::string& out) {
  gauge(out, "spec_num_accepted_tokens",
        "Speculative decoding: tokens accepted (bonus token included) in the last logging window.",
        static_cast<double>(s.spec_num_accepted_tokens));
  gauge(out, "spec_num_forward_ct", "Speculative decoding: verify forwards (per sequence) in the last logging window.",
        static_cast<double>(s.spec_num_forward_ct));
  counter(out, "spec_total_num_accepted_tokens", "Speculative decoding: tokens accepted (bonus included) since start.",
          s.spec_total_num_accepted_tokens);
  counter(out, "spec_total_num_forward_ct", "Speculative decoding: verify forwards (per sequence) since start.",
          s.spec_total_num_forward_ct);
  gauge(out, "spindle_spec_accept_length", "Speculative decoding: accepted tokens (bonus included) per verify, since start.",
        s.spec_total_num_forward_ct ? double(s.spec_total_num_accepted_tokens) / double(s.spec_total_num_forward_ct) : 0.0);
  gauge(out, "spindle_spec_accept_rate", "Speculative decoding: accepted draft tokens / proposed draft tokens, since start.",
        s.spec_num_draft_tokens ? double(s.spec_num_accepted_draft_tokens) / double(s.spec_num_draft_tokens) : 0.0);
  counter(out, "spindle_spec_decode_num_drafts_total", "Speculative decoding: drafts verified (vLLM's num_drafts).",
          s.spec_num_drafts);
  counter(out, "spindle_spec_decode_num_draft_tokens_total", "Speculative decoding: draft tokens proposed.",
          s.spec_num_draft_tokens);
  counter(out, "spindle_spec_decode_num_accepted_tokens_total",
          "Speculative decoding: draft tokens accepted (no bonus token).", s.spec_num_accepted_draft_tokens);
  out += "# HELP spindle_spec_decode_num_accepted_tokens_per_pos_total Speculative decoding: acceptances per draft "
         "position.\n# TYPE spindle_spec_decode_num_accepted_tokens_per_pos_total counter\n";
  for (size_t i = 0; i < s.spec_accepted_per_position.size(); ++i) {
    out += fmt::format("spindle_spec_decode_num_accepted_tokens_per_pos_total{{position=\"{}\"}} {}\n", i,
                       s.spec_accepted_per_position[i]);
  }
  counter(out, "spindle_spec_skipped_steps_total",
          "Speculative decoding: decode steps run without it because measured step times said it costs more.",
          s.spec_skipped_steps);
  counter(out, "spindle_jump_forward_draft_tokens_total",
          "Structured output: tokens of the grammar's forced continuations verified as drafts (jump-forward).",
          s.jump_forward_draft_tokens_total);
  counter(out, "spindle_jump_forward_accepted_tokens_total",
          "Structured output: jump-forward draft tokens the model's own draws accepted.",
          s.jump_forward_accepted_tokens_total);
}
}  // namespace

Metrics::Metrics() : ttft_(kLatencyBuckets), itl_(kLatencyBuckets), e2e_(kLatencyBuckets), queue_(kLatencyBuckets) {}

void Metrics::set_info(std::map<std::string, std::string> labels) {
  std::lock_guard lock(mutex_);
  info_ = std::move(labels);
}
void Metrics::observe_time_to_first_token(double s) {
  std::lock_guard lock(mutex_);
  ttft_.observe(s);
}
void Metrics::observe_inter_token_latency(double s) {
  std::lock_guard lock(mutex_);
  itl_.observe(s);
}
void Metrics::observe_e2e_latency(double s) {
  std::lock_guard lock(mutex_);
  e2e_.observe(s);
}
void Metrics::observe_queue_time(double s) {
  std::lock_guard lock(mutex_);
  queue_.observe(s);
}
void Metrics::observe_step(const StepSeconds& t) {
  std::lock_guard lock(mutex_);
  StepTotals& total = steps_[t.decode ? 1 : 0];
  ++total.num_steps;
  total.seconds.schedule += t.schedule;
  total.seconds.build += t.build;
  total.seconds.forward += t.forward;
  total.seconds.device += t.device;
  total.seconds.sample += t.sample;
  total.seconds.output += t.output;
}
StepTotals Metrics::step_totals(bool decode) const {
  std::lock_guard lock(mutex_);
  return steps_[decode ? 1 : 0];
}
MetricsSnapshot Metrics::snapshot() const {
  std::lock_guard lock(mutex_);
  return snapshot_;
}

std::string Metrics::render() const {
  std::lock_guard lock(mutex_);
  const MetricsSnapshot& s = snapshot_;
  std::string out;
  gauge(out, "spindle_num_requests_running", "Requests in the running batch.", s.num_requests_running);
  gauge(out, "spindle_num_requests_waiting", "Requests waiting to be scheduled.", s.num_requests_waiting);
  gauge(out, "spindle_kv_pages_used", "KV cache pages in use or cached.", s.kv_pages_used);
  gauge(out, "spindle_kv_pages_in_use", "KV cache pages referenced by requests (cached-only pages excluded).",
        s.kv_pages_in_use);
  gauge(out, "spindle_kv_pages_total", "KV cache pages in the pool.", s.kv_pages_total);
  gauge(out, "spindle_kv_cache_usage_ratio", "Fraction of KV pages in use.",
        s.kv_pages_total ? double(s.kv_pages_used) / double(s.kv_pages_total) : 0.0);
  gauge(out, "spindle_kv_cache_in_use_ratio",
        "Fraction of KV pages referenced by requests (cached-only pages, evictable, excluded): the load signal "
        "for an endpoint picker.",
        s.kv_pages_total ? double(s.kv_pages_in_use) / double(s.kv_pages_total) : 0.0);
  counter(out, "spindle_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", s.prefix_cache_queries);
  counter(out, "spindle_prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", s.prefix_cache_hits);
  counter(out, "spindle_prompt_tokens_total", "Prompt tokens processed.", s.prompt_tokens_total);
  counter(out, "spindle_generation_tokens_total", "Tokens generated.", s.generation_tokens_total);
  counter(out, "spindle_num_preemptions_total", "Requests preempted (recomputed later).", s.preemptions_total);
  counter(out, "spindle_requests_finished_total", "Requests finished.", s.requests_finished_total);
  counter(out, "spindle_requests_aborted_total", "Requests aborted (client gone or cancelled).", s.requests_aborted_total);
  counter(out, "spindle_non_finite_logits_total", "Requests ended with an error: their logits held NaN or Inf.",
          s.non_finite_logits_total);
  counter(out, "spindle_step_failures_total", "Engine steps that failed (their requests failed).", s.step_failures_total);
  gauge(out, "spindle_healthy", "1 while no engine step has failed.", s.unhealthy_reason.empty() ? 1 : 0);
  gauge(out, "spindle_cuda_graphs", "CUDA step graphs held (one per decode batch size seen).", s.cuda_graphs);
  counter(out, "spindle_cuda_graph_captures_total", "CUDA step graph captures (recaptures included).",
          s.cuda_graph_captures_total);
  counter(out, "spindle_cuda_graph_replays_total", "Decode steps replayed from a CUDA graph.", s.cuda_graph_replays_total);
  counter(out, "spindle_overlapped_steps_total",
          "Steps launched while the step before was still on the device (the overlap schedule).",
          s.overlapped_steps_total);
  gauge(out, "spindle_cuda_graph_capture_seconds_total", "Seconds spent capturing CUDA step graphs.",
        s.cuda_graph_capture_seconds_total);
  gauge(out, "spindle_cuda_graph_memory_bytes", "Device memory the CUDA step graphs took.", s.cuda_graph_memory_bytes);
  render_spec(s, out);
  out += "# HELP spindle_time_to_first_token_seconds Time from arrival to the first token.\n"
         "# TYPE spindle_time_to_first_token_seconds histogram\n";
  ttft_.render("spindle_time_to_first_token_seconds", out);
  out += "# HELP spindle_inter_token_latency_seconds Time between consecutive tokens of a request.\n"
         "# TYPE spindle_inter_token_latency_seconds histogram\n";
  itl_.render("spindle_inter_token_latency_seconds", out);
  out += "# HELP spindle_e2e_request_latency_seconds Time from arrival to the last token.\n"
         "# TYPE spindle_e2e_request_latency_seconds histogram\n";
  e2e_.render("spindle_e2e_request_latency_seconds", out);
  out += "# HELP spindle_request_queue_time_seconds Time from arrival to first being scheduled.\n"
         "# TYPE spindle_request_queue_time_seconds histogram\n";
  queue_.render("spindle_request_queue_time_seconds", out);
  out += "# HELP spindle_step_seconds_total Engine step wall time by part (forward: the forward pass, or where the "
         "device samples only its launches; device: waiting for the device's forward and sampling; the rest is host "
         "work).\n# TYPE spindle_step_seconds_total counter\n";
  for (int decode = 0; decode < 2; ++decode) {
    const StepSeconds& t = steps_[decode].seconds;
    const char* phase = decode ? "decode" : "prefill";
    const std::pair<const char*, double> parts[] = {{"schedule", t.schedule}, {"build", t.build}, {"forward", t.forward},
                                                    {"device", t.device},     {"sample", t.sample},
                                                    {"output", t.output}};
    for (const auto& [part, seconds] : parts) {
      out += fmt::format("spindle_step_seconds_total{{phase=\"{}\",part=\"{}\"}} {}\n", phase, part, seconds);
    }
  }
  out += "# HELP spindle_steps_total Engine steps run.\n# TYPE spindle_steps_total counter\n";
  out += fmt::format("spindle_steps_total{{phase=\"prefill\"}} {}\nspindle_steps_total{{phase=\"decode\"}} {}\n",
                     steps_[0].num_steps, steps_[1].num_steps);
  out += "# HELP spindle_info Static facts: model and chosen attention backends.\n# TYPE spindle_info gauge\nspindle_info{";
  bool first = true;
  for (const auto& [k, v] : info_) {
    out += fmt::format("{}{}=\"{}\"", first ? "" : ",", k, escape_label(v));
    first = false;
  }
  out += "} 1\n";
  return out;
}

}  // namespace spindle::engine
