// The golden-model engine runs that the CUDA end-to-end tests share (cuda_engine_test.cc,
// cuda_moe_model_test.cc): a real Engine on CUDA device 0 serving every golden prompt at once,
// the check of its tokens against Hugging Face's greedy continuations, and the speculative run
// those comparisons use. Compiled everywhere; runs only where a CUDA device is (the tests skip).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "engine/engine.h"
#include "engine/metrics.h"
#include "engine/runner.h"
#include "engine/spec_harness.h"
#include "kv/page_pool.h"
#include "model/cuda_model.h"
#include "model/golden_fixtures.h"
#include "tokenizer/tokenizer.h"

namespace spindle::testing {

// Every golden prompt's ids, in order.
inline std::vector<std::vector<TokenId>> golden_ids(const std::vector<GoldenPrompt>& golden) {
  std::vector<std::vector<TokenId>> prompts;
  for (const GoldenPrompt& g : golden) prompts.push_back(g.ids);
  return prompts;
}

// Speculative runs on device 0 as the HF comparisons make them: cuda_reference attention (a
// verify row computes like a decode row; bf16 rounding in other kernels moves logits by ~1e-3,
// more than the smallest greedy margin of the bf16 goldens), an f32 KV cache, graphs up to batch 8.
inline SpecRun exact_cuda_spec_run() {
  SpecRun run;
  run.device = attn::Device::kCuda;
  run.backend = "cuda_reference";
  run.kv_dtype = DType::kF32;
  run.max_graph_batch = 8;
  return run;
}

struct CudaServeOptions {
  std::string backend = "cuda_reference";  // prefill and decode
  DType kv_dtype = DType::kF32;
  int max_graph_batch = 8;                 // 0: eager decode steps
  bool overlap_schedule = false;           // EngineOptions::overlap_schedule
  int page_size = 16;
};

struct Served {
  std::vector<std::vector<TokenId>> tokens;  // per prompt
  DeviceOps::GraphStats graphs;
  bool graphs_enabled = false;
};

// Serves every prompt at once with `params` through a real Engine on CUDA device 0 (256 pages, 512
// batched tokens, 64 running requests, max model length 256) and returns the generated ids.
// A request that gives nothing for 120 s or reports an error fails the test; so does a KV pool
// that does not balance at the end.
inline Served serve_on_cuda(const std::string& model, const CudaServeOptions& serve,
                            const std::vector<std::vector<TokenId>>& prompts, const engine::SamplingParams& params) {
  auto transformer = load_cuda_model(model_dir(model));
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(model_dir(model));
  const attn::AttentionShape shape = transformer->attention_shape(serve.kv_dtype, serve.page_size);
  auto prefill = attn::create_attention_backend(serve.backend, shape, {});
  auto decode = attn::create_attention_backend(serve.backend, shape, {});
  engine::RunnerOptions runner_options;
  runner_options.max_graph_batch = serve.max_graph_batch;
  runner_options.max_model_len = 256;
  engine::Runner runner(*transformer, *prefill, *decode, runner_options);
  const ModelConfig& c = transformer->config();
  kv::KvLayout layout{c.num_hidden_layers, c.num_key_value_heads, c.head_dim, serve.kv_dtype, serve.page_size};
  kv::PagePool pool(layout, 256, 1, attn::Device::kCuda);
  runner.bind_kv_caches(pool.layer_caches());
  engine::Metrics metrics;
  engine::EngineOptions options;
  options.scheduler.max_num_batched_tokens = 512;
  options.scheduler.max_running_requests = 64;
  options.scheduler.max_model_len = 256;
  options.max_queued_requests = 64;
  options.model_name = model;
  options.cuda_device = 0;
  options.overlap_schedule = serve.overlap_schedule;
  engine::Engine engine(runner, tok, nullptr, pool, metrics, options);
  engine.start();
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (const auto& p : prompts) streams.push_back(engine.submit(p, params));
  Served out;
  for (auto& stream : streams) {
    std::vector<TokenId> ids;
    for (;;) {
      engine::RequestOutput o;
      if (!stream->pop(o, std::chrono::seconds(120))) {
        ADD_FAILURE() << model << ": a request timed out";
        break;
      }
      EXPECT_TRUE(o.error.empty()) << o.error;
      ids.insert(ids.end(), o.tokens.begin(), o.tokens.end());
      if (o.finished) break;
    }
    out.tokens.push_back(ids);
  }
  EXPECT_TRUE(engine.kv_integrity_ok());
  engine.stop();
  out.graphs = transformer->graph_stats();
  out.graphs_enabled = runner.graphs_enabled();
  return out;
}

// Each prompt's tokens begin with HF's greedy continuation of it, token for token (stops at the
// first difference, naming `what`, the prompt and the token).
inline void expect_golden_greedy(const std::vector<std::vector<TokenId>>& tokens,
                                 const std::vector<GoldenPrompt>& golden, const std::string& what) {
  ASSERT_EQ(tokens.size(), golden.size());
  for (size_t i = 0; i < golden.size(); ++i) {
    ASSERT_GE(tokens[i].size(), golden[i].greedy.size()) << what << " prompt " << i;
    for (size_t j = 0; j < golden[i].greedy.size(); ++j) {
      ASSERT_EQ(tokens[i][j], golden[i].greedy[j]) << what << " prompt " << i << " token " << j;
    }
  }
}

}  // namespace spindle::testing
