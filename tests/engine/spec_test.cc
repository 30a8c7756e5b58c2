// Speculative decoding's parts alone (engine/speculative/): the n-gram lookup, the rejection rule's
// output distribution, host verification with the request's processing, and the cost model.
// Expected values are written from the definitions in the headers; distributions are checked
// with chi-square tests at significance 1e-6 (fixed seeds, so the tests are deterministic; the
// critical value for 5 degrees of freedom, chi2.isf(1e-6, 5) = 35.888, from the closed-form
// survival function erfc(sqrt(x/2)) + sqrt(2x/pi) e^(-x/2) (1 + x/3)).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "engine/sampler.h"
#include "engine/speculative/cost_model.h"
#include "engine/speculative/ngram_proposer.h"
#include "engine/speculative/verifier.h"
#include "model/transformer.h"

namespace spindle::engine::speculative {
namespace {

TEST(NgramLookupTest, LongestSuffixMostRecentMatch) {
  // Suffix [7, 8] occurs at 1 and 5; the most recent earlier one (5) is followed by 9, 7, 8.
  const std::vector<TokenId> ctx = {1, 7, 8, 2, 3, 7, 8, 9, 7, 8};
  EXPECT_EQ(ngram_lookup(ctx, 1, 4, 3), (std::vector<TokenId>{9, 7, 8}));
  // The longest window wins: [9, 7, 8] does not occur earlier, [7, 8] does.
  EXPECT_EQ(ngram_lookup(ctx, 2, 2, 2), (std::vector<TokenId>{9, 7}));
  // Cut at the end of the context.
  const std::vector<TokenId> ctx2 = {5, 6, 1, 2, 5, 6};
  EXPECT_EQ(ngram_lookup(ctx2, 1, 3, 8), (std::vector<TokenId>{1, 2, 5, 6}));
  // No earlier occurrence of any suffix of length >= 2.
  EXPECT_TRUE(ngram_lookup(std::vector<TokenId>{1, 2, 3, 4}, 2, 4, 4).empty());
  EXPECT_TRUE(ngram_lookup(std::vector<TokenId>{3, 3}, 1, 1, 0).empty());
  EXPECT_EQ(ngram_lookup(std::vector<TokenId>{3, 3}, 1, 1, 4), (std::vector<TokenId>{3}));
}

TEST(NgramLookupTest, ReportsTheMatchedLength) {
  // [7, 8] matched (2 tokens; [9, 7, 8] and longer do not occur earlier).
  const std::vector<TokenId> ctx = {1, 7, 8, 2, 3, 7, 8, 9, 7, 8};
  NgramMatch m = ngram_match(ctx, 1, 4, 3);
  EXPECT_EQ(m.length, 2);
  EXPECT_EQ(m.tokens, (std::vector<TokenId>{9, 7, 8}));
  // [4, 5, 6] occurs earlier: 3 tokens matched, though [6] alone also would.
  m = ngram_match(std::vector<TokenId>{4, 5, 6, 1, 6, 4, 5, 6}, 1, 5, 2);
  EXPECT_EQ(m.length, 3);
  EXPECT_EQ(m.tokens, (std::vector<TokenId>{1, 6}));
  m = ngram_match(std::vector<TokenId>{1, 2, 3, 4}, 1, 4, 4);
  EXPECT_EQ(m.length, 0);
  EXPECT_TRUE(m.tokens.empty());
}

double chi_square(const std::vector<double>& expected_probs, const std::map<TokenId, int>& counts, int n) {
  double chi2 = 0;
  for (size_t t = 0; t < expected_probs.size(); ++t) {
    const double e = expected_probs[t] * n;
    const auto it = counts.find(static_cast<TokenId>(t));
    const double o = it == counts.end() ? 0.0 : it->second;
    if (e == 0.0) {
      EXPECT_EQ(o, 0.0) << "token " << t << " has probability 0 but was drawn";
      continue;
    }
    chi2 += (o - e) * (o - e) / e;
  }
  return chi2;
}

// d ~ q, then the rule: the emitted token must be distributed as p whatever q is.
TEST(RejectionRuleTest, OutputIsDistributedAsTheTarget) {
  const std::vector<double> p = {0.40, 0.25, 0.15, 0.10, 0.06, 0.04};
  const std::vector<std::vector<double>> qs = {
      {0.10, 0.10, 0.10, 0.10, 0.30, 0.30},  // far from p
      {0.40, 0.25, 0.15, 0.10, 0.06, 0.04},  // equal to p: always accepted
      {0.00, 0.50, 0.50, 0.00, 0.00, 0.00},  // misses most of p's support
  };
  for (size_t qi = 0; qi < qs.size(); ++qi) {
    std::vector<TokenProb> pd, qd;
    for (size_t t = 0; t < p.size(); ++t) {
      pd.push_back({static_cast<TokenId>(t), p[t]});
      if (qs[qi][t] > 0) qd.push_back({static_cast<TokenId>(t), qs[qi][t]});
    }
    SamplingParams params;
    Sampler target(params, 1234 + qi);
    std::mt19937_64 draft_rng(99 + qi);
    std::discrete_distribution<int> q_draw(qs[qi].begin(), qs[qi].end());
    const int n = 200000;
    std::map<TokenId, int> counts;
    int accepted = 0;
    for (int i = 0; i < n; ++i) {
      const RuleResult r = rejection_rule(target, pd, qd, q_draw(draft_rng));
      ++counts[r.token];
      accepted += r.accepted ? 1 : 0;
    }
    // Acceptance probability is sum_t min(p_t, q_t).
    double expected_accept = 0;
    for (size_t t = 0; t < p.size(); ++t) expected_accept += std::min(p[t], qs[qi][t]);
    EXPECT_NEAR(double(accepted) / n, expected_accept, 0.006) << "q " << qi;
    EXPECT_LT(chi_square(p, counts, n), 35.888) << "q " << qi << ": output not distributed as p";
  }
}

// verify_on_host with the request's processing (temperature, top-k, top-p): the first emitted
// token follows the target's processed distribution, computed here independently in double.
TEST(VerifyOnHostTest, FirstTokenFollowsTheProcessedTarget) {
  const int vocab = 6;
  const std::vector<float> target_logits = {2.0f, 1.5f, 1.0f, 0.2f, -1.0f, -3.0f};
  const std::vector<float> draft_logits = {0.5f, 2.0f, 0.1f, 1.0f, 0.0f, 0.0f};
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 4;
  params.top_p = 0.95f;
  // Independent: softmax at T over the 4 best, then the smallest prefix reaching 0.95.
  std::vector<double> p(vocab, 0.0);
  {
    double z = 0;
    for (int t = 0; t < 4; ++t) z += std::exp((target_logits[t] - target_logits[0]) / 0.8);
    double mass = 0;
    int keep = 4;
    for (int t = 0; t < 4; ++t) {
      mass += std::exp((target_logits[t] - target_logits[0]) / 0.8) / z;
      if (mass >= 0.95) {
        keep = t + 1;
        break;
      }
    }
    double kept = 0;
    for (int t = 0; t < keep; ++t) kept += std::exp((target_logits[t] - target_logits[0]) / 0.8);
    for (int t = 0; t < keep; ++t) p[t] = std::exp((target_logits[t] - target_logits[0]) / 0.8) / kept;
  }
  Sampler target(params, 7);
  Sampler draft(params, 8);
  const int n = 100000;
  std::map<TokenId, int> counts;
  std::vector<float> rows(2 * vocab), scratch;
  int accepted = 0;
  for (int i = 0; i < n; ++i) {
    scratch = draft_logits;
    DraftProposal proposal;
    proposal.q.push_back(draft.distribution(scratch, {}, {}));
    proposal.tokens.push_back(draft.draw_from(proposal.q[0]));
    std::copy(target_logits.begin(), target_logits.end(), rows.begin());
    std::copy(target_logits.begin(), target_logits.end(), rows.begin() + vocab);
    const Verified v = verify_on_host(target, rows, vocab, {}, {}, proposal);
    ASSERT_EQ(v.tokens.size(), static_cast<size_t>(v.num_accepted_drafts + 1));
    ++counts[v.tokens[0].token];
    accepted += v.num_accepted_drafts;
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, n);
  EXPECT_LT(chi_square(p, counts, n), 35.888);
}

// A draft proposing from a vocabulary subset (its LM head over the first 3 of 6 ids, the rest
// of its row widened to kExcludedLogit, as model/transformer.h's limit_logit_ids leaves it): q,
// the distribution each draft is drawn from, is 0 outside the subset, and the emitted token still
// follows the target's processed distribution (computed here independently in double), which
// puts most of its mass outside the subset. The acceptance rate is sum_t min(p_t, q_t), q the
// softmax at T of the 3 draft logits (top-k 4 and top-p 0.95 keep all 3 here: computed below).
TEST(VerifyOnHostTest, DraftFromAVocabularySubsetKeepsTheTargetDistribution) {
  const int vocab = 6, subset = 3;
  const std::vector<float> target_logits = {0.2f, 1.0f, -1.0f, 2.0f, 1.5f, -3.0f};
  const std::vector<float> draft_compact = {0.5f, 2.0f, 1.2f};
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 4;
  params.top_p = 0.95f;
  // Independent p: softmax at T over the 4 best (ids 3, 4, 1, 0), then the smallest prefix
  // reaching 0.95, renormalised.
  const std::vector<int> by_logit = {3, 4, 1, 0};
  std::vector<double> p(vocab, 0.0);
  {
    auto w = [&](int t) { return std::exp((target_logits[t] - target_logits[3]) / 0.8); };
    double z = 0;
    for (int t : by_logit) z += w(t);
    double mass = 0, kept = 0;
    size_t keep = by_logit.size();
    for (size_t i = 0; i < by_logit.size(); ++i) {
      mass += w(by_logit[i]) / z;
      if (mass >= 0.95) {
        keep = i + 1;
        break;
      }
    }
    for (size_t i = 0; i < keep; ++i) kept += w(by_logit[i]);
    for (size_t i = 0; i < keep; ++i) p[by_logit[i]] = w(by_logit[i]) / kept;
  }
  // Independent q: softmax at T over the 3 subset logits (their smallest prefix reaching 0.95
  // is all 3: the least likely one holds more than 5%).
  std::vector<double> q(vocab, 0.0);
  {
    double z = 0;
    for (int t = 0; t < subset; ++t) z += std::exp((draft_compact[t] - 2.0) / 0.8);
    for (int t = 0; t < subset; ++t) q[t] = std::exp((draft_compact[t] - 2.0) / 0.8) / z;
    ASSERT_GT(q[0], 0.05);
  }
  double expected_accept = 0;
  for (int t = 0; t < vocab; ++t) expected_accept += std::min(p[t], q[t]);
  Sampler target(params, 17);
  Sampler draft(params, 18);
  const int n = 100000;
  std::map<TokenId, int> counts;
  std::vector<float> rows(2 * vocab), draft_row(vocab);
  int accepted = 0;
  for (int i = 0; i < n; ++i) {
    std::copy(draft_compact.begin(), draft_compact.end(), draft_row.begin());
    widen_logit_rows(draft_row.data(), 1, subset, vocab);
    DraftProposal proposal;
    proposal.q.push_back(draft.distribution(draft_row, {}, {}));
    proposal.tokens.push_back(draft.draw_from(proposal.q[0]));
    ASSERT_LT(proposal.tokens[0], subset) << "drafted outside the subset";
    for (const TokenProb& e : proposal.q[0]) {
      if (e.token >= subset) ASSERT_EQ(e.prob, 0.0) << "q has mass outside the subset at " << e.token;
    }
    std::copy(target_logits.begin(), target_logits.end(), rows.begin());
    std::copy(target_logits.begin(), target_logits.end(), rows.begin() + vocab);
    const Verified v = verify_on_host(target, rows, vocab, {}, {}, proposal);
    ASSERT_EQ(v.tokens.size(), static_cast<size_t>(v.num_accepted_drafts + 1));
    ++counts[v.tokens[0].token];
    accepted += v.num_accepted_drafts;
  }
  EXPECT_NEAR(double(accepted) / n, expected_accept, 0.006);
  EXPECT_GT(counts[3] + counts[4], n / 2) << "the target's mass outside the subset is emitted";
  EXPECT_LT(chi_square(p, counts, n), 35.888);
}

// The point-mass rule emits exactly what plain sampling would, with the same generator.
TEST(VerifyOnHostTest, PointMassDraftsReproducePlainSampling) {
  const int vocab = 5;
  const std::vector<float> logits = {1.0f, 0.9f, 0.8f, 0.1f, -0.5f};
  SamplingParams params;
  params.temperature = 1.0f;
  Sampler plain(params, 42), spec(params, 42);
  std::vector<TokenId> plain_out, spec_out;
  std::vector<float> row;
  for (int i = 0; i < 300; ++i) {
    row = logits;
    plain_out.push_back(plain.sample(row, {}, {}).token);
  }
  while (spec_out.size() < 300) {
    // Always guess token 0 three times (k = 3; 4 identical rows).
    DraftProposal proposal;
    proposal.tokens = {0, 0, 0};
    std::vector<float> rows;
    for (int r = 0; r < 4; ++r) rows.insert(rows.end(), logits.begin(), logits.end());
    const Verified v = verify_on_host(spec, rows, vocab, {}, {}, proposal);
    for (const SampledToken& t : v.tokens) spec_out.push_back(t.token);
  }
  spec_out.resize(300);
  EXPECT_EQ(plain_out, spec_out);
}

TEST(VerifySampledTest, AcceptsWhileDrawsEqualDrafts) {
  auto drawn = [](std::vector<TokenId> ids) {
    std::vector<SampledToken> out;
    for (TokenId t : ids) {
      SampledToken s;
      s.token = t;
      out.push_back(s);
    }
    return out;
  };
  Verified v = verify_sampled(drawn({5, 6, 9, 1}), std::vector<TokenId>{5, 6, 7});
  EXPECT_EQ(v.num_accepted_drafts, 2);
  ASSERT_EQ(v.tokens.size(), 3u);
  EXPECT_EQ(v.tokens[2].token, 9);
  v = verify_sampled(drawn({5, 6, 7, 1}), std::vector<TokenId>{5, 6, 7});
  EXPECT_EQ(v.num_accepted_drafts, 3);
  EXPECT_EQ(v.tokens.back().token, 1) << "the bonus token";
  v = verify_sampled(drawn({4, 6}), std::vector<TokenId>{5});
  EXPECT_EQ(v.num_accepted_drafts, 0);
  EXPECT_EQ(v.tokens.size(), 1u);
}

TEST(CostModelTest, ExpectedTokens) {
  EXPECT_DOUBLE_EQ(expected_tokens(0.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(expected_tokens(1.0, 4), 5.0);
  EXPECT_DOUBLE_EQ(expected_tokens(0.5, 2), 1.75);
}

// Runs one decision and records the chosen way at the given step seconds per draft count.
int decide_and_record(CostModel& m, int n, const std::vector<double>& expected, const std::vector<double>& seconds) {
  const int k = m.choose_drafts(n, expected);
  m.record(k, n, seconds.at(static_cast<size_t>(k)));
  return k;
}

TEST(CostModelTest, SpeculatesWhileExpectedTokensPerSecondAreHigher) {
  CostModel m;
  // 32 sequences, one draft each at most: measures the plain way first, then speculation; 10 ms
  // with it, 4 ms without.
  const std::vector<double> seconds = {0.004, 0.010};
  for (int i = 0; i < CostModel::kMinSamples; ++i) ASSERT_EQ(decide_and_record(m, 32, {32.0, 64.0}, seconds), 0);
  for (int i = 0; i < CostModel::kMinSamples; ++i) ASSERT_EQ(decide_and_record(m, 32, {32.0, 64.0}, seconds), 1);
  // 64 tokens in 10 ms (6400/s) vs 32 in 4 ms (8000/s): off.
  EXPECT_EQ(m.choose_drafts(32, std::vector<double>{32.0, 64.0}), 0);
  const auto change = m.take_change();
  ASSERT_TRUE(change.has_value());
  EXPECT_NE(change->find("off"), std::string::npos) << *change;
  // The same costs with better acceptance (96 tokens expected: 9600/s): on.
  EXPECT_EQ(m.choose_drafts(32, std::vector<double>{32.0, 96.0}), 1);
  EXPECT_FALSE(m.take_change().has_value()) << "changes are logged once per kLogEvery decisions at most";
  int with = 0;
  for (int i = 0; i < 100; ++i) with += m.choose_drafts(40, std::vector<double>{40.0, 64.0}) > 0 ? 1 : 0;  // 40: in 32-63
  // Re-measured after 20, then 40, then 80 more decisions (the interval doubles while the choice
  // stands), kMinSamples recorded steps each time, or at most 2 * kMinSamples decisions when, as
  // here, no step is recorded.
  EXPECT_GE(with, CostModel::kMinSamples) << "re-explores now and then";
  EXPECT_LE(with, 3 * 2 * CostModel::kMinSamples);
  // One outlier step does not move the cost (the median of the recent steps is used).
  m.record(1, 32, 0.001);
  EXPECT_DOUBLE_EQ(m.step_seconds(CostModel::bucket_of(32), 1), 0.010);
  // Another bucket is independent: batch 1 starts measuring again, plain decoding first.
  EXPECT_EQ(m.choose_drafts(1, std::vector<double>{1.0, 1.5}), 0);
  EXPECT_DOUBLE_EQ(m.step_seconds(CostModel::bucket_of(1), 1), 0.0);
  EXPECT_EQ(CostModel::bucket_of(1), 0);
  EXPECT_EQ(CostModel::bucket_of(3), 1);
  EXPECT_EQ(CostModel::bucket_of(4), 2);
  CostModel always(true);
  for (int i = 0; i < 10; ++i) always.record(3, 8, 1.0);
  EXPECT_EQ(always.choose_drafts(8, std::vector<double>{8.0, 9.0, 9.5, 9.5}), 2) << "every draft that adds tokens";
  EXPECT_EQ(always.choose_drafts(8, std::vector<double>{8.0}), 0);
}

TEST(CostModelTest, ChoosesTheDraftCountWithTheMostTokensPerSecond) {
  // Batch 1, acceptance 0.8, step costs growing faster than linearly in the rows (as kjv-tiny's
  // on 2 AVX2 cores: 1, 1.07, 1.3, 1.55, 1.78 of a plain step; here 3 ms plain).
  std::vector<double> expected, seconds;
  for (int k = 0; k <= 4; ++k) expected.push_back(expected_tokens(0.8, k));
  for (double r : {1.0, 1.07, 1.3, 1.55, 1.78}) seconds.push_back(0.003 * r);
  // tokens per plain-step time: k=0 1.0, k=1 1.68, k=2 1.88, k=3 1.905, k=4 1.888: k = 3.
  CostModel m;
  std::vector<int> explored;
  for (int i = 0; i < 5 * CostModel::kMinSamples; ++i) explored.push_back(decide_and_record(m, 1, expected, seconds));
  for (int k = 0; k <= 4; ++k) {
    EXPECT_EQ(std::count(explored.begin(), explored.end(), k), CostModel::kMinSamples) << "k " << k;
  }
  EXPECT_EQ(explored.front(), 0) << "plain decoding first, then more drafts";
  EXPECT_EQ(explored.back(), 4);
  EXPECT_EQ(m.choose_drafts(1, expected), 3);
  // At acceptance 0.5 one draft is best (1.5 / 1.07 = 1.40 against 1.75 / 1.3 = 1.35).
  std::vector<double> low;
  for (int k = 0; k <= 4; ++k) low.push_back(expected_tokens(0.5, k));
  int ones = 0;
  for (int i = 0; i < 10; ++i) ones += m.choose_drafts(1, low) == 1 ? 1 : 0;
  EXPECT_GE(ones, 9);
  // A draft count that adds no tokens (no request has that many drafts) is never chosen, even
  // when it was measured as the fastest way.
  CostModel fast4;
  const std::vector<double> cheap4 = {0.003, 0.004, 0.004, 0.004, 0.001};
  for (int i = 0; i < 5 * CostModel::kMinSamples; ++i) decide_and_record(fast4, 1, expected, cheap4);
  const std::vector<double> two = {1.0, 1.8, 2.44, 2.44, 2.44};  // the proposal has 2 drafts
  for (int i = 0; i < 50; ++i) {
    const int k = fast4.choose_drafts(1, two);
    ASSERT_LE(k, 2) << "decision " << i;
  }
}

TEST(CostModelTest, StopsMeasuringMoreDraftsOnceTheyLose) {
  // Batch 8 at acceptance 0.5 with step costs as measured for kjv-tiny + kjv-draft on 2 Zen 4
  // cores (bench/results/2026-12-04-zen4-spec: 2.9, 5.0, 8.5, 10.8, 19.5 ms for 0-4 drafts):
  // tokens per ms 2.76, 2.40, 2.06, 1.74, 0.80. One draft is 13% slower than plain decoding, so 2-4
  // drafts are never run, and one draft only now and then to re-measure it.
  std::vector<double> expected;
  for (int k = 0; k <= 4; ++k) expected.push_back(8 * expected_tokens(0.5, k));
  const std::vector<double> seconds = {0.0029, 0.0050, 0.0085, 0.0108, 0.0195};
  CostModel m;
  std::vector<int> runs(5, 0);
  for (int i = 0; i < 300; ++i) ++runs.at(static_cast<size_t>(decide_and_record(m, 8, expected, seconds)));
  EXPECT_EQ(runs[2] + runs[3] + runs[4], 0);
  EXPECT_GE(runs[1], CostModel::kMinSamples);
  EXPECT_LE(runs[1], 5 * CostModel::kMinSamples)
      << "re-measured kMinSamples steps at a time, after 20, 40, 80, 160 decisions at most";
  EXPECT_EQ(m.choose_drafts(8, expected), 0);
  // Cheaper verify steps: 1 and 2 drafts win (3.75 and 3.78 tokens per ms), 3 drafts lose (1.39):
  // measured up to 3, never 4.
  const std::vector<double> cheaper = {0.0029, 0.0032, 0.0037, 0.0108, 0.0195};
  CostModel c;
  std::vector<int> climb(5, 0);
  for (int i = 0; i < 300; ++i) ++climb.at(static_cast<size_t>(decide_and_record(c, 8, expected, cheaper)));
  EXPECT_EQ(c.choose_drafts(8, expected), 2);
  EXPECT_GE(climb[3], CostModel::kMinSamples);
  EXPECT_LE(climb[3], 5 * CostModel::kMinSamples);
  EXPECT_EQ(climb[4], 0);
}

TEST(CostModelTest, ReMeasuresAWayAfreshAfterANoisyStart) {
  // Batch 1, acceptance 0.6 with one draft: 1.6 tokens per step. Plain steps take 1 ms; one-draft
  // steps 1.2 ms (1333 tokens/s against 1000: speculation wins), but while they were first measured
  // another process had the core and they took 2.4 ms (667/s), so speculation went off.
  const std::vector<double> expected = {1.0, 1.6};
  CostModel m;
  for (int i = 0; i < 2 * CostModel::kMinSamples; ++i) decide_and_record(m, 1, expected, {0.001, 0.0024});
  ASSERT_EQ(m.choose_drafts(1, expected), 0) << "off after the noisy measurement";
  // The noise is gone. The first re-measurement (after 20 decisions) runs one draft kMinSamples
  // times and its cost is then what those steps took: speculation is back on long before 200
  // decisions. (Adding one step per re-measurement to the old window kept its median at 2.4 ms
  // until the fifth re-measurement, ~600 decisions later.)
  std::vector<int> ks;
  for (int i = 0; i < 200; ++i) ks.push_back(decide_and_record(m, 1, expected, {0.001, 0.0012}));
  const int on_in_last_50 = static_cast<int>(std::count(ks.end() - 50, ks.end(), 1));
  EXPECT_GE(on_in_last_50, 50 - 2 * CostModel::kMinSamples) << "on, apart from re-measuring plain decoding";
  EXPECT_NEAR(m.step_seconds(CostModel::bucket_of(1), 1), 0.0012, 1e-12) << "the noisy steps no longer count";
}

TEST(CostModelTest, KeepsItsChoiceUnlessAnotherIsClearlyFaster) {
  CostModel m;
  const std::vector<double> expected = {1.0, 2.0, 2.5};
  // k=2 explored first at 4 ms (625 tok/s), k=1 at 3.3 ms (606 tok/s), plain at 3 ms (333 tok/s).
  const std::vector<double> seconds = {0.003, 0.0033, 0.004};
  for (int i = 0; i < 3 * CostModel::kMinSamples; ++i) decide_and_record(m, 1, expected, seconds);
  EXPECT_EQ(m.choose_drafts(1, expected), 2);
  // k=1 now 2% faster than k=2 (2.0 / 3.3 ms = 606/s against 2.38 / 4 ms = 595/s): within the
  // hysteresis, k=2 stays.
  const std::vector<double> closer = {1.0, 2.0, 2.38};
  EXPECT_EQ(m.choose_drafts(1, closer), 2);
  // 10% faster (606/s against 550/s): it switches.
  const std::vector<double> far = {1.0, 2.0, 2.2};
  EXPECT_EQ(m.choose_drafts(1, far), 1);
}

}  // namespace
}  // namespace spindle::engine::speculative
