#include "engine/speculative/draft_model_proposer.h"

#include <algorithm>

#include "util/error.h"

namespace spindle::engine::speculative {

namespace {
constexpr uint64_t kDraftSeedSalt = 0x9e3779b97f4a7c15ull;  // the draft's generator differs from the target's

SamplingParams draft_params(const SamplingParams& p) {
  SamplingParams d = p;
  d.logprobs = false;
  d.top_logprobs = 0;
  return d;
}
}  // namespace

DraftModelProposer::DraftModelProposer(Runner& runner, kv::PagePool& pool, int max_num_batched_tokens)
    : runner_(runner), allocator_(pool.allocator(0)), max_num_batched_tokens_(max_num_batched_tokens) {
  SPINDLE_CHECK(max_num_batched_tokens > 0, "draft proposer: max_num_batched_tokens must be positive");
}

DraftModelProposer::~DraftModelProposer() = default;

void DraftModelProposer::forget(uint64_t request_id) { states_.erase(request_id); }

DraftModelProposer::State& DraftModelProposer::state_for(const ProposalRequest& p) {
  const Request& target = *p.request;
  auto it = states_.find(target.id);
  if (it == states_.end()) {
    State s;
    s.request = std::make_unique<Request>(target.id, target.prompt, allocator_);
    s.sampler = std::make_unique<Sampler>(draft_params(*p.params), p.seed ^ kDraftSeedSalt);
    it = states_.emplace(target.id, std::move(s)).first;
  }
  State& s = it->second;
  // Sync with the target: keep what both contexts share (the accepted drafts), roll back the rest.
  Request& r = *s.request;
  const auto mismatch = std::mismatch(r.output.begin(), r.output.end(), target.output.begin(), target.output.end());
  const int shared = static_cast<int>(r.prompt.size()) + static_cast<int>(mismatch.first - r.output.begin());
  r.num_computed_tokens = std::min(r.num_computed_tokens, shared);
  r.table.truncate(r.num_computed_tokens);
  r.output = target.output;
  return s;
}

void DraftModelProposer::run_round(std::vector<Active>& active, StepPlan& plan) {
  if (plan.empty()) return;
  const StepBatch& batch = runner_.build(plan);
  const int vocab = runner_.model().config().vocab_size;
  bool all_greedy = true;
  for (const auto& s : plan.sequences) {
    if (s.logits_row >= 0 && !states_.at(s.request->id).sampler->params().greedy()) all_greedy = false;
  }
  std::span<float> logits;
  const std::vector<SampledRow>* device_rows = nullptr;
  if (runner_.samples_on_device() && all_greedy) {
    sampling_.clear();
    sampling_.rows.resize(static_cast<size_t>(batch.num_logit_rows()));
    for (const auto& s : plan.sequences) {
      if (s.logits_row < 0) continue;
      const State& st = states_.at(s.request->id);
      add_sampling_row(st.sampler->params(), st.sampler->seed(), st.request->output.size(), st.request->prompt,
                       st.request->output, static_cast<size_t>(s.logits_row), sampling_);
    }
    device_rows = &runner_.run_and_sample(sampling_);
  } else {
    logits = runner_.run(batch);
  }
  for (const auto& s : plan.sequences) s.request->num_computed_tokens += s.num_new_tokens;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const ScheduledSequence& s = plan.sequences[i];
    if (s.logits_row < 0) continue;
    // propose() appends active[k] as it gives out logit row k (every round).
    Active& a = active.at(static_cast<size_t>(s.logits_row));
    SPINDLE_CHECK(a.state->request.get() == s.request, "draft proposer: logit row {} is not its active request's",
                  s.logits_row);
    Request& r = *a.state->request;
    Sampler& sampler = *a.state->sampler;
    DraftProposal& out = *a.proposal->out;
    TokenId token;
    if (device_rows != nullptr) {
      token = (*device_rows)[static_cast<size_t>(s.logits_row)].token;
    } else {
      const std::span<float> row = logits.subspan(static_cast<size_t>(s.logits_row) * vocab, vocab);
      if (sampler.params().greedy()) {
        token = sampler.sample(row, r.prompt, r.output).token;
      } else {
        out.q.push_back(sampler.distribution(row, r.prompt, r.output));
        token = sampler.draw_from(out.q.back());
      }
    }
    out.tokens.push_back(token);
    r.output.push_back(token);
  }
}

void DraftModelProposer::propose(std::span<const ProposalRequest> requests) {
  std::vector<Active> active;
  StepPlan plan;
  int budget = max_num_batched_tokens_;
  // Round 0: catch up with the target, then the first draft token.
  for (const ProposalRequest& p : requests) {
    State& s = state_for(p);
    Request& r = *s.request;
    const int missing = r.num_tokens() - r.num_computed_tokens;
    const int n = std::min(missing, budget);
    if (n <= 0) continue;
    if (!r.table.extend(std::max(0, r.num_computed_tokens + n - r.table.num_tokens()))) {
      forget(r.id);  // out of draft pages: no proposal; it starts over when pages are free
      continue;
    }
    budget -= n;
    ScheduledSequence seq;
    seq.request = &r;
    seq.num_new_tokens = n;
    seq.num_cached_tokens = r.num_computed_tokens;
    if (n == missing) {
      seq.logits_row = plan.num_logit_rows++;
      active.push_back({&s, &p});
    }
    plan.num_tokens += n;
    plan.sequences.push_back(seq);
  }
  run_round(active, plan);
  // Rounds 1..k-1: one token each, for the requests that want more.
  for (;;) {
    plan = StepPlan{};
    std::vector<Active> next;
    for (Active& a : active) {
      Request& r = *a.state->request;
      if (static_cast<int>(a.proposal->out->tokens.size()) >= a.proposal->max_draft_tokens) continue;
      if (!r.table.extend(std::max(0, r.num_computed_tokens + 1 - r.table.num_tokens()))) continue;  // keep what it has
      ScheduledSequence seq;
      seq.request = &r;
      seq.num_new_tokens = 1;
      seq.num_cached_tokens = r.num_computed_tokens;
      seq.logits_row = plan.num_logit_rows++;
      plan.num_tokens += 1;
      plan.sequences.push_back(seq);
      next.push_back(a);
    }
    if (next.empty()) break;
    active = std::move(next);
    run_round(active, plan);
  }
}

void DraftModelProposer::check_integrity() const {
  std::vector<const kv::BlockTable*> live;
  for (const auto& [id, s] : states_) live.push_back(&s.request->table);
  kv::check_integrity(allocator_, live);
}

}  // namespace spindle::engine::speculative
