// The n choices of one request share the prompt's KV (real engine, kjv-tiny on the CPU): four
// requests with one prompt submitted together compute the prompt once, whatever the engine
// thread took in together. The first computes all P tokens; the others wait for its prefill,
// read every full page of their context (P - 1 tokens) from the prefix cache and compute the
// rest, so spindle_prompt_tokens_total grows by P + 3 (P - M) with M = floor((P - 1) / 16) * 16,
// and spindle_prefix_cache_hits_total by 3 M (with no sharing: 4 P and 0). Each output equals an
// independent n = 1 run's (greedy, and seeded sampling with the seeds the server gives the
// choices); preemption and cancelling the first one keep that; every page comes back.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/spec_harness.h"
#include "model/golden_fixtures.h"

namespace spindle {
namespace {

using testing::model_dir;
using testing::serve_speculative;
using testing::SpecResult;
using testing::SpecRun;

constexpr int kPageSize = 16;  // SpecRun's default
constexpr int kChoices = 4;

std::vector<TokenId> long_prompt() {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(model_dir("kjv-tiny"));
  return tok.encode(
      "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
      "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.");
}

engine::SamplingParams greedy(int max_tokens) { return testing::greedy_params(max_tokens); }

// Full pages of the context the prefix cache can give a choice: all but the last prompt token.
int cached_tokens_of(const std::vector<TokenId>& prompt) {
  return static_cast<int>(prompt.size() - 1) / kPageSize * kPageSize;
}

void expect_prompt_computed_once(const SpecResult& r, const std::vector<TokenId>& prompt) {
  const int p = static_cast<int>(prompt.size()), m = cached_tokens_of(prompt);
  EXPECT_EQ(r.metrics.prompt_tokens_total, static_cast<uint64_t>(p + (kChoices - 1) * (p - m)))
      << "prompt tokens computed (" << kChoices << " x " << p << " without sharing)";
  EXPECT_EQ(r.metrics.prefix_cache_hits, static_cast<uint64_t>((kChoices - 1) * m));
  std::vector<int> cached = r.cached_prompt_tokens;
  std::sort(cached.begin(), cached.end());
  EXPECT_EQ(cached, (std::vector<int>{0, m, m, m})) << "the first computes the prompt, the others read it";
}

TEST(SharedPromptEngineTest, GreedyChoicesComputeThePromptOnce) {
  const auto prompt = long_prompt();
  ASSERT_GT(prompt.size(), 2u * kPageSize) << "the prompt should span pages";
  const auto dir = model_dir("kjv-tiny");
  const SpecResult single = serve_speculative(dir, SpecRun{}, {prompt}, {greedy(30)});
  EXPECT_EQ(single.metrics.prompt_tokens_total, prompt.size());
  const SpecResult shared = serve_speculative(dir, SpecRun{}, std::vector(kChoices, prompt), {greedy(30)});
  for (int i = 0; i < kChoices; ++i) EXPECT_EQ(shared.tokens[i], single.tokens[0]) << "choice " << i;
  expect_prompt_computed_once(shared, prompt);
  EXPECT_TRUE(shared.integrity_ok);
  EXPECT_EQ(shared.metrics.kv_pages_in_use, 0);
}

// Seeds seed + i, as server/completion_handler gives the n choices: each choice draws exactly
// what a request with its seed draws alone.
TEST(SharedPromptEngineTest, SeededChoicesDrawAsAlone) {
  const auto prompt = long_prompt();
  const auto dir = model_dir("kjv-tiny");
  std::vector<engine::SamplingParams> params(kChoices);
  for (int i = 0; i < kChoices; ++i) {
    params[i].temperature = 0.9f;
    params[i].top_p = 0.95f;
    params[i].seed = 41 + i;
    params[i].max_tokens = 40;
    params[i].ignore_eos = true;
  }
  const SpecResult shared = serve_speculative(dir, SpecRun{}, std::vector(kChoices, prompt), params);
  for (int i = 0; i < kChoices; ++i) {
    const SpecResult alone = serve_speculative(dir, SpecRun{}, {prompt}, {params[i]});
    EXPECT_EQ(shared.tokens[i], alone.tokens[0]) << "choice " << i;
  }
  EXPECT_NE(shared.tokens[0], shared.tokens[1]) << "distinct seeds should draw distinct texts";
  expect_prompt_computed_once(shared, prompt);
  EXPECT_TRUE(shared.integrity_ok);
  EXPECT_EQ(shared.metrics.kv_pages_in_use, 0);
}

// A pool too small for four choices of 60 tokens: some are preempted (and recomputed from the
// cache); then the first one is cancelled early. Outputs stay the n = 1 run's, nothing leaks.
TEST(SharedPromptEngineTest, PreemptionAndCancellingTheFirst) {
  const auto prompt = long_prompt();
  const auto dir = model_dir("kjv-tiny");
  const SpecResult single = serve_speculative(dir, SpecRun{}, {prompt}, {greedy(60)});
  SpecRun small;
  small.num_pages = static_cast<int>(prompt.size() + 60) / kPageSize + 4;  // one choice and a bit
  small.max_num_batched_tokens = 64;
  const SpecResult shared = serve_speculative(dir, small, std::vector(kChoices, prompt), {greedy(60)});
  EXPECT_GT(shared.metrics.preemptions_total, 0u) << "the scenario did not preempt";
  for (int i = 0; i < kChoices; ++i) EXPECT_EQ(shared.tokens[i], single.tokens[0]) << "choice " << i;
  EXPECT_TRUE(shared.integrity_ok);
  EXPECT_EQ(shared.metrics.kv_pages_in_use, 0);

  SpecRun cancel = small;
  cancel.cancel_index = 0;
  cancel.cancel_after = 3;
  const SpecResult cancelled = serve_speculative(dir, cancel, std::vector(kChoices, prompt), {greedy(60)});
  EXPECT_EQ(cancelled.metrics.requests_aborted_total, 1u);
  for (int i = 1; i < kChoices; ++i) EXPECT_EQ(cancelled.tokens[i], single.tokens[0]) << "choice " << i;
  EXPECT_TRUE(cancelled.integrity_ok);
  EXPECT_EQ(cancelled.metrics.kv_pages_in_use, 0);
}

}  // namespace
}  // namespace spindle
