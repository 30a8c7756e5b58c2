#include "engine/speculative/speculator.h"

#include <spdlog/spdlog.h>

namespace spindle::engine::speculative {

Speculator::Speculator(SpeculatorOptions options, Metrics& metrics, SamplerOf sampler_of)
    : options_(options), metrics_(metrics), sampler_of_(std::move(sampler_of)), cost_model_(options.speculate_always) {}

double Speculator::acceptance_of(uint64_t request_id, int match_length) const {
  // Per-token acceptance a = accepted / (accepted + rejected) with the pool's counts as a prior
  // worth two verifies, itself with an even prior of 1 + 1: never 0, since a draft count that is
  // expected to add nothing is never run again (and so never measured again).
  const double prior_a = (all_.accepted + 1) / (all_.accepted + all_.rejected + 2);
  if (match_length > 0) {
    const Counts& c = match_[static_cast<size_t>(match_class(match_length))];
    return (c.accepted + 2 * prior_a) / (c.accepted + c.rejected + 2);
  }
  const auto it = requests_.find(request_id);
  const Counts own = it == requests_.end() ? Counts{} : it->second;
  return (own.accepted + 2 * prior_a) / (own.accepted + own.rejected + 2);
}

bool Speculator::propose(std::span<Request* const> running) {
  for (Request* r : running) r->draft.clear();
  proposals_.clear();
  if (options_.proposer == nullptr || options_.num_draft_tokens <= 0) return false;
  const int num_decoding = gather(running);
  if (proposal_requests_.empty()) return false;
  // A cheap proposer proposes first, so the decision sees which requests really have drafts.
  const bool cheap = options_.proposer->cheap();
  if (cheap) run_proposer();
  if (!expect_tokens(num_decoding, cheap)) return false;
  const int k = cost_model_.choose_drafts(num_decoding, expected_);
  if (auto change = cost_model_.take_change()) spdlog::info("{}", *change);
  if (k == 0) {
    metrics_.update([](MetricsSnapshot& s) { ++s.spec_skipped_steps; });
    return false;
  }
  for (ProposalRequest& q : proposal_requests_) q.max_draft_tokens = std::min(q.max_draft_tokens, k);
  if (!cheap) run_proposer();
  bool any = false;
  for (const ProposalRequest& q : proposal_requests_) {
    Request& r = *const_cast<Request*>(q.request);
    r.draft.assign(q.out->tokens.begin(), q.out->tokens.begin() + std::min<size_t>(q.out->tokens.size(), q.max_draft_tokens));
    any = any || !r.draft.empty();
  }
  return any;
}

int Speculator::gather(std::span<Request* const> running) {
  proposal_requests_.clear();
  int num_decoding = 0;
  for (Request* r : running) {
    if (r->preempted || r->finished || r->num_computed_tokens != r->num_tokens() - 1) continue;
    ++num_decoding;
    const Sampler& sampler = sampler_of_(r->id);
    const SamplingParams& p = sampler.params();
    // A verify step emits up to k + 1 tokens and writes k positions past the context.
    const int room = std::min({options_.num_draft_tokens, p.max_tokens - static_cast<int>(r->output.size()) - 1,
                               options_.max_model_len - r->num_tokens()});
    if (!p.speculative || room < 1) continue;
    ProposalRequest q;
    q.request = r;
    q.params = &p;
    q.seed = sampler.seed();
    q.max_draft_tokens = room;
    proposal_requests_.push_back(q);
  }
  return num_decoding;
}

void Speculator::run_proposer() {
  for (ProposalRequest& q : proposal_requests_) q.out = &proposals_[q.request->id];
  options_.proposer->propose(proposal_requests_);
}

int Speculator::drafts_of(const ProposalRequest& q, bool cheap) const {
  return cheap ? static_cast<int>(std::min<size_t>(q.out->tokens.size(), q.max_draft_tokens)) : q.max_draft_tokens;
}

bool Speculator::expect_tokens(int num_decoding, bool cheap) {
  // The benefit of at most k drafts per sequence, k = 0 .. the most any request can have: each
  // drafting request's expected tokens at its measured acceptance, 1 for the rest.
  int max_k = 0;
  for (const ProposalRequest& q : proposal_requests_) max_k = std::max(max_k, drafts_of(q, cheap));
  if (max_k == 0) return false;
  expected_.assign(static_cast<size_t>(max_k) + 1, static_cast<double>(num_decoding));
  for (const ProposalRequest& q : proposal_requests_) {
    const int n = drafts_of(q, cheap);
    if (n == 0) continue;
    const double a = acceptance_of(q.request->id, cheap ? q.out->match_length : 0);
    for (int k = 1; k <= max_k; ++k) expected_[static_cast<size_t>(k)] += expected_tokens(a, std::min(k, n)) - 1.0;
  }
  return true;
}

void Speculator::record_verify(uint64_t request_id, int num_drafts, int num_accepted, int match_length) {
  const int k = num_drafts, a = num_accepted;
  const double rejected = a < k ? 1.0 : 0.0;
  if (match_length > 0) match_[static_cast<size_t>(match_class(match_length))].add(kMatchAcceptanceDecay, a, rejected);
  requests_[request_id].add(kAcceptanceDecay, a, rejected);
  all_.add(kAcceptanceDecay, a, rejected);
  metrics_.update([&](MetricsSnapshot& s) {
    s.spec_total_num_accepted_tokens += static_cast<uint64_t>(a + 1);
    ++s.spec_total_num_forward_ct;
    ++s.spec_num_drafts;
    s.spec_num_draft_tokens += static_cast<uint64_t>(k);
    s.spec_num_accepted_draft_tokens += static_cast<uint64_t>(a);
    if (s.spec_accepted_per_position.size() < static_cast<size_t>(k)) s.spec_accepted_per_position.resize(k, 0);
    for (int i = 0; i < a; ++i) ++s.spec_accepted_per_position[static_cast<size_t>(i)];
  });
}

void Speculator::forget(uint64_t request_id) {
  if (options_.proposer == nullptr) return;
  options_.proposer->forget(request_id);
  requests_.erase(request_id);
}

void Speculator::check_integrity() const {
  if (options_.proposer != nullptr) options_.proposer->check_integrity();
}

}  // namespace spindle::engine::speculative
