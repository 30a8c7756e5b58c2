// Engine::submit_batch end to end (real engine, kjv-tiny on the CPU): the requests of one batch
// are queued under one lock, so the engine thread takes them in together. With the engine already
// running when the batch arrives, its first step schedules every prompt: one prefill step and,
// for N greedy tokens, N - 1 decode steps, whatever the threads' timing (submitting one by one,
// the engine may start a step with the first prompt alone; `spindle generate` with several
// prompts relies on this for comparable instruction counts). Each output equals that prompt
// generated alone. The batch is all or none against the queue limit.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "engine/spec_harness.h"
#include "model/golden_fixtures.h"
#include "util/error.h"

namespace spindle {
namespace {

using testing::LoadedModel;
using testing::model_dir;
using testing::serve_speculative;
using testing::SpecRun;

constexpr int kNumPrompts = 16;
constexpr int kMaxTokens = 8;

std::vector<std::vector<TokenId>> numbered_prompts(const tokenizer::Tokenizer& tok) {
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 1; i <= kNumPrompts; ++i) {
    prompts.push_back(tok.encode("Prompt number " + std::to_string(i) + ": And God said unto"));
  }
  return prompts;
}

engine::EngineOptions engine_options(const SpecRun& run, int max_queued_requests) {
  engine::EngineOptions options;
  options.scheduler.max_num_batched_tokens = run.max_num_batched_tokens;
  options.scheduler.max_running_requests = run.max_running_requests;
  options.scheduler.max_model_len = run.max_model_len;
  options.max_queued_requests = max_queued_requests;
  return options;
}

std::vector<TokenId> drain(engine::RequestStream& stream) {
  std::vector<TokenId> ids;
  for (;;) {
    engine::RequestOutput o;
    if (!stream.pop(o, std::chrono::seconds(300))) {
      ADD_FAILURE() << "a request timed out";
      return ids;
    }
    EXPECT_TRUE(o.error.empty()) << o.error;
    ids.insert(ids.end(), o.tokens.begin(), o.tokens.end());
    if (o.finished) return ids;
  }
}

std::vector<engine::Submission> batch_of(const std::vector<std::vector<TokenId>>& prompts) {
  std::vector<engine::Submission> batch;
  for (const auto& p : prompts) batch.push_back({p, testing::greedy_params(kMaxTokens)});
  return batch;
}

// kjv-tiny loaded once per test, its 16 prompts, and the engine's metrics.
class SubmitBatchEngineTest : public ::testing::Test {
 protected:
  const std::filesystem::path dir = model_dir("kjv-tiny");
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(dir);
  const std::vector<std::vector<TokenId>> prompts = numbered_prompts(tok);
  const SpecRun run;
  LoadedModel target{dir, run};
  engine::Metrics metrics;
};

TEST_F(SubmitBatchEngineTest, TheFirstStepSchedulesTheWholeBatch) {
  std::vector<std::vector<TokenId>> outputs;
  {
    engine::Engine engine(*target.runner, tok, nullptr, *target.pool, metrics, engine_options(run, 64));
    engine.start();  // running (and waiting) before the batch comes
    auto streams = engine.submit_batch(batch_of(prompts));
    ASSERT_EQ(streams.size(), prompts.size());
    for (auto& s : streams) outputs.push_back(drain(*s));
    EXPECT_TRUE(engine.kv_integrity_ok());
  }
  EXPECT_EQ(metrics.step_totals(false).num_steps, 1u) << "every prompt should be prefilled in the first step";
  EXPECT_EQ(metrics.step_totals(true).num_steps, static_cast<uint64_t>(kMaxTokens - 1))
      << "then every request decodes in the same steps";
  EXPECT_EQ(metrics.snapshot().kv_pages_in_use, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto alone = serve_speculative(dir, run, {prompts[i]}, {testing::greedy_params(kMaxTokens)});
    EXPECT_EQ(outputs[i], alone.tokens[0]) << "prompt " << i << " (streams are in the batch's order)";
  }
}

TEST_F(SubmitBatchEngineTest, AllOrNoneAgainstTheQueueLimit) {
  engine::Engine engine(*target.runner, tok, nullptr, *target.pool, metrics, engine_options(run, 4));
  // Not started: nothing leaves the queue while the limit is probed.
  const std::vector<std::vector<TokenId>> five(prompts.begin(), prompts.begin() + 5);
  EXPECT_THROW(engine.submit_batch(batch_of(five)), engine::EngineOverloaded) << "5 requests, 4 places";
  const std::vector<std::vector<TokenId>> four(prompts.begin(), prompts.begin() + 4);
  auto streams = engine.submit_batch(batch_of(four));  // the refused batch took no place
  EXPECT_EQ(streams.size(), 4u);
  EXPECT_THROW(engine.submit(prompts[4], testing::greedy_params(kMaxTokens)), engine::EngineOverloaded);
  EXPECT_THROW(engine.submit_batch({}), Error);
  engine.start();
  for (auto& s : streams) EXPECT_EQ(drain(*s).size(), static_cast<size_t>(kMaxTokens));
  EXPECT_EQ(metrics.snapshot().requests_aborted_total, 0u);
  EXPECT_TRUE(engine.kv_integrity_ok());
}

}  // namespace
}  // namespace spindle
