// The data-parallel front: N engine ranks behind what the HTTP handlers use (submit, the
// tokenizer, limits, metrics, health). With --dp-size 1 it is one engine and no routing.
//
// Ranks are in-process: each is its own Engine (its thread, scheduler, prefix cache, runner,
// attention backends, model scratch) over its own rank of one PagePool (disjoint pages), with its
// own Metrics; on the CPU each rank's threads run on a disjoint core share (cli/serving_stack.cc).
// A rank whose step throws (a kernel or device error) fails only its own requests ("DP rank R
// failed: ..."), and mark_failed() takes it out of rotation for good: health() says "degraded"
// and which rank, /metrics spindle_dp_rank_up{dp_rank="R"} 0. It is not restarted in-process
// (its state after an unknown fault is not trusted); the process is restarted when no rank is
// left (health "unhealthy", HTTP 503, a liveness probe's cue). A rank is down once its engine
// reported a failed step (MetricsSnapshot::unhealthy_reason) or mark_failed() was called. What in-process ranks cannot isolate:
// a crash (SIGSEGV) or a hang inside one rank takes or stalls the whole process.
//
// Thread-safe: HTTP threads call everything; mark_failed comes from a rank's engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/metrics.h"
#include "engine/router.h"

namespace spindle::engine {

struct DpRankHealth {
  int rank = 0;
  bool up = true;
  std::string error;  // why it left rotation (when !up)
  uint64_t num_failures = 0;
};

struct DpHealth {
  std::string status;  // "ok" (every rank up), "degraded" (some), "unhealthy" (none)
  std::vector<DpRankHealth> ranks;
};

class DpGroup {
 public:
  // Borrowed; they must outlive the group. The engines must share one tokenizer, chat template
  // and model (same vocabulary and limits): rank 0 answers for all.
  struct Rank {
    Engine* engine = nullptr;
    Metrics* metrics = nullptr;
  };
  // Throws spindle::Error when ranks is empty or a pointer is null.
  DpGroup(std::vector<Rank> ranks, RouterOptions router);

  // Routes the prompt to a rank (the router's choice among the ranks in rotation) and submits it
  // there. A rank whose queue is full is skipped for the next choice; EngineOverloaded when every
  // rank's is (or none is left in rotation).
  std::shared_ptr<RequestStream> submit(std::vector<TokenId> prompt, SamplingParams params);
  // The n choices of one request, routed once: every choice goes to the one rank chosen for the
  // prompt (Engine::submit_choices, all or none), so they share its prompt pages there.
  std::vector<std::shared_ptr<RequestStream>> submit_choices(std::vector<TokenId> prompt,
                                                             std::vector<SamplingParams> params);
  // Several requests at once (`spindle generate` with several prompts); the streams in batch's
  // order. One rank: Engine::submit_batch (one lock, all or none). N ranks: each prompt is routed
  // in order (the loads counting the prompts routed before it), then each rank's share is queued
  // there with one Engine::submit_batch; a share its rank refuses (queue full) is routed again one
  // prompt at a time, as submit() would. Throws spindle::Error on an empty batch.
  std::vector<std::shared_ptr<RequestStream>> submit_batch(std::vector<Submission> batch);

  const tokenizer::Tokenizer& tokenizer() const { return front().tokenizer(); }
  const tokenizer::ChatTemplate* chat_template() const { return front().chat_template(); }
  int max_model_len() const { return front().max_model_len(); }
  int vocab_size() const { return front().vocab_size(); }
  const std::string& model_name() const { return front().model_name(); }
  int hidden_size() const { return front().hidden_size(); }
  int dp_size() const { return static_cast<int>(ranks_.size()); }

  // Prometheus text: one rank's metrics as they are (dp 1) or merged per rank and in total
  // (engine/dp_metrics.h), then the DP families: spindle_dp_size, spindle_dp_rank_up,
  // spindle_dp_rank_failures_total, spindle_dp_rank_load_tokens, spindle_router_requests_total
  // (by dp_rank), spindle_router_decisions_total{method, reason}, spindle_router_prefix_index_pages.
  std::string render_metrics() const;
  // Every rank's KV integrity check (engine/engine.h), including failed ranks'.
  bool kv_integrity_ok();
  DpHealth health() const;
  // "" while some rank serves; else why (one rank: its engine's reason, as the single engine
  // reported it; N: every rank's). The server then answers 503 server_unhealthy.
  std::string unhealthy_reason() const;
  // Takes rank out of rotation (its engine thread calls it from EngineOptions::on_step_failure).
  void mark_failed(int rank, const std::string& reason);

 private:
  Engine& front() const { return *ranks_.front().engine; }
  // mutex_ held. Each rank's availability and load tokens, as the router sees them.
  std::vector<RankLoad> rank_loads() const;
  // mutex_ held. Routes the prompt among loads' available ranks and submits the choices there; a
  // rank whose queue is full is marked unavailable in loads and the next choice tried.
  // EngineOverloaded when no rank is left.
  std::vector<std::shared_ptr<RequestStream>> route_choices(const std::vector<TokenId>& prompt,
                                                            const std::vector<SamplingParams>& params,
                                                            std::vector<RankLoad>& loads);
  // mutex_ held. Queues batch[share...] on rank (Engine::submit_batch) and fills their streams;
  // when the rank refuses them all, it is marked unavailable and each is routed by route_choices.
  void submit_share(int rank, const std::vector<size_t>& share, std::vector<Submission>& batch,
                    std::vector<RankLoad>& loads, std::vector<std::shared_ptr<RequestStream>>& streams);

  std::vector<Rank> ranks_;
  mutable std::mutex mutex_;  // guards everything below
  Router router_;
  std::vector<DpRankHealth> health_;
  std::vector<uint64_t> num_routed_;  // requests accepted per rank
};

}  // namespace spindle::engine
