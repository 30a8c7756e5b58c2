// What the engine reads from a step's host rows besides sampling, end to end (a real Engine over
// the golden qwen3-qknorm-f32 checkpoint on the CPU).
//
// Embeddings (SamplingParams::embedding): the pooled final normed hidden states (the last
// position's; the mean over the prompt's; the first position's) equal the float64 forward's
// (reference_last_hidden of each prefix) within kF32Tolerance relative error (max|ours - ref| /
// max|ref|, the bound the f32 forward's logits are held to), the prompt read from the prefix cache
// or not (mean and first-token pooling never read it), its rows over several chunked steps.
//
// Prompt logprobs (SamplingParams::prompt_logprobs): every prompt token after the first gets the
// log-probability of the model's row at the position before it, so each entry is checked against
//   - a float64 forward written from the model definition (tests/model/reference_forward.h) of
//     the prompt cut after that position: |ours - reference| <= 2 * kF32Tolerance * max|logit|
//     (kF32Tolerance = 1e-4 is the relative logit error the f32 forward is held to against HF in
//     model_forward_test; a log-softmax entry moves by at most twice the largest logit error);
//   - Hugging Face's own logits (tests/golden/<model>/golden.json, last_logits of each golden
//     prompt): a prompt made of a golden prompt and one more token has, as its last entry, the
//     log_softmax of HF's row at that token, within the same bound, and HF's top alternatives;
//   - HF's greedy continuation: appended to the prompt, each of its tokens has rank 1.
// Prefill is chunked (5 tokens a step, pages of 4), so rows come from several steps; a warm
// prefix cache does not change them (such a request reads no cached page: 0 cached tokens).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "engine/engine.h"
#include "engine/spec_harness.h"
#include "model/golden_fixtures.h"
#include "model/reference_forward.h"
#include "model/safetensors.h"

namespace spindle {
namespace {

constexpr double kF32Tolerance = 1e-4;
const std::string kModel = "qwen3-qknorm-f32";

struct Served {
  std::vector<engine::PromptLogprob> prompt_logprobs;
  std::vector<float> embedding;
  std::vector<TokenId> tokens;
  int cached_prompt_tokens = 0;
};

class HostRowsEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    run_.page_size = 4;
    run_.max_num_batched_tokens = 5;
    loaded_ = std::make_unique<testing::LoadedModel>(testing::model_dir(kModel), run_);
    tok_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::load(testing::model_dir(kModel)));
    engine::EngineOptions options;
    options.scheduler = {run_.max_num_batched_tokens, 8, run_.max_model_len, 0};
    options.max_queued_requests = 16;
    options.model_name = kModel;
    engine_ = std::make_unique<engine::Engine>(*loaded_->runner, *tok_, nullptr, *loaded_->pool, metrics_, options);
    engine_->start();
  }
  void TearDown() override {
    EXPECT_TRUE(engine_->kv_integrity_ok());
    engine_->stop();
  }

  Served serve(const std::vector<TokenId>& prompt, int prompt_logprobs, int max_tokens = 1, bool embedding = false,
               PoolingConfig::Mode pooling = PoolingConfig::Mode::kLastToken) {
    engine::SamplingParams p = testing::greedy_params(max_tokens);
    p.prompt_logprobs = prompt_logprobs;
    p.embedding = embedding;
    p.pooling = pooling;
    auto stream = engine_->submit(prompt, p);
    Served out;
    for (;;) {
      engine::RequestOutput o;
      if (!stream->pop(o, std::chrono::seconds(120))) {
        ADD_FAILURE() << "timed out";
        break;
      }
      EXPECT_TRUE(o.error.empty()) << o.error;
      if (!o.prompt_logprobs.empty()) {
        EXPECT_TRUE(out.tokens.empty()) << "prompt logprobs come with the first token";
        out.prompt_logprobs = o.prompt_logprobs;
      }
      out.tokens.insert(out.tokens.end(), o.tokens.begin(), o.tokens.end());
      if (!o.embedding.empty()) out.embedding = o.embedding;
      out.cached_prompt_tokens = o.num_cached_prompt_tokens;
      if (o.finished) break;
    }
    return out;
  }

  testing::SpecRun run_;
  std::unique_ptr<testing::LoadedModel> loaded_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  engine::Metrics metrics_;
  std::unique_ptr<engine::Engine> engine_;
};

// The checkpoint's F32 tensors as float64, by HF name.
std::map<std::string, std::vector<double>> float64_weights() {
  const Checkpoint checkpoint(testing::model_dir(kModel));
  std::map<std::string, std::vector<double>> w;
  for (const auto& info : checkpoint.tensors()) {
    EXPECT_EQ(info.dtype, DType::kF32) << info.name;
    const TensorView view = checkpoint.tensor(info.name);
    const auto* f = reinterpret_cast<const float*>(view.bytes.data());
    w[info.name].assign(f, f + info.num_elements());
  }
  return w;
}

std::vector<double> log_softmax(const std::vector<double>& logits) {
  const double m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (double l : logits) sum += std::exp(l - m);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - m - std::log(sum);
  return out;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

testing::ReferenceShape reference_shape(const ModelConfig& c) {
  return {c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
          c.head_dim,    c.vocab_size,        c.rms_norm_eps,      c.rope_theta,          c.qk_norm};
}

double relative_error(std::span<const float> ours, const std::vector<double>& ref) {
  double diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, std::abs(ours[i] - ref[i]));
  return diff / max_abs(ref);
}

TEST_F(HostRowsEngine, EmbeddingIsTheFloat64FinalHiddenState) {
  using Mode = PoolingConfig::Mode;
  const auto weights = float64_weights();
  const testing::ReferenceShape shape = reference_shape(loaded_->model->config());
  double worst = 0;
  for (const auto& golden : testing::read_golden(kModel)) {
    // The reference's final hidden state at every position, then pooled three ways.
    std::vector<std::vector<double>> rows;
    for (size_t p = 1; p <= golden.ids.size(); ++p) {
      rows.push_back(testing::reference_last_hidden(shape, weights, {golden.ids.begin(), golden.ids.begin() + p}));
    }
    std::vector<double> mean(rows[0].size());
    for (const auto& r : rows)
      for (size_t i = 0; i < r.size(); ++i) mean[i] += r[i] / static_cast<double>(rows.size());
    const std::vector<std::pair<Mode, std::vector<double>>> cases = {
        {Mode::kLastToken, rows.back()}, {Mode::kMeanTokens, mean}, {Mode::kClsToken, rows.front()}};
    for (const auto& [mode, ref] : cases) {
      for (int round = 0; round < 2; ++round) {  // the second may read the first's pages from the prefix cache
        const Served s = serve(golden.ids, -1, 1, /*embedding=*/true, mode);
        SCOPED_TRACE(golden.text + " pooling " + std::to_string(static_cast<int>(mode)) + " round " + std::to_string(round));
        ASSERT_EQ(s.embedding.size(), ref.size());
        EXPECT_TRUE(s.tokens.empty()) << "an embedding draws no token";
        const double err = relative_error(s.embedding, ref);
        EXPECT_LE(err, kF32Tolerance);
        worst = std::max(worst, err);
        if (round == 1 && golden.ids.size() > 4) {
          if (mode == Mode::kLastToken) EXPECT_GT(s.cached_prompt_tokens, 0) << "the last token reads the cache";
          if (mode != Mode::kLastToken) EXPECT_EQ(s.cached_prompt_tokens, 0) << "every row is computed";
        }
      }
    }
    EXPECT_GT(relative_error(serve(golden.ids, -1, 1, true, Mode::kMeanTokens).embedding, rows.back()), 1e-2)
        << "mean and last-token pooling differ";
  }
  std::printf("embeddings: worst relative error against float64 %.3g (tolerance %.3g)\n", worst, kF32Tolerance);
}

TEST_F(HostRowsEngine, EveryPositionMatchesTheFloat64Forward) {
  const auto weights = float64_weights();
  const testing::ReferenceShape shape = reference_shape(loaded_->model->config());
  double worst = 0;
  int checked = 0;
  for (const auto& golden : testing::read_golden(kModel)) {
    std::vector<TokenId> prompt(golden.ids.begin(), golden.ids.end());
    prompt.insert(prompt.end(), golden.greedy.begin(), golden.greedy.begin() + 6);
    const Served s = serve(prompt, 3);
    ASSERT_EQ(s.prompt_logprobs.size(), prompt.size() - 1) << golden.text;
    for (size_t p = 0; p + 1 < prompt.size(); ++p) {
      const std::vector<int32_t> cut(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(p) + 1);
      const std::vector<double> logits = testing::reference_last_logits(shape, weights, cut);
      const std::vector<double> ref = log_softmax(logits);
      const double tol = 2 * kF32Tolerance * max_abs(logits);
      const engine::PromptLogprob& e = s.prompt_logprobs[p];
      ASSERT_EQ(e.token, prompt[p + 1]);
      EXPECT_NEAR(e.logprob, ref[static_cast<size_t>(e.token)], tol) << golden.text << " position " << p;
      worst = std::max(worst, std::abs(e.logprob - ref[static_cast<size_t>(e.token)]));
      // 1 + the tokens surely above it <= rank <= 1 + the tokens that may be above it.
      int lo = 1, hi = 1;
      for (double l : ref) {
        lo += l > ref[static_cast<size_t>(e.token)] + tol ? 1 : 0;
        hi += l > ref[static_cast<size_t>(e.token)] - tol ? 1 : 0;
      }
      EXPECT_GE(e.rank, lo) << "position " << p;
      EXPECT_LE(e.rank, hi - 1) << "position " << p;  // hi counted the token itself
      ASSERT_EQ(e.top.size(), 3u);
      for (const auto& t : e.top) EXPECT_NEAR(t.logprob, ref[static_cast<size_t>(t.token)], tol);
      EXPECT_GE(e.top[0].logprob, e.top[1].logprob);
      ++checked;
    }
  }
  std::printf("%d prompt logprobs, worst |ours - float64| %.3g\n", checked, worst);
}

TEST_F(HostRowsEngine, LastEntryIsHuggingFacesRowAndGreedyTokensRankFirst) {
  for (const auto& golden : testing::read_golden(kModel)) {
    std::vector<TokenId> prompt(golden.ids.begin(), golden.ids.end());
    prompt.push_back(golden.greedy[0]);
    const Served s = serve(prompt, 5);
    ASSERT_EQ(s.prompt_logprobs.size(), prompt.size() - 1);
    std::vector<double> hf(golden.last_logits.begin(), golden.last_logits.end());
    const std::vector<double> ref = log_softmax(hf);
    const double tol = 2 * kF32Tolerance * max_abs(hf);
    const engine::PromptLogprob& last = s.prompt_logprobs.back();
    EXPECT_NEAR(last.logprob, ref[static_cast<size_t>(golden.greedy[0])], tol) << golden.text;
    EXPECT_EQ(last.rank, 1) << "HF's greedy token";
    std::vector<int> order(ref.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return ref[a] > ref[b]; });
    ASSERT_EQ(last.top.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_NEAR(last.top[i].logprob, ref[static_cast<size_t>(last.top[i].token)], tol);
      EXPECT_NEAR(last.top[i].logprob, ref[static_cast<size_t>(order[i])], tol) << "HF's alternative " << i;
    }
    // The whole greedy continuation as prompt: every one of its tokens is the argmax before it.
    std::vector<TokenId> greedy(golden.ids.begin(), golden.ids.end());
    greedy.insert(greedy.end(), golden.greedy.begin(), golden.greedy.end());
    const Served g = serve(greedy, 0);
    ASSERT_EQ(g.prompt_logprobs.size(), greedy.size() - 1);
    for (size_t i = golden.ids.size() - 1; i + 1 < greedy.size(); ++i) {
      EXPECT_EQ(g.prompt_logprobs[i].rank, 1) << golden.text << " greedy token " << i;
      EXPECT_TRUE(g.prompt_logprobs[i].top.empty());
    }
  }
}

TEST_F(HostRowsEngine, WarmPrefixCacheIsRecomputedNotRead) {
  const auto golden = testing::read_golden(kModel).back();  // the longest prompt (18 tokens)
  std::vector<TokenId> prompt(golden.ids.begin(), golden.ids.end());
  const Served cold = serve(prompt, 2, 4);
  EXPECT_EQ(cold.cached_prompt_tokens, 0);
  const Served plain = serve(prompt, -1, 4);  // the cache now holds the prompt's full pages
  EXPECT_GT(plain.cached_prompt_tokens, 0) << "the prefix cache is warm";
  EXPECT_TRUE(plain.prompt_logprobs.empty());
  const Served warm = serve(prompt, 2, 4);
  EXPECT_EQ(warm.cached_prompt_tokens, 0) << "a prompt-logprobs request computes every position";
  ASSERT_EQ(warm.prompt_logprobs.size(), cold.prompt_logprobs.size());
  for (size_t i = 0; i < cold.prompt_logprobs.size(); ++i) {
    EXPECT_FLOAT_EQ(warm.prompt_logprobs[i].logprob, cold.prompt_logprobs[i].logprob) << i;
    EXPECT_EQ(warm.prompt_logprobs[i].rank, cold.prompt_logprobs[i].rank) << i;
  }
  EXPECT_EQ(warm.tokens, cold.tokens);
  EXPECT_EQ(warm.tokens, plain.tokens);
  // One token: no prompt logprob to give (the first token has none).
  const Served one = serve({prompt[0]}, 1);
  EXPECT_TRUE(one.prompt_logprobs.empty());
  EXPECT_EQ(one.tokens.size(), 1u);
}

}  // namespace
}  // namespace spindle
