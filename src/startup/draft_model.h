// Speculative decoding's draft model at start-up: the second model folder loaded on the
// target's device, checked to share the target's tokenizer, its attention backends selected for
// its own shape (validation children for its shape, the same selection cache), its LM head
// limited to the first ResolvedSpecConfig::draft_vocab_size token ids, its runner, and
// after the KV plan (which sized its pool next to the target's: capacity_planner.h) its page
// pool and the DraftModelProposer.
#pragma once

#include <filesystem>
#include <memory>

#include "attn/attention_backend.h"
#include "config/server_config.h"
#include "engine/runner.h"
#include "engine/speculative/draft_model_proposer.h"
#include "kv/kv_layout.h"
#include "kv/page_pool.h"
#include "model/model_loader.h"
#include "model/transformer.h"
#include "platform/device_info.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace spindle::startup {

struct DraftModel {
  std::filesystem::path dir;
  std::unique_ptr<ThreadPool> threads;  // CPU: its own pool of --speculative-draft-threads
  ModelConfig config;
  config::ResolvedConfig resolved;  // the target's flags resolved for the draft's shape
  attn::AttentionSelection selection;
  std::unique_ptr<Transformer> model;
  std::unique_ptr<attn::AttentionBackend> prefill_backend;
  std::unique_ptr<attn::AttentionBackend> decode_backend;
  std::unique_ptr<engine::Runner> runner;
  kv::KvLayout layout;
  std::unique_ptr<kv::PagePool> pool;  // after the plan: create_pool()
  std::unique_ptr<engine::speculative::DraftModelProposer> proposer;

  // The pool of num_pages pages (the target's count), bound to the runner, and the proposer.
  void create_pool(int num_pages, int max_num_batched_tokens);
};

// Throws spindle::Error naming the folder and what does not match: no config.json or weights,
// a tokenizer that encodes differently from the target's or a different vocabulary size, a
// max_position_embeddings below the target's --max-model-len.
std::unique_ptr<DraftModel> load_draft_model(const std::filesystem::path& dir, const config::ServerConfig& flags,
                                             const config::ResolvedConfig& target, const DeviceInfo& device,
                                             const tokenizer::Tokenizer& target_tokenizer,
                                             const ModelConfig& target_config, const LoadOptions& load_options,
                                             const attn::BackendOptions& backend_options);

}  // namespace spindle::startup
