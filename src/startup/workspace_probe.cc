#include "startup/workspace_probe.h"

#include <algorithm>
#include <vector>

#include "kv/page_pool.h"
#include "engine/runner.h"
#include "platform/cuda_info.h"
#include "util/error.h"

namespace spindle::startup {

uint64_t measure_workspace_bytes(engine::Runner& runner, DType kv_dtype, int page_size, int num_tokens,
                                 int max_seq_len) {
  SPINDLE_CHECK(num_tokens > 0, "--max-num-batched-tokens {} must be positive", num_tokens);
  SPINDLE_CHECK(max_seq_len > 0, "--max-model-len {} must be positive", max_seq_len);
  Transformer& model = runner.model();
  const ModelConfig& c = model.config();
  const kv::KvLayout layout = startup::kv_layout_for(c, kv_dtype, page_size);

  // Sequences of max_seq_len tokens (the last one shorter), each on its own pages, one logit row each.
  StepBatch batch;
  int num_pages = 0;
  std::vector<int32_t> pages;
  const std::vector<TokenId> tokens(static_cast<size_t>(std::min(num_tokens, max_seq_len)), 0);
  for (int begin = 0; begin < num_tokens; begin += max_seq_len) {
    const int n = std::min(max_seq_len, num_tokens - begin);
    const int seq_pages = (n + page_size - 1) / page_size;
    pages.resize(static_cast<size_t>(seq_pages));
    for (int i = 0; i < seq_pages; ++i) pages[static_cast<size_t>(i)] = num_pages + i;
    num_pages += seq_pages;
    batch.add_sequence(tokens.data(), n, 0, pages.data(), seq_pages, 1);
  }
  const size_t num_rows = batch.logit_rows.size();
  uint64_t workspace = 0;
  if (model.device() == attn::Device::kCuda) {
    // The device's free memory before and after a real step: cuBLAS and attention workspaces too,
    // and the decode step graphs of every batch size (captured here over the scratch pool, then
    // dropped: serving captures them again over the real pool, into the memory counted here).
    kv::PagePool scratch(layout, num_pages, 1, model.device());
    runner.bind_kv_caches(scratch.layer_caches());
    const uint64_t free_before = current_cuda_memory().free_bytes;
    runner.run(batch);
    if (runner.graphs_enabled()) runner.capture_graphs();
    workspace = model.workspace_bytes();  // graph memory included
    const uint64_t free_after = current_cuda_memory().free_bytes;
    if (free_before > free_after) workspace = std::max(workspace, free_before - free_after);
    runner.release_graphs();
  } else {
    // CPU: the forward allocates nothing beyond the scratch it reserves for the step, so reserve it
    // and count, without running the step (which took ~15 s on the 1B shape at 2048 tokens).
    model.reserve_workspace(num_tokens, static_cast<int64_t>(num_rows));
    workspace = model.workspace_bytes();
  }

  const uint64_t t = static_cast<uint64_t>(num_tokens);
  return workspace + t * static_cast<uint64_t>(c.vocab_size) * sizeof(float) +
         (t - num_rows) * static_cast<uint64_t>(c.hidden_size) * sizeof(float);
}

startup::WorkspaceProbe make_workspace_probe(engine::Runner& runner, DType kv_dtype, int page_size, int max_seq_len) {
  return [&runner, kv_dtype, page_size, max_seq_len](int num_tokens) {
    return measure_workspace_bytes(runner, kv_dtype, page_size, num_tokens, max_seq_len);
  };
}

UnvalidatedBackends make_unvalidated_backends(const config::ResolvedConfig& resolved, const DeviceInfo& device,
                                              ThreadPool* pool) {
  attn::AttentionSelectionOptions options = resolved.attention;
  options.skip_validation = true;
  options.policy = attn::BackendPolicy::kPriority;
  const attn::AttentionSelection selection =
      attn::select_attention_backends(device, resolved.attention_shape, options, attn::BackendValidator{});
  attn::BackendOptions backend_options;
  backend_options.pool = pool;
  UnvalidatedBackends b;
  b.prefill_name = selection.prefill_backend;
  b.decode_name = selection.decode_backend;
  b.prefill = attn::create_attention_backend(b.prefill_name, resolved.attention_shape, {}, backend_options);
  b.decode = attn::create_attention_backend(b.decode_name, resolved.attention_shape, {}, backend_options);
  return b;
}

}  // namespace spindle::startup
