#include "model/forward_model.h"

#include <cmath>

#include "util/error.h"

namespace spindle {

attn::AttentionShape ForwardModel::attention_shape(DType kv_dtype, int page_size) const {
  const ModelConfig& c = config();
  attn::AttentionShape s;
  s.num_heads = c.num_attention_heads;
  s.num_kv_heads = c.num_key_value_heads;
  s.head_dim = c.head_dim;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  s.kv_dtype = kv_dtype;
  s.page_size = page_size;
  return s;
}

bool check_forward_step(int64_t num_tokens, const attn::BatchMetadata& batch, std::span<const int64_t> logit_rows,
                        std::vector<int64_t>& positions) {
  SPINDLE_CHECK(num_tokens == batch.num_tokens(), "forward: {} token ids for a batch of {} new tokens", num_tokens,
                batch.num_tokens());
  bool any_prefill = false;
  positions.clear();
  for (const auto& s : batch.sequences) {
    SPINDLE_CHECK(s.num_new_tokens >= 0 && s.num_cached_tokens >= 0,
                  "forward: negative token counts ({} new, {} cached)", s.num_new_tokens, s.num_cached_tokens);
    any_prefill = any_prefill || s.num_new_tokens > 1;
    for (int i = 0; i < s.num_new_tokens; ++i) positions.push_back(int64_t{s.num_cached_tokens} + i);
  }
  for (const int64_t r : logit_rows) {
    SPINDLE_CHECK(r >= 0 && r < num_tokens, "forward: logit row {} is outside the batch's {} tokens", r, num_tokens);
  }
  return any_prefill;
}

void check_attention_backends(const attn::AttentionBackend* prefill, const attn::AttentionBackend* decode,
                              attn::Device device) {
  SPINDLE_CHECK(prefill != nullptr && decode != nullptr, "set_attention_backends: backends must not be null");
  for (const attn::AttentionBackend* b : {prefill, decode}) {
    SPINDLE_CHECK(b->device() == device,
                  "set_attention_backends: attention backend {} runs on {}, but this model runs on {}; choose a {} "
                  "backend",
                  b->name(), attn::device_name(b->device()), attn::device_name(device), attn::device_name(device));
  }
}

void check_kv_caches(std::span<const attn::LayerKvCache> caches, int num_layers, attn::Device device) {
  SPINDLE_CHECK(static_cast<int>(caches.size()) == num_layers, "bind_kv_caches: {} caches given for {} layers",
                caches.size(), num_layers);
  for (size_t i = 0; i < caches.size(); ++i) {
    SPINDLE_CHECK(caches[i].device == device,
                  "bind_kv_caches: layer {}'s KV pages are in {} memory, but this model runs on {}", i,
                  attn::device_name(caches[i].device), attn::device_name(device));
  }
}

}  // namespace spindle
