// Everything `serve` and `generate` need, built in order: machine facts -> model config and
// tokenizer -> resolved flags -> then per data-parallel rank: its device bound (CUDA: its GPU;
// CPU: its disjoint core share, threads pinned there) -> attention selection for that device
// (validated in child processes; the on-disk selection cache is shared) -> model weights (mmap on
// the CPU, shared by the page cache) -> attention backends created with the rank's DpConfig ->
// runner; then per pool (the ranks sharing one memory: every CPU rank, or the ranks sharing one
// GPU) the KV plan (with a profiling step) split equally over its ranks -> the page pool (each
// rank allocates only its own page range) -> per rank its engine -> the DP front (router) over
// them. Each step logs what it decided, per rank.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "config/server_config.h"
#include "engine/dp_group.h"
#include "engine/engine.h"
#include "engine/speculative/ngram_proposer.h"
#include "startup/draft_model.h"
#include "startup/linear_selection.h"
#include "kv/capacity_planner.h"
#include "kv/page_pool.h"
#include "engine/runner.h"
#include "model/pooling_config.h"
#include "model/transformer.h"
#include "platform/cpu_topology.h"
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
  // How chat output is read (src/chat): a format name, "none", or "auto" (detected from the
  // chat template's text; none for the built-ins).
  std::string reasoning_parser = "auto";
  std::string tool_call_parser = "auto";
};

// --attention..., --kv..., --speculative-..., --dp-size and the router flags, --max-running-requests,
// --max-queued-requests, --chat-template, --reasoning-parser, --tool-call-parser.
void add_serving_flags(CLI::App& app, ServingFlags& flags);

// One data-parallel rank: its device, its choices and its engine.
struct ServingRank {
  int rank = 0;
  int pool_index = 0;  // which of ServingStack::kv_pools it allocates from
  int local_rank = 0;  // its rank inside that pool (DpConfig::dp_rank of its backends)
  int pool_size = 1;   // ranks sharing that pool (DpConfig::dp_size)
  config::ResolvedConfig resolved;  // the stack's, with this rank's cuda_device
  DeviceInfo device;                // as bound for this rank
  std::optional<CpuShare> cpus;     // CPU with --dp-size > 1: its core share (threads pinned)
  attn::AttentionSelection selection;
  // CPU: the measured linear kernels (the draft model's shapes are selected as it loads).
  std::shared_ptr<startup::LinearKernelChooser> linear;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Transformer> model;  // on the CPU, or on the GPU with --device cuda:N
  std::unique_ptr<attn::AttentionBackend> prefill_backend;
  std::unique_ptr<attn::AttentionBackend> decode_backend;
  std::unique_ptr<engine::Runner> runner;
  // Speculative decoding, per rank (a proposer keeps per-request state by the rank's request ids):
  // a draft model (--speculative-algorithm draft: its own runner and KV pool) or the n-gram proposer.
  std::unique_ptr<startup::DraftModel> draft;
  std::unique_ptr<engine::speculative::NgramProposer> ngram;
  kv::KvPlan kv_plan;  // its pool's plan (per-rank figures are this rank's)
  engine::Metrics metrics;
  std::unique_ptr<engine::Engine> engine;
};

struct ServingStack {
  std::filesystem::path model_dir;
  std::string model_name;
  DeviceInfo device;  // as detected (before any rank bound its device)
  ModelConfig model_config;
  PoolingConfig pooling;  // /v1/embeddings' (the folder's sentence-transformers config, else last token)
  config::ResolvedConfig resolved;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::optional<tokenizer::ChatTemplate> chat_template;
  std::vector<std::unique_ptr<kv::PagePool>> kv_pools;
  std::vector<std::unique_ptr<ServingRank>> ranks;  // [dp_size]
  std::unique_ptr<engine::DpGroup> group;           // what the server and generate submit to

  ~ServingStack();
};

// Throws spindle::Error with the reason when any step fails. The engines are started.
std::unique_ptr<ServingStack> build_serving_stack(const ServingFlags& flags);

// Logs the resolved configuration: per rank its device (core share or GPU), chosen attention
// backends and why, its KV plan.
void log_serving_stack(const ServingStack& stack);

}  // namespace spindle::cli
