// Everything `serve` and `generate` need, built in order: machine facts -> model config and
// tokenizer -> resolved flags -> attention selection (validated in child processes) -> model
// weights (mmap) -> attention backends -> KV plan (with a profiling forward) -> page pool ->
// engine. Each step logs what it decided.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "attn/attention_backend.h"
#include "config/server_config.h"
#include "engine/engine.h"
#include "engine/spec/ngram_proposer.h"
#include "startup/draft_model.h"
#include "kv/capacity_planner.h"
#include "kv/page_pool.h"
#include "engine/runner.h"
#include "model/transformer.h"
#include "platform/device_info.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace CLI {
class App;
}

namespace spindle::cli {

// The folder of the embedded default model (models/kjv-tiny of this source tree, or next to the
// installed binary).
std::filesystem::path default_model_dir();

struct ServingFlags {
  std::string model_dir;  // empty: the embedded model
  std::string served_model_name;
  config::ServerConfig server;
};

// --attention..., --kv..., --max-running-requests, --max-queued-requests, --chat-template.
void add_serving_flags(CLI::App& app, ServingFlags& flags);

struct ServingStack {
  std::filesystem::path model_dir;
  std::string model_name;
  DeviceInfo device;
  ModelConfig model_config;
  config::ResolvedConfig resolved;
  attn::AttentionSelection selection;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::optional<tokenizer::ChatTemplate> chat_template;
  std::unique_ptr<Transformer> model;  // on the CPU, or on the GPU with --device cuda:N
  std::unique_ptr<attn::AttentionBackend> prefill_backend;
  std::unique_ptr<attn::AttentionBackend> decode_backend;
  std::unique_ptr<engine::Runner> runner;
  // Speculative decoding: a draft model (--speculative-algorithm draft) or the n-gram proposer.
  std::unique_ptr<startup::DraftModel> draft;
  std::unique_ptr<engine::spec::NgramProposer> ngram;
  kv::KvPlan kv_plan;
  std::unique_ptr<kv::PagePool> kv_pool;
  engine::Metrics metrics;
  std::unique_ptr<engine::Engine> engine;

  ~ServingStack();
};

// Throws spindle::Error with the reason when any step fails. The engine is started.
std::unique_ptr<ServingStack> build_serving_stack(const ServingFlags& flags);

// Logs the resolved configuration: chosen attention backends and why, the KV plan.
void log_serving_stack(const ServingStack& stack);

}  // namespace spindle::cli
