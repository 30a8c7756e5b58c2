// Test harness for speculative decoding end to end: a real Engine over a real model (CPU or
// CUDA), with no proposer, the n-gram proposer or a draft model (its own runner, backends and KV
// pool, as startup/draft_model.h builds them), serving a set of prompts at once. Shared by
// tests/engine/spec_engine_test.cc (CPU) and tests/cuda/cuda_engine_test.cc (GPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "engine/engine.h"
#include "engine/metrics.h"
#include "engine/runner.h"
#include "engine/speculative/draft_model_proposer.h"
#include "engine/speculative/ngram_proposer.h"
#include "kv/kv_layout.h"
#include "kv/page_pool.h"
#include "model/model_loader.h"
#include "tokenizer/tokenizer.h"

namespace spindle::testing {

struct SpecRun {
  std::string proposer = "none";  // none | ngram | draft | custom
  engine::speculative::Proposer* custom = nullptr;  // for custom (borrowed)
  // false: the cost model decides each step whether to speculate and with how many drafts.
  bool speculate_always = true;
  std::filesystem::path draft_dir;  // for draft (may be the target itself)
  int draft_vocab_size = 0;         // for draft: its LM head over the first N token ids (0: all)
  int num_draft_tokens = 4;
  attn::Device device = attn::Device::kCpu;
  std::string backend = "reference";
  DType kv_dtype = DType::kF32;
  int num_pages = 256;        // the target's pool (and the draft's)
  int page_size = 16;
  int max_num_batched_tokens = 512;
  int max_mixed_prefill_tokens = 0;  // SchedulerOptions' (0: no cap)
  int max_model_len = 256;
  int max_graph_batch = 0;    // CUDA step graphs for the target and the draft (0: off)
  // Cancel request `cancel_index` after it produced `cancel_after` tokens (-1: none).
  int cancel_index = -1;
  int cancel_after = 0;
  // The runner samples host logits by the device sampler's contract (RunnerOptions::sample_on_host),
  // and the engine's overlap schedule (EngineOptions::overlap_schedule).
  bool sample_on_host = false;
  bool overlap_schedule = false;
  int max_running_requests = 64;
  bool jump_forward = true;  // EngineOptions::jump_forward
};

struct SpecResult {
  std::vector<std::vector<TokenId>> tokens;  // per prompt
  std::vector<int> accepted_drafts;          // per prompt (RequestOutput::num_accepted_draft_tokens)
  std::vector<int> cached_prompt_tokens;     // per prompt (RequestOutput::num_cached_prompt_tokens)
  std::vector<std::string> texts;            // per prompt: the streamed text
  std::vector<engine::FinishReason> finish_reasons;
  std::vector<std::vector<float>> logprobs;  // per prompt: each token's (when asked for)
  engine::MetricsSnapshot metrics;
  uint64_t num_prefill_or_mixed_steps = 0;  // Metrics::step_totals(false)
  std::string rendered_metrics;
  bool integrity_ok = false;
  int draft_states_left = 0;  // DraftModelProposer states after every request finished
};

struct LoadedModel {
  std::unique_ptr<Transformer> model;
  std::unique_ptr<attn::AttentionBackend> prefill, decode;
  std::unique_ptr<engine::Runner> runner;
  std::unique_ptr<kv::PagePool> pool;

  LoadedModel(const std::filesystem::path& dir, const SpecRun& run) {
    LoadOptions load;
    load.device = run.device;
    load.cuda_device = 0;
    model = load_model(dir, load);
    const attn::AttentionShape shape = model->attention_shape(run.kv_dtype, run.page_size);
    prefill = attn::create_attention_backend(run.backend, shape, {});
    decode = attn::create_attention_backend(run.backend, shape, {});
    engine::RunnerOptions options;
    options.max_graph_batch = run.max_graph_batch;
    options.max_model_len = run.max_model_len;
    options.sample_on_host = run.sample_on_host;
    runner = std::make_unique<engine::Runner>(*model, *prefill, *decode, options);
    const ModelConfig& c = model->config();
    const kv::KvLayout layout{c.num_hidden_layers, c.num_key_value_heads, c.head_dim, run.kv_dtype, run.page_size};
    pool = std::make_unique<kv::PagePool>(layout, run.num_pages, 1, run.device);
    runner->bind_kv_caches(pool->layer_caches());
  }
};

// Serves every prompt at once with `params` and returns what each produced.
// Greedy decoding of exactly max_tokens tokens (EOS ignored).
inline engine::SamplingParams greedy_params(int max_tokens) {
  engine::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Requests whose ends differ, for the overlap schedule's tests: a max_tokens of 1 (the prefill's
// token only) and 2, a stop token (pass one the model's greedy continuation produces early, so the
// request ends while its next step is in flight), seeded sampling with log-probabilities, plain
// greedy, and a repetition penalty (its steps run one at a time while it has a pending token).
inline std::vector<engine::SamplingParams> overlap_mix_params(TokenId stop_token) {
  std::vector<engine::SamplingParams> params;
  params.push_back(greedy_params(1));
  params.push_back(greedy_params(2));
  engine::SamplingParams stop = greedy_params(40);
  stop.ignore_eos = false;
  stop.stop_token_ids = {stop_token};
  params.push_back(stop);
  engine::SamplingParams sampled;
  sampled.temperature = 0.9f;
  sampled.top_k = 20;
  sampled.top_p = 0.9f;
  sampled.seed = 7;
  sampled.logprobs = true;
  sampled.top_logprobs = 2;
  sampled.max_tokens = 25;
  sampled.ignore_eos = true;
  params.push_back(sampled);
  params.push_back(greedy_params(33));
  engine::SamplingParams penalised = greedy_params(20);
  penalised.repetition_penalty = 1.3f;
  params.push_back(penalised);
  return params;
}

inline SpecResult serve_speculative(const std::filesystem::path& model_dir, const SpecRun& run,
                                    const std::vector<std::vector<TokenId>>& prompts,
                                    const std::vector<engine::SamplingParams>& params) {
  LoadedModel target(model_dir, run);
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(model_dir);
  std::unique_ptr<LoadedModel> draft;
  std::unique_ptr<engine::speculative::Proposer> proposer;
  engine::speculative::DraftModelProposer* draft_proposer = nullptr;
  if (run.proposer == "ngram") {
    proposer = std::make_unique<engine::speculative::NgramProposer>(1, 12);
  } else if (run.proposer == "draft") {
    draft = std::make_unique<LoadedModel>(run.draft_dir, run);
    if (run.draft_vocab_size > 0) draft->model->limit_logit_ids(run.draft_vocab_size);
    auto p = std::make_unique<engine::speculative::DraftModelProposer>(*draft->runner, *draft->pool, run.max_num_batched_tokens);
    draft_proposer = p.get();
    proposer = std::move(p);
  }
  engine::speculative::Proposer* chosen = run.proposer == "custom" ? run.custom : proposer.get();
  engine::Metrics metrics;
  engine::EngineOptions options;
  options.scheduler.max_num_batched_tokens = run.max_num_batched_tokens;
  options.scheduler.max_mixed_prefill_tokens = run.max_mixed_prefill_tokens;
  options.scheduler.max_running_requests = run.max_running_requests;
  options.overlap_schedule = run.overlap_schedule;
  options.jump_forward = run.jump_forward;
  options.scheduler.max_model_len = run.max_model_len;
  options.max_queued_requests = 64;
  options.model_name = model_dir.filename().string();
  options.cuda_device = run.device == attn::Device::kCuda ? 0 : -1;
  options.proposer = chosen;
  options.num_draft_tokens = chosen ? run.num_draft_tokens : 0;
  options.speculate_always = run.speculate_always;
  options.decode_log_interval = 10;
  SpecResult out;
  {
    engine::Engine engine(*target.runner, tok, nullptr, *target.pool, metrics, options);
    engine.start();
    std::vector<std::shared_ptr<engine::RequestStream>> streams;
    for (size_t i = 0; i < prompts.size(); ++i) streams.push_back(engine.submit(prompts[i], params.at(i % params.size())));
    // The request to cancel is read first, so it is cancelled while it runs.
    out.tokens.resize(streams.size());
    out.accepted_drafts.resize(streams.size());
    out.cached_prompt_tokens.resize(streams.size());
    out.texts.resize(streams.size());
    out.finish_reasons.resize(streams.size());
    out.logprobs.resize(streams.size());
    std::vector<size_t> order;
    if (run.cancel_index >= 0) order.push_back(static_cast<size_t>(run.cancel_index));
    for (size_t i = 0; i < streams.size(); ++i) {
      if (static_cast<int>(i) != run.cancel_index) order.push_back(i);
    }
    for (const size_t i : order) {
      std::vector<TokenId> ids;
      int accepted = 0;
      for (;;) {
        engine::RequestOutput o;
        if (!streams[i]->pop(o, std::chrono::seconds(300))) {
          ADD_FAILURE() << "request " << i << " timed out";
          break;
        }
        EXPECT_TRUE(o.error.empty()) << o.error;
        ids.insert(ids.end(), o.tokens.begin(), o.tokens.end());
        out.texts[i] += o.text;
        for (const auto& lp : o.logprobs) out.logprobs[i].push_back(lp.logprob);
        if (o.finished) out.finish_reasons[i] = o.finish_reason;
        accepted = o.num_accepted_draft_tokens;
        out.cached_prompt_tokens[i] = std::max(out.cached_prompt_tokens[i], o.num_cached_prompt_tokens);
        if (static_cast<int>(i) == run.cancel_index && static_cast<int>(ids.size()) >= run.cancel_after) {
          streams[i]->cancel();
        }
        if (o.finished) break;
      }
      out.tokens[i] = ids;
      out.accepted_drafts[i] = accepted;
    }
    out.integrity_ok = engine.kv_integrity_ok();
    engine.stop();
  }
  out.metrics = metrics.snapshot();
  out.num_prefill_or_mixed_steps = metrics.step_totals(false).num_steps;
  out.rendered_metrics = metrics.render();
  out.draft_states_left = draft_proposer ? draft_proposer->num_states() : 0;
  return out;
}

}  // namespace spindle::testing
