// The engine's host-row cases (prompt logprobs and embeddings), shared by the CPU test
// (tests/engine/host_rows_engine_test.cc) and the CUDA one (tests/cuda/cuda_engine_test.cc): each
// instantiates HostRowsEngine with the paths it runs (HostRowsPath). A real Engine over the golden
// qwen3-qknorm-f32 checkpoint.
//
// Paths: the host path (host logits, engine::Sampler: serving on the CPU); the device-sampling
// path (the step launched, its prompt rows' logits and final rows copied at launch: HostRows in
// engine/runner.h) with the overlap schedule, run on the CPU by RunnerOptions::sample_on_host and
// on CUDA for real (cuda_reference attention, f32 KV: the computation HF's goldens made; decode
// steps replay CUDA graphs, among them an embedding's last step when its last chunk is one token).
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
// On CUDA the tolerances are the same (cuda_model_test holds the f32 forward on CUDA to the same
// kF32Tolerance against HF: cuBLAS f32 products without TF32, f32 ops).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/spec_harness.h"
#include "model/golden_fixtures.h"
#include "model/reference_forward.h"
#include "model/safetensors.h"

namespace spindle::testing {

namespace host_rows {
constexpr double kF32Tolerance = 1e-4;
inline const std::string kModel = "qwen3-qknorm-f32";
}  // namespace host_rows

// One way a step reaches its host rows (the paths above).
struct HostRowsPath {
  std::string name;                        // the instantiation's test name
  attn::Device device = attn::Device::kCpu;
  std::string backend = "reference";       // both phases' attention backend
  bool device_sampling = false;            // launch() + HostRows (CPU: RunnerOptions::sample_on_host)
  int max_graph_batch = 0;                 // CUDA graphs of decode steps up to this batch (0: none)
  const std::string& (*unavailable)() = nullptr;  // why this path cannot run here ("" or null: it can)
};

inline std::string host_rows_path_name(const ::testing::TestParamInfo<HostRowsPath>& info) { return info.param.name; }
// GoogleTest prints a failing case's path by its name.
inline void PrintTo(const HostRowsPath& path, std::ostream* os) { *os << path.name; }

struct HostRowsServed {
  std::vector<engine::PromptLogprob> prompt_logprobs;
  std::vector<float> embedding;
  std::vector<TokenId> tokens;
  int cached_prompt_tokens = 0;
};

class HostRowsEngine : public ::testing::TestWithParam<HostRowsPath> {
 protected:
  void SetUp() override {
    const HostRowsPath& path = GetParam();
    if (path.unavailable != nullptr && !path.unavailable().empty()) GTEST_SKIP() << path.name << ": " << path.unavailable();
    run_.page_size = 4;
    run_.max_num_batched_tokens = 5;
    run_.device = path.device;
    run_.backend = path.backend;
    run_.kv_dtype = DType::kF32;
    run_.sample_on_host = path.device_sampling && path.device == attn::Device::kCpu;
    run_.max_graph_batch = path.max_graph_batch;
    loaded_ = std::make_unique<LoadedModel>(model_dir(host_rows::kModel), run_);
    ASSERT_EQ(loaded_->runner->samples_on_device(), path.device_sampling) << path.name;
    tok_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::load(model_dir(host_rows::kModel)));
    engine::EngineOptions options;
    options.scheduler = {run_.max_num_batched_tokens, 8, run_.max_model_len, 0};
    options.max_queued_requests = 16;
    options.model_name = host_rows::kModel;
    options.cuda_device = path.device == attn::Device::kCuda ? 0 : -1;
    options.overlap_schedule = path.device_sampling;
    engine_ = std::make_unique<engine::Engine>(*loaded_->runner, *tok_, nullptr, *loaded_->pool, metrics_, options);
    engine_->start();
  }
  void TearDown() override {
    if (engine_ == nullptr) return;  // skipped
    EXPECT_TRUE(engine_->kv_integrity_ok());
    engine_->stop();
  }

  static engine::SamplingParams params(int prompt_logprobs, int max_tokens = 1, bool embedding = false,
                                      PoolingConfig::Mode pooling = PoolingConfig::Mode::kLastToken) {
    engine::SamplingParams p = greedy_params(max_tokens);
    p.prompt_logprobs = prompt_logprobs;
    p.embedding = embedding;
    p.pooling = pooling;
    return p;
  }
  HostRowsServed serve(const std::vector<TokenId>& prompt, int prompt_logprobs, int max_tokens = 1, bool embedding = false,
               PoolingConfig::Mode pooling = PoolingConfig::Mode::kLastToken) {
    return collect(*engine_->submit(prompt, params(prompt_logprobs, max_tokens, embedding, pooling)));
  }
  static HostRowsServed collect(engine::RequestStream& stream) {
    HostRowsServed out;
    for (;;) {
      engine::RequestOutput o;
      if (!stream.pop(o, std::chrono::seconds(120))) {
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

  SpecRun run_;
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  engine::Metrics metrics_;
  std::unique_ptr<engine::Engine> engine_;
};

namespace host_rows {
// The checkpoint's F32 tensors as float64, by HF name.
inline std::map<std::string, std::vector<double>> float64_weights() {
  const Checkpoint checkpoint(model_dir(kModel));
  std::map<std::string, std::vector<double>> w;
  for (const auto& info : checkpoint.tensors()) {
    EXPECT_EQ(info.dtype, DType::kF32) << info.name;
    const TensorView view = checkpoint.tensor(info.name);
    const auto* f = reinterpret_cast<const float*>(view.bytes.data());
    w[info.name].assign(f, f + info.num_elements());
  }
  return w;
}

inline std::vector<double> log_softmax(const std::vector<double>& logits) {
  const double m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (double l : logits) sum += std::exp(l - m);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - m - std::log(sum);
  return out;
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

inline double relative_error(std::span<const float> ours, const std::vector<double>& ref) {
  double diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, std::abs(ours[i] - ref[i]));
  return diff / max_abs(ref);
}
}  // namespace host_rows

TEST_P(HostRowsEngine, EmbeddingIsTheFloat64FinalHiddenState) {
  using namespace host_rows;
  using Mode = PoolingConfig::Mode;
  const auto weights = float64_weights();
  const ReferenceShape shape = reference_shape(loaded_->model->config());
  double worst = 0;
  for (const auto& golden : read_golden(kModel)) {
    // The reference's final hidden state at every position, then pooled three ways.
    std::vector<std::vector<double>> rows;
    for (size_t p = 1; p <= golden.ids.size(); ++p) {
      rows.push_back(reference_last_hidden(shape, weights, {golden.ids.begin(), golden.ids.begin() + p}));
    }
    std::vector<double> mean(rows[0].size());
    for (const auto& r : rows)
      for (size_t i = 0; i < r.size(); ++i) mean[i] += r[i] / static_cast<double>(rows.size());
    const std::vector<std::pair<Mode, std::vector<double>>> cases = {
        {Mode::kLastToken, rows.back()}, {Mode::kMeanTokens, mean}, {Mode::kClsToken, rows.front()}};
    for (const auto& [mode, ref] : cases) {
      for (int round = 0; round < 2; ++round) {  // the second may read the first's pages from the prefix cache
        const HostRowsServed s = serve(golden.ids, -1, 1, /*embedding=*/true, mode);
        SCOPED_TRACE(golden.text + " pooling " + std::to_string(static_cast<int>(mode)) + " round " + std::to_string(round));
        ASSERT_EQ(s.embedding.size(), ref.size());
        EXPECT_TRUE(s.tokens.empty()) << "an embedding draws no token";
        const double err = relative_error(s.embedding, ref);
        EXPECT_LE(err, kF32Tolerance);
        worst = std::max(worst, err);
        if (round == 1 && golden.ids.size() > 4) {
          if (mode == Mode::kLastToken) {
            EXPECT_GT(s.cached_prompt_tokens, 0) << "the last token reads the cache";
          } else {
            EXPECT_EQ(s.cached_prompt_tokens, 0) << "every row is computed";
          }
        }
      }
    }
    EXPECT_GT(relative_error(serve(golden.ids, -1, 1, true, Mode::kMeanTokens).embedding, rows.back()), 1e-2)
        << "mean and last-token pooling differ";
  }
  std::printf("embeddings: worst relative error against float64 %.3g (tolerance %.3g)\n", worst, kF32Tolerance);
}

TEST_P(HostRowsEngine, EveryPositionMatchesTheFloat64Forward) {
  using namespace host_rows;
  const auto weights = float64_weights();
  const ReferenceShape shape = reference_shape(loaded_->model->config());
  double worst = 0;
  int checked = 0;
  for (const auto& golden : read_golden(kModel)) {
    std::vector<TokenId> prompt(golden.ids.begin(), golden.ids.end());
    prompt.insert(prompt.end(), golden.greedy.begin(), golden.greedy.begin() + 6);
    const HostRowsServed s = serve(prompt, 3);
    ASSERT_EQ(s.prompt_logprobs.size(), prompt.size() - 1) << golden.text;
    for (size_t p = 0; p + 1 < prompt.size(); ++p) {
      const std::vector<int32_t> cut(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(p) + 1);
      const std::vector<double> logits = reference_last_logits(shape, weights, cut);
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

TEST_P(HostRowsEngine, LastEntryIsHuggingFacesRowAndGreedyTokensRankFirst) {
  using namespace host_rows;
  for (const auto& golden : read_golden(kModel)) {
    std::vector<TokenId> prompt(golden.ids.begin(), golden.ids.end());
    prompt.push_back(golden.greedy[0]);
    const HostRowsServed s = serve(prompt, 5);
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
    const HostRowsServed g = serve(greedy, 0);
    ASSERT_EQ(g.prompt_logprobs.size(), greedy.size() - 1);
    for (size_t i = golden.ids.size() - 1; i + 1 < greedy.size(); ++i) {
      EXPECT_EQ(g.prompt_logprobs[i].rank, 1) << golden.text << " greedy token " << i;
      EXPECT_TRUE(g.prompt_logprobs[i].top.empty());
    }
  }
}

TEST_P(HostRowsEngine, WarmPrefixCacheIsRecomputedNotRead) {
  using namespace host_rows;
  const auto golden = read_golden(kModel).back();  // the longest prompt (18 tokens)
  std::vector<TokenId> prompt(golden.ids.begin(), golden.ids.end());
  const HostRowsServed cold = serve(prompt, 2, 4);
  EXPECT_EQ(cold.cached_prompt_tokens, 0);
  const HostRowsServed plain = serve(prompt, -1, 4);  // the cache now holds the prompt's full pages
  EXPECT_GT(plain.cached_prompt_tokens, 0) << "the prefix cache is warm";
  EXPECT_TRUE(plain.prompt_logprobs.empty());
  const HostRowsServed warm = serve(prompt, 2, 4);
  EXPECT_EQ(warm.cached_prompt_tokens, 0) << "a prompt-logprobs request computes every position";
  ASSERT_EQ(warm.prompt_logprobs.size(), cold.prompt_logprobs.size());
  for (size_t i = 0; i < cold.prompt_logprobs.size(); ++i) {
    EXPECT_FLOAT_EQ(warm.prompt_logprobs[i].logprob, cold.prompt_logprobs[i].logprob) << i;
    EXPECT_EQ(warm.prompt_logprobs[i].rank, cold.prompt_logprobs[i].rank) << i;
  }
  EXPECT_EQ(warm.tokens, cold.tokens);
  EXPECT_EQ(warm.tokens, plain.tokens);
  // One token: no prompt logprob to give (the first token has none).
  const HostRowsServed one = serve({prompt[0]}, 1);
  EXPECT_TRUE(one.prompt_logprobs.empty());
  EXPECT_EQ(one.tokens.size(), 1u);
}

// A step holding rows asked for (a prompt-logprobs request, a mean-pooled embedding) and a
// seeded sampling request: the sampled request draws the tokens it draws alone (its draws are its
// own: per-request generator on the host, a function of seed and counter on the device), and the
// rows equal those of the requests served alone: prompt logprobs within 2 * kF32Tolerance *
// max|logit| of HF's bound (the batch changes the products' row counts, not the math), the
// embedding within kF32Tolerance relative error.
TEST_P(HostRowsEngine, RowsAskedForChangeNoOtherRequestsDraws) {
  using namespace host_rows;
  const auto golden = read_golden(kModel);
  ASSERT_GE(golden.size(), 3u);
  engine::SamplingParams seeded = greedy_params(12);
  seeded.temperature = 0.9f;
  seeded.top_p = 0.95f;
  seeded.seed = 1234;
  std::vector<TokenId> logprob_prompt(golden[1].ids.begin(), golden[1].ids.end());
  logprob_prompt.push_back(golden[1].greedy[0]);
  const HostRowsServed sampled_alone = collect(*engine_->submit(golden[0].ids, seeded));
  const HostRowsServed logprobs_alone = serve(logprob_prompt, 3, 2);
  const HostRowsServed embedding_alone = serve(golden[2].ids, -1, 1, true, PoolingConfig::Mode::kMeanTokens);
  ASSERT_EQ(sampled_alone.tokens.size(), 12u);
  std::vector<engine::Submission> batch(3);
  batch[0] = {golden[0].ids, seeded};
  batch[1] = {logprob_prompt, params(3, 2)};
  batch[2] = {golden[2].ids, params(-1, 1, true, PoolingConfig::Mode::kMeanTokens)};
  const auto streams = engine_->submit_batch(std::move(batch));
  const HostRowsServed sampled = collect(*streams[0]);
  const HostRowsServed logprobs = collect(*streams[1]);
  const HostRowsServed embedding = collect(*streams[2]);
  EXPECT_EQ(sampled.tokens, sampled_alone.tokens) << GetParam().name;
  EXPECT_EQ(logprobs.tokens, logprobs_alone.tokens);
  std::vector<double> hf(golden[1].last_logits.begin(), golden[1].last_logits.end());
  const double tol = 2 * kF32Tolerance * max_abs(hf);
  ASSERT_EQ(logprobs.prompt_logprobs.size(), logprob_prompt.size() - 1);
  ASSERT_EQ(logprobs_alone.prompt_logprobs.size(), logprob_prompt.size() - 1);
  for (size_t i = 0; i < logprobs.prompt_logprobs.size(); ++i) {
    EXPECT_EQ(logprobs.prompt_logprobs[i].token, logprobs_alone.prompt_logprobs[i].token);
    EXPECT_NEAR(logprobs.prompt_logprobs[i].logprob, logprobs_alone.prompt_logprobs[i].logprob, tol) << i;
  }
  EXPECT_NEAR(logprobs.prompt_logprobs.back().logprob, log_softmax(hf)[static_cast<size_t>(golden[1].greedy[0])], tol);
  ASSERT_EQ(embedding.embedding.size(), embedding_alone.embedding.size());
  ASSERT_FALSE(embedding.embedding.empty());
  const std::vector<double> alone(embedding_alone.embedding.begin(), embedding_alone.embedding.end());
  EXPECT_LE(relative_error(embedding.embedding, alone), kF32Tolerance);
}

}  // namespace spindle::testing
