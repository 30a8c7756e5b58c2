#include "engine/dp_group.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/dp_metrics.h"
#include "util/error.h"

namespace spindle::engine {
namespace {
bool any_available(const std::vector<RankLoad>& loads) {
  return std::any_of(loads.begin(), loads.end(), [](const RankLoad& l) { return l.available; });
}
}  // namespace

DpGroup::DpGroup(std::vector<Rank> ranks, RouterOptions router)
    : ranks_(std::move(ranks)), router_(static_cast<int>(ranks_.size()), router) {
  SPINDLE_CHECK(!ranks_.empty(), "a DP group needs at least one rank");
  for (size_t r = 0; r < ranks_.size(); ++r) {
    SPINDLE_CHECK(ranks_[r].engine && ranks_[r].metrics, "DP rank {} has no engine or metrics", r);
    health_.push_back(DpRankHealth{static_cast<int>(r), true, "", 0});
  }
  num_routed_.assign(ranks_.size(), 0);
}

std::shared_ptr<RequestStream> DpGroup::submit(std::vector<TokenId> prompt, SamplingParams params) {
  std::vector<SamplingParams> one;
  one.push_back(std::move(params));
  return submit_choices(std::move(prompt), std::move(one)).front();
}

std::vector<std::shared_ptr<RequestStream>> DpGroup::submit_choices(std::vector<TokenId> prompt,
                                                                    std::vector<SamplingParams> params) {
  const uint64_t n = params.size();
  if (ranks_.size() == 1) {  // no routing, and the engine's own errors as they are
    auto streams = front().submit_choices(std::move(prompt), std::move(params));
    std::lock_guard lock(mutex_);
    num_routed_[0] += n;
    return streams;
  }
  std::lock_guard lock(mutex_);
  std::vector<RankLoad> loads = rank_loads();
  return route_choices(prompt, params, loads);
}

std::vector<std::shared_ptr<RequestStream>> DpGroup::submit_batch(std::vector<Submission> batch) {
  SPINDLE_CHECK(!batch.empty(), "submit_batch needs at least one request");
  const uint64_t n = batch.size();
  if (ranks_.size() == 1) {
    auto streams = front().submit_batch(std::move(batch));
    std::lock_guard lock(mutex_);
    num_routed_[0] += n;
    return streams;
  }
  std::lock_guard lock(mutex_);
  std::vector<RankLoad> loads = rank_loads();
  std::vector<std::vector<size_t>> shares(ranks_.size());  // batch indices per rank
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!any_available(loads)) throw EngineOverloaded("every data-parallel rank has failed");
    const int rank = router_.route(batch[i].prompt, loads).rank;
    loads[static_cast<size_t>(rank)].load_tokens += static_cast<int64_t>(batch[i].prompt.size());
    shares[static_cast<size_t>(rank)].push_back(i);
  }
  std::vector<std::shared_ptr<RequestStream>> streams(batch.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (!shares[r].empty()) submit_share(static_cast<int>(r), shares[r], batch, loads, streams);
  }
  return streams;
}

void DpGroup::submit_share(int rank, const std::vector<size_t>& share, std::vector<Submission>& batch,
                           std::vector<RankLoad>& loads, std::vector<std::shared_ptr<RequestStream>>& streams) {
  std::vector<Submission> part;
  for (const size_t i : share) part.push_back(batch[i]);  // copies: a refused share is routed again
  try {
    auto got = ranks_[static_cast<size_t>(rank)].engine->submit_batch(std::move(part));
    for (size_t k = 0; k < share.size(); ++k) {
      router_.record(rank, batch[share[k]].prompt);
      streams[share[k]] = std::move(got[k]);
    }
    num_routed_[static_cast<size_t>(rank)] += share.size();
  } catch (const EngineOverloaded&) {
    loads[static_cast<size_t>(rank)].available = false;
    for (const size_t i : share) streams[i] = route_choices(batch[i].prompt, {batch[i].params}, loads).front();
  }
}

std::vector<RankLoad> DpGroup::rank_loads() const {
  std::vector<RankLoad> loads(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    loads[r].available = health_[r].up && ranks_[r].metrics->snapshot().unhealthy_reason.empty();
    loads[r].load_tokens = ranks_[r].engine->num_load_tokens();
  }
  return loads;
}

std::vector<std::shared_ptr<RequestStream>> DpGroup::route_choices(const std::vector<TokenId>& prompt,
                                                                   const std::vector<SamplingParams>& params,
                                                                   std::vector<RankLoad>& loads) {
  std::string last_error = "every data-parallel rank has failed";
  for (;;) {
    if (!any_available(loads)) throw EngineOverloaded(last_error);
    const RouteDecision d = router_.route(prompt, loads);
    try {
      auto streams = ranks_[static_cast<size_t>(d.rank)].engine->submit_choices(prompt, params);
      router_.record(d.rank, prompt);
      num_routed_[static_cast<size_t>(d.rank)] += params.size();
      return streams;
    } catch (const EngineOverloaded& e) {
      last_error = e.what();
      loads[static_cast<size_t>(d.rank)].available = false;  // full: try the next choice
    }
  }
}

void DpGroup::mark_failed(int rank, const std::string& reason) {
  std::lock_guard lock(mutex_);
  SPINDLE_CHECK(rank >= 0 && rank < dp_size(), "DP rank {} does not exist", rank);
  DpRankHealth& h = health_[static_cast<size_t>(rank)];
  ++h.num_failures;
  if (!h.up) return;
  h.up = false;
  h.error = reason;
  router_.forget(rank);
  int up = 0;
  for (const auto& x : health_) up += x.up ? 1 : 0;
  spdlog::error("DP rank {} failed and is out of rotation ({} of {} ranks serve): {}", rank, up, dp_size(), reason);
}

DpHealth DpGroup::health() const {
  DpHealth out;
  {
    std::lock_guard lock(mutex_);
    out.ranks = health_;
  }
  int up = 0;
  for (auto& h : out.ranks) {
    // The engine's own record of a failed step (set before its requests fail).
    if (std::string reason = ranks_[static_cast<size_t>(h.rank)].metrics->snapshot().unhealthy_reason;
        !reason.empty() && h.up) {
      h.up = false;
      h.error = std::move(reason);
    }
    up += h.up ? 1 : 0;
  }
  out.status = up == dp_size() ? "ok" : up > 0 ? "degraded" : "unhealthy";
  return out;
}

std::string DpGroup::unhealthy_reason() const {
  const DpHealth h = health();
  if (h.status != "unhealthy") return "";
  if (ranks_.size() == 1) return h.ranks.front().error;
  std::string out = "every DP rank failed:";
  for (const auto& r : h.ranks) out += fmt::format(" rank {}: {};", r.rank, r.error);
  out.pop_back();
  return out;
}

bool DpGroup::kv_integrity_ok() {
  bool ok = true;
  for (const Rank& r : ranks_) ok = r.engine->kv_integrity_ok() && ok;
  return ok;
}

std::string DpGroup::render_metrics() const {
  std::string out;
  if (ranks_.size() == 1) {
    out = ranks_[0].metrics->render();
  } else {
    std::vector<std::string> texts;
    texts.reserve(ranks_.size());
    for (const Rank& r : ranks_) texts.push_back(r.metrics->render());
    out = merge_rank_metrics(texts);
  }
  const DpHealth health_now = health();
  std::lock_guard lock(mutex_);
  out += fmt::format("# HELP spindle_dp_size Data-parallel engine ranks.\n# TYPE spindle_dp_size gauge\nspindle_dp_size {}\n",
                     dp_size());
  out += "# HELP spindle_dp_rank_up 1 while the rank is in rotation, 0 once it failed.\n# TYPE spindle_dp_rank_up gauge\n";
  for (const auto& h : health_now.ranks) {
    out += fmt::format("spindle_dp_rank_up{{dp_rank=\"{}\"}} {}\n", h.rank, h.up ? 1 : 0);
  }
  out += "# HELP spindle_dp_rank_failures_total Engine steps of the rank that threw.\n"
         "# TYPE spindle_dp_rank_failures_total counter\n";
  for (const auto& h : health_) {
    out += fmt::format("spindle_dp_rank_failures_total{{dp_rank=\"{}\"}} {}\n", h.rank, h.num_failures);
  }
  out += "# HELP spindle_dp_rank_load_tokens Tokens the rank holds (waiting + running), as the router sees them.\n"
         "# TYPE spindle_dp_rank_load_tokens gauge\n";
  for (size_t r = 0; r < ranks_.size(); ++r) {
    out += fmt::format("spindle_dp_rank_load_tokens{{dp_rank=\"{}\"}} {}\n", r, ranks_[r].engine->num_load_tokens());
  }
  out += "# HELP spindle_router_requests_total Requests the router sent to the rank.\n"
         "# TYPE spindle_router_requests_total counter\n";
  for (size_t r = 0; r < ranks_.size(); ++r) {
    out += fmt::format("spindle_router_requests_total{{dp_rank=\"{}\"}} {}\n", r, num_routed_[r]);
  }
  out += "# HELP spindle_router_decisions_total Routing decisions by method and reason.\n"
         "# TYPE spindle_router_decisions_total counter\n";
  const std::string_view method = config::load_balance_method_name(router_.options().method);
  for (int i = 0; i < kNumRouteReasons; ++i) {
    const auto reason = static_cast<RouteReason>(i);
    out += fmt::format("spindle_router_decisions_total{{method=\"{}\",reason=\"{}\"}} {}\n", method,
                       route_reason_name(reason), router_.num_decisions(reason));
  }
  out += "# HELP spindle_router_prefix_index_pages Prompt pages in the router's prefix index of the rank.\n"
         "# TYPE spindle_router_prefix_index_pages gauge\n";
  for (int r = 0; r < dp_size(); ++r) {
    out += fmt::format("spindle_router_prefix_index_pages{{dp_rank=\"{}\"}} {}\n", r, router_.index_pages(r));
  }
  return out;
}

}  // namespace spindle::engine
