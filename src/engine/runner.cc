#include "engine/runner.h"

#include "util/error.h"

namespace spindle::engine {

Runner::Runner(Transformer& model, attn::AttentionBackend& prefill, attn::AttentionBackend& decode)
    : model_(model), prefill_(prefill), decode_(decode) {
  check_attention_backends(&prefill, &decode, model.device());
}

void Runner::bind_kv_caches(std::span<const attn::LayerKvCache> caches) {
  check_kv_caches(caches, model_.config().num_hidden_layers, model_.device());
  prefill_.bind_kv_caches(caches);
  if (&decode_ != &prefill_) decode_.bind_kv_caches(caches);
}

const StepBatch& Runner::build(const StepPlan& plan) {
  batch_.clear();
  for (const ScheduledSequence& s : plan.sequences) {
    const Request& r = *s.request;
    tokens_.resize(static_cast<size_t>(s.num_new_tokens));
    for (int i = 0; i < s.num_new_tokens; ++i) tokens_[static_cast<size_t>(i)] = r.token_at(s.num_cached_tokens + i);
    const std::vector<int32_t>& pages = r.table.pages();
    batch_.add_sequence(tokens_.data(), s.num_new_tokens, s.num_cached_tokens, pages.data(),
                        static_cast<int32_t>(pages.size()), s.logits_row >= 0 ? 1 : 0);
  }
  return batch_;
}

std::span<float> Runner::run(const StepBatch& batch) {
  attn::AttentionBackend& attention = batch.is_decode() ? decode_ : prefill_;
  const kernels::cuda::DeviceBatch* uploaded = model_.upload(batch, attention.shape().page_size);
  attention.prepare(batch, uploaded);
  logits_.resize(static_cast<size_t>(batch.num_logit_rows()) * static_cast<size_t>(model_.config().vocab_size));
  model_.forward(batch, attention, logits_.data());
  return logits_;
}

}  // namespace spindle::engine
