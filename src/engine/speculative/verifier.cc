#include "engine/speculative/verifier.h"

#include <algorithm>
#include <unordered_map>

#include "util/error.h"

namespace spindle::engine::speculative {

namespace {
double prob_of(std::span<const TokenProb> dist, TokenId token) {
  for (const TokenProb& t : dist) {
    if (t.token == token) return t.prob;
  }
  return 0.0;
}
}  // namespace

RuleResult rejection_rule(Sampler& sampler, std::span<const TokenProb> p, std::span<const TokenProb> q, TokenId d) {
  SPINDLE_CHECK(!p.empty(), "rejection_rule: an empty target distribution");
  const double pd = prob_of(p, d), qd = prob_of(q, d);
  const double u = sampler.uniform();
  // qd == 0 cannot happen for a token drawn from q; treat it as "accept when p allows it".
  if (qd <= 0.0 ? pd > 0.0 : u * qd < pd) return {d, true};
  std::unordered_map<TokenId, double> q_of;
  for (const TokenProb& t : q) q_of[t.token] = t.prob;
  std::vector<TokenProb> residual;
  for (const TokenProb& t : p) {
    const auto it = q_of.find(t.token);
    const double r = t.prob - (it == q_of.end() ? 0.0 : it->second);
    if (r > 0.0) residual.push_back({t.token, r});
  }
  // Rejection is only possible where p(d) < q(d), so some mass of p lies outside q's: the
  // residual is empty only through rounding, and then p itself is the right distribution.
  return {sampler.draw_from(residual.empty() ? p : std::span<const TokenProb>(residual)), false};
}

Verified verify_on_host(Sampler& sampler, std::span<float> rows, int vocab, std::span<const TokenId> prompt,
                        std::span<const TokenId> output, const DraftProposal& draft, const RowMask& mask_of) {
  const size_t k = draft.tokens.size();
  SPINDLE_CHECK(rows.size() == (k + 1) * static_cast<size_t>(vocab), "verify: {} logits for {} draft tokens of vocab {}",
                rows.size(), k, vocab);
  SPINDLE_CHECK(draft.q.empty() || draft.q.size() == k, "verify: {} draft distributions for {} draft tokens",
                draft.q.size(), k);
  const SamplingParams& params = sampler.params();
  const bool want_logprobs = params.logprobs || params.top_logprobs > 0;
  Verified v;
  std::vector<TokenId> context(output.begin(), output.end());  // output + the drafts before row i
  std::vector<float> raw;
  for (size_t i = 0; i <= k; ++i) {
    const std::span<float> row = rows.subspan(i * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
    const std::span<const uint32_t> mask = mask_of ? mask_of(i) : std::span<const uint32_t>();
    if (i == k || draft.q.empty()) {
      // The bonus row, or a point-mass draft: the ordinary draw, compared with the draft.
      SampledToken t = sampler.sample(row, prompt, context, mask);
      const bool accepted = i < k && t.token == draft.tokens[i];
      v.tokens.push_back(std::move(t));
      if (!accepted) break;
    } else {
      if (!all_finite(row)) {  // as Sampler::sample reports it: the engine ends the request
        SampledToken bad;
        bad.non_finite = true;
        v.tokens.push_back(std::move(bad));
        break;
      }
      if (!mask.empty()) apply_grammar_mask(row, mask);  // as Sampler::sample: logprobs of the masked row
      if (want_logprobs) raw.assign(row.begin(), row.end());
      const std::vector<TokenProb> p = sampler.distribution(row, prompt, context);
      const RuleResult r = rejection_rule(sampler, p, draft.q[i], draft.tokens[i]);
      SampledToken t;
      t.token = r.token;
      if (want_logprobs) raw_logprobs(raw, t.token, params.top_logprobs, t);
      v.tokens.push_back(std::move(t));
      if (!r.accepted) break;
    }
    context.push_back(draft.tokens[i]);
  }
  v.num_accepted_drafts = static_cast<int>(v.tokens.size()) - 1;
  return v;
}

Verified verify_sampled(std::span<const SampledToken> drawn, std::span<const TokenId> draft) {
  SPINDLE_CHECK(drawn.size() == draft.size() + 1, "verify: {} sampled rows for {} draft tokens", drawn.size(),
                draft.size());
  Verified v;
  for (size_t i = 0; i < drawn.size(); ++i) {
    v.tokens.push_back(drawn[i]);
    if (i == draft.size() || drawn[i].token != draft[i]) break;
  }
  v.num_accepted_drafts = static_cast<int>(v.tokens.size()) - 1;
  return v;
}

}  // namespace spindle::engine::speculative
