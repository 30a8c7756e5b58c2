// --max-mixed-prefill-tokens end to end on the CPU: a real Engine over the golden models, prompts
// arriving together with a small token budget, so that later prompts are prefilled while earlier
// requests decode. With the cap, those prompts are spread over more steps (counted: more prefill or
// mixed steps than without it); the greedy outputs must not change: equal, token for token and text
// for text, to the uncapped run's and, as far as both reach, to Hugging Face's greedy continuation
// of the golden prompts (tests/golden, made by transformers). The KV integrity check passes and no
// page is in use at the end.
#include <gtest/gtest.h>

#include "engine/spec_harness.h"
#include "model/golden_fixtures.h"

namespace spindle {
namespace {

using testing::model_dir;
using testing::read_golden;
using testing::serve_speculative;
using testing::SpecResult;
using testing::SpecRun;

class MixedPrefillEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MixedPrefillEngineTest, GreedyOutputsDoNotChange) {
  const auto golden = read_golden(GetParam());
  std::vector<std::vector<TokenId>> prompts;
  for (size_t i = 0; i < 8; ++i) prompts.push_back(golden[i % golden.size()].ids);
  const std::vector<engine::SamplingParams> params = {testing::greedy_params(24)};
  // About a quarter of the prompts per step: the rest wait while the first decode.
  size_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += p.size();
  SpecRun uncapped;
  uncapped.max_num_batched_tokens = std::max(8, static_cast<int>(prompt_tokens / 4));
  SpecRun capped = uncapped;
  capped.max_mixed_prefill_tokens = std::max(2, uncapped.max_num_batched_tokens / 8);
  const SpecResult a = serve_speculative(model_dir(GetParam()), uncapped, prompts, params);
  const SpecResult b = serve_speculative(model_dir(GetParam()), capped, prompts, params);
  EXPECT_EQ(b.tokens, a.tokens);
  EXPECT_EQ(b.texts, a.texts);
  EXPECT_GT(b.num_prefill_or_mixed_steps, a.num_prefill_or_mixed_steps) << "the cap spread no prompt";
  for (const SpecResult* r : {&a, &b}) {
    EXPECT_TRUE(r->integrity_ok);
    EXPECT_EQ(r->metrics.kv_pages_in_use, 0);
  }
  for (size_t i = 0; i < golden.size() && i < prompts.size(); ++i) {
    const size_t n = std::min(golden[i].greedy.size(), b.tokens[i].size());
    for (size_t j = 0; j < n; ++j) EXPECT_EQ(b.tokens[i][j], golden[i].greedy[j]) << "prompt " << i << " token " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, MixedPrefillEngineTest, ::testing::Values("llama-gqa-f32", "qwen2-tied-bf16", "kjv-tiny"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = (c == '-') ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace spindle
