// engine/runner.h's pure rules: the graph batch sizes decode steps are padded to, and which
// multi-token steps count as uniform verify steps (the ones a graph may replay; their graph key
// is the row count and the tokens per sequence, so anything else in the batch must be excluded).
#include "engine/runner.h"

#include <gtest/gtest.h>

#include <vector>

namespace spindle::engine {
namespace {

TEST(RunnerRulesTest, GraphBatchSizes) {
  const std::vector<std::pair<int, int>> want = {{1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {8, 8}, {9, 16}, {17, 24}};
  for (const auto& [n, size] : want) EXPECT_EQ(graph_batch_size(n), size) << n;
}

// A sequence of `n` new tokens after `cached` tokens, with `logit_rows` logits.
void add(StepBatch& b, int n, int cached, int logit_rows) {
  const std::vector<TokenId> tokens(static_cast<size_t>(n), 1);
  const std::vector<int32_t> pages = {0, 1, 2, 3};
  b.add_sequence(tokens.data(), n, cached, pages.data(), static_cast<int32_t>(pages.size()), logit_rows);
}

TEST(RunnerRulesTest, UniformVerifySteps) {
  StepBatch b;
  add(b, 5, 10, 5);
  add(b, 5, 20, 5);
  EXPECT_TRUE(is_uniform_verify(b)) << "two sequences verifying 4 drafts each";

  b.clear();
  add(b, 1, 10, 1);
  EXPECT_FALSE(is_uniform_verify(b)) << "a decode step";

  b.clear();
  add(b, 5, 10, 5);
  add(b, 3, 20, 3);
  EXPECT_FALSE(is_uniform_verify(b)) << "different draft counts";

  b.clear();
  add(b, 5, 10, 5);
  add(b, 1, 20, 1);
  EXPECT_FALSE(is_uniform_verify(b)) << "a verify mixed with a decode";

  b.clear();
  add(b, 5, 0, 1);
  EXPECT_FALSE(is_uniform_verify(b)) << "a prefill chunk (one logit row, nothing cached)";

  b.clear();
  add(b, 5, 10, 1);
  EXPECT_FALSE(is_uniform_verify(b)) << "a prefill chunk on a cached prefix";

  b.clear();
  add(b, 5, 10, 5);
  b.add_padding_sequence(0);
  EXPECT_FALSE(is_uniform_verify(b)) << "padding";
}

}  // namespace
}  // namespace spindle::engine
