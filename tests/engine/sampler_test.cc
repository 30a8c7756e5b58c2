// Sampler and stop strings. Expected values are computed by hand in the comments; the sampling
// distribution test compares frequencies with the softmax probabilities (tolerance 4 standard
// errors of a binomial proportion at N = 40000, i.e. at most ~0.01).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "util/error.h"

namespace spindle::engine {
namespace {

std::vector<float> logits_of(std::initializer_list<float> v) { return v; }

int sample_once(SamplingParams p, std::vector<float> logits, std::vector<int> prompt = {}, std::vector<int> out = {}) {
  Sampler s(std::move(p), 1);
  return s.sample(logits, prompt, out).token;
}

TEST(SamplerTest, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(sample_once(p, logits_of({0.1f, 3.0f, 2.9f, -1.0f})), 1);
  p = {};
  p.top_k = 1;  // top_k 1 is greedy too
  EXPECT_EQ(sample_once(p, logits_of({0.1f, 3.0f, 2.9f, -1.0f})), 1);
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferent) {
  SamplingParams p;
  p.seed = 1234;
  std::vector<int> a, b, c;
  Sampler s1(p, 0), s2(p, 99);
  p.seed = 4321;
  Sampler s3(p, 0);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l(50, 0.0f);  // uniform: every draw is a coin of 50 faces
    auto l2 = l, l3 = l;
    a.push_back(s1.sample(l, {}, {}).token);
    b.push_back(s2.sample(l2, {}, {}).token);
    c.push_back(s3.sample(l3, {}, {}).token);
  }
  EXPECT_EQ(a, b);  // the request's seed wins over the engine's default seed
  EXPECT_NE(a, c);
}

TEST(SamplerTest, FrequenciesFollowTheSoftmax) {
  // logits ln(1), ln(2), ln(3), ln(4) at temperature 1 -> p = 0.1, 0.2, 0.3, 0.4.
  SamplingParams p;
  p.seed = 7;
  Sampler s(p, 0);
  std::map<int, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    auto l = logits_of({std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)});
    ++counts[s.sample(l, {}, {}).token];
  }
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(counts[t] / double(n), 0.1 * (t + 1), 0.01) << t;
}

TEST(SamplerTest, TemperatureSharpens) {
  // At T = 0.5 the same logits give p proportional to 1, 4, 9, 16 -> 16/30 = 0.533 for token 3.
  SamplingParams p;
  p.seed = 9;
  p.temperature = 0.5f;
  Sampler s(p, 0);
  int hits = 0;
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    auto l = logits_of({std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)});
    hits += s.sample(l, {}, {}).token == 3;
  }
  EXPECT_NEAR(hits / double(n), 16.0 / 30.0, 0.01);
}

TEST(SamplerTest, TopKTopPMinPRestrictTheCandidates) {
  const auto probs = logits_of({std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)});
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SamplingParams k2;
    k2.top_k = 2;
    k2.seed = seed;
    EXPECT_GE(sample_once(k2, probs), 2);  // only tokens 2 and 3
    SamplingParams p05;
    p05.top_p = 0.5f;  // 0.4 < 0.5, 0.4 + 0.3 >= 0.5: tokens 3 and 2
    p05.seed = seed;
    EXPECT_GE(sample_once(p05, probs), 2);
    SamplingParams p04;
    p04.top_p = 0.4f;  // 0.4 alone reaches it
    p04.seed = seed;
    EXPECT_EQ(sample_once(p04, probs), 3);
    SamplingParams m;
    m.min_p = 0.6f;  // floor 0.6 * 0.4 = 0.24: tokens 3 (0.4) and 2 (0.3)
    m.seed = seed;
    EXPECT_GE(sample_once(m, probs), 2);
  }
}

TEST(SamplerTest, PenaltiesAndBias) {
  SamplingParams p;
  p.temperature = 0;
  // Token 0 leads 2.0 to 1.5; repetition penalty 2 on a seen positive logit halves it: 1.0 < 1.5.
  p.repetition_penalty = 2.0f;
  EXPECT_EQ(sample_once(p, logits_of({2.0f, 1.5f}), {0}, {}), 1);
  // Presence 0.3 + frequency 0.2 * 2 occurrences = 0.7 off token 0: 1.3 < 1.5.
  p = {};
  p.temperature = 0;
  p.presence_penalty = 0.3f;
  p.frequency_penalty = 0.2f;
  EXPECT_EQ(sample_once(p, logits_of({2.0f, 1.5f}), {}, {0, 0}), 1);
  // ... but only 0.5 off with one occurrence: 1.5 vs 1.5 ties go to the lower id.
  EXPECT_EQ(sample_once(p, logits_of({2.0f, 1.4f}), {}, {0}), 0);
  // Prompt tokens do not count for presence/frequency.
  EXPECT_EQ(sample_once(p, logits_of({2.0f, 1.5f}), {0, 0, 0}, {}), 0);
  // Logit bias -100 bans, +100 forces.
  p = {};
  p.temperature = 0;
  p.logit_bias = {{0, -100.0f}};
  EXPECT_EQ(sample_once(p, logits_of({5.0f, 1.0f, 0.0f})), 1);
  p.logit_bias = {{2, 100.0f}};
  EXPECT_EQ(sample_once(p, logits_of({5.0f, 1.0f, 0.0f})), 2);
}

TEST(SamplerTest, LogprobsAreRawLogSoftmax) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = true;
  p.top_logprobs = 2;
  p.logit_bias = {{1, 100.0f}};  // chosen token 1, but its logprob is from the raw distribution
  Sampler s(p, 0);
  auto l = logits_of({std::log(0.5f), std::log(0.25f), std::log(0.25f)});
  const auto r = s.sample(l, {}, {});
  EXPECT_EQ(r.token, 1);
  EXPECT_NEAR(r.logprob, std::log(0.25), 1e-6);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 0);
  EXPECT_NEAR(r.top[0].logprob, std::log(0.5), 1e-6);
}

TEST(SamplerTest, ValidationNamesTheField) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_THAT([&] { validate_sampling_params(p, 10); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("temperature")));
  p = {};
  p.top_p = 0;
  EXPECT_THROW(validate_sampling_params(p, 10), Error);
  p = {};
  p.max_tokens = 0;
  EXPECT_THAT([&] { validate_sampling_params(p, 10); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("max_tokens")));
  p = {};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_THAT([&] { validate_sampling_params(p, 10); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("outside the vocabulary")));
  p = {};
  p.stop = {""};
  EXPECT_THROW(validate_sampling_params(p, 10), Error);
  EXPECT_NO_THROW(validate_sampling_params({}, 10));
}

TEST(StopMatcherTest, HoldsBackPossibleStartsAndCutsAtTheStop) {
  StopMatcher m({"END", "\n\n"});
  auto r = m.feed("Hello E");
  EXPECT_EQ(r.emit, "Hello ");
  EXPECT_FALSE(r.stopped);
  r = m.feed("N");
  EXPECT_EQ(r.emit, "");
  r = m.feed("Xtra");  // "ENX" is no stop: everything goes out
  EXPECT_EQ(r.emit, "ENXtra");
  r = m.feed(" more\n");
  EXPECT_EQ(r.emit, " more");
  r = m.feed("\nignored");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
}

TEST(StopMatcherTest, NoStopsPassesThroughAndFlushReturnsTheRest) {
  StopMatcher none({});
  EXPECT_EQ(none.feed("abc").emit, "abc");
  StopMatcher m({"stop"});
  EXPECT_EQ(m.feed("xx st").emit, "xx ");
  EXPECT_EQ(m.flush(), "st");
  StopMatcher within({"b"});
  const auto r = within.feed("abc");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "a");
}

// The grammar mask (structured output) applies before everything else: greedy takes the best
// allowed token even under a penalty and a bias; draws never take a refused token and follow the
// softmax renormalised over the allowed ones (20,000 draws, each frequency within 0.015 of its
// f64 probability, ~5 sigma); logprobs are the masked row's log-softmax, refused tokens never
// listed; sample_rows_on_host (the device sampler's contract) reads the batch's masks the same way.
TEST(SamplerTest, GrammarMaskComesFirst) {
  const std::vector<float> base = {3.0f, 2.5f, 0.5f, 2.0f, -1.0f, 1.0f, 4.0f, 0.0f, 1.5f, -0.5f};
  std::vector<uint32_t> mask = {(1u << 1) | (1u << 3) | (1u << 5) | (1u << 8)};
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.logprobs = true;
  greedy.top_logprobs = 6;
  greedy.logit_bias = {{6, 5.0f}};  // refused: the bias cannot bring it back
  std::vector<float> row = base;
  const SampledToken g = Sampler(greedy, 1).sample(row, {}, {}, mask);
  EXPECT_EQ(g.token, 1);
  double z = 0;
  for (int t : {1, 3, 5, 8}) z += std::exp(double{base[t]});
  EXPECT_NEAR(g.logprob, base[1] - std::log(z), 1e-5);
  ASSERT_EQ(g.top.size(), 4u) << "only the four allowed tokens are alternatives";
  EXPECT_EQ(g.top[1].token, 3);

  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.top_p = 0.95f;
  Sampler s(sampled, 42);
  std::map<int, int> counts;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) {
    std::vector<float> r = base;
    ++counts[s.sample(r, {}, {}, mask).token];
  }
  // The expected kept set: the allowed tokens by weight at T = 0.8, the smallest prefix reaching 0.95.
  std::vector<std::pair<double, int>> w;
  double total = 0;
  for (int t : {1, 3, 5, 8}) {
    w.push_back({std::exp(base[t] / 0.8), t});
    total += w.back().first;
  }
  std::sort(w.rbegin(), w.rend());
  double mass = 0, kept = 0;
  std::map<int, double> expected;
  for (const auto& [weight, t] : w) {
    expected[t] = weight;
    kept += weight;
    mass += weight / total;
    if (mass >= 0.95) break;
  }
  for (const auto& [t, n] : counts) EXPECT_TRUE(expected.count(t)) << "drew token " << t << " outside the kept allowed set";
  for (const auto& [t, weight] : expected) EXPECT_NEAR(counts[t] / double{kDraws}, weight / kept, 0.015) << t;

  SamplingBatch batch;
  batch.rows.resize(2);
  add_sampling_row(greedy, 1, 0, {}, {}, 0, batch);
  add_sampling_row(sampled, 9, 0, {}, {}, 1, batch);
  batch.rows[0].mask_offset = 0;
  batch.rows[1].mask_offset = 1;
  batch.masks = {mask[0], 1u << 7};
  std::vector<float> logits = base;
  logits.insert(logits.end(), base.begin(), base.end());
  std::vector<SampledRow> out;
  sample_rows_on_host(logits, 10, batch, out);
  EXPECT_EQ(out[0].token, 1);
  EXPECT_NEAR(out[0].logprob, base[1] - std::log(z), 1e-5);
  EXPECT_EQ(out[1].token, 7) << "the only allowed token";
}

}  // namespace
}  // namespace spindle::engine
