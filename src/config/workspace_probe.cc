#include "config/workspace_probe.h"

#include <algorithm>
#include <vector>

#include "kv/page_pool.h"
#include "model/forward_model.h"
#include "platform/cuda_info.h"
#include "util/error.h"

namespace spindle::config {

uint64_t measure_workspace_bytes(ForwardModel& model, DType kv_dtype, int page_size, int num_tokens, int max_seq_len) {
  SPINDLE_CHECK(num_tokens > 0, "--max-num-batched-tokens {} must be positive", num_tokens);
  SPINDLE_CHECK(max_seq_len > 0, "--max-model-len {} must be positive", max_seq_len);
  const ModelConfig& c = model.config();
  const kv::KvLayout layout = kv_layout_for(c, kv_dtype, page_size);

  // Sequences of max_seq_len tokens (the last one shorter), each on its own pages.
  attn::BatchMetadata batch;
  std::vector<int64_t> rows;
  int num_pages = 0;
  for (int begin = 0; begin < num_tokens; begin += max_seq_len) {
    attn::SequenceMetadata seq;
    seq.num_new_tokens = std::min(max_seq_len, num_tokens - begin);
    const int pages = (seq.num_new_tokens + page_size - 1) / page_size;
    for (int i = 0; i < pages; ++i) seq.page_table.push_back(num_pages + i);
    num_pages += pages;
    rows.push_back(begin + seq.num_new_tokens - 1);
    batch.sequences.push_back(std::move(seq));
  }
  const bool on_cuda = model.device() == attn::Device::kCuda;
  kv::PagePool scratch(layout, num_pages, 1, model.device());
  model.bind_kv_caches(scratch.layer_caches());
  const std::vector<int32_t> tokens(static_cast<size_t>(num_tokens), 0);
  std::vector<float> logits(rows.size() * static_cast<size_t>(c.vocab_size));
  const uint64_t free_before = on_cuda ? current_cuda_memory().free_bytes : 0;
  model.forward(tokens, batch, rows, logits.data());
  uint64_t workspace = model.workspace_bytes();
  if (on_cuda) {
    const uint64_t free_after = current_cuda_memory().free_bytes;
    if (free_before > free_after) workspace = std::max(workspace, free_before - free_after);
  }

  const uint64_t t = static_cast<uint64_t>(num_tokens);
  return workspace + t * static_cast<uint64_t>(c.vocab_size) * sizeof(float) +
         (t - rows.size()) * static_cast<uint64_t>(c.hidden_size) * sizeof(float);
}

WorkspaceProbe make_workspace_probe(ForwardModel& model, DType kv_dtype, int page_size, int max_seq_len) {
  return [&model, kv_dtype, page_size, max_seq_len](int num_tokens) {
    return measure_workspace_bytes(model, kv_dtype, page_size, num_tokens, max_seq_len);
  };
}

UnvalidatedBackends make_unvalidated_backends(const ResolvedConfig& resolved, const DeviceInfo& device,
                                              ThreadPool* pool) {
  AttentionSelectionOptions options = resolved.attention;
  options.skip_validation = true;
  options.policy = BackendPolicy::kPriority;
  const AttentionSelection selection =
      select_attention_backends(device, resolved.attention_shape, options, BackendValidator{});
  attn::BackendOptions backend_options;
  backend_options.pool = pool;
  UnvalidatedBackends b;
  b.prefill_name = selection.prefill_backend;
  b.decode_name = selection.decode_backend;
  b.prefill = attn::create_attention_backend(b.prefill_name, resolved.attention_shape, {}, backend_options);
  b.decode = attn::create_attention_backend(b.decode_name, resolved.attention_shape, {}, backend_options);
  return b;
}

}  // namespace spindle::config
