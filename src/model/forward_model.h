// ForwardModel: what the engine and the serving code use of a model, whichever device runs the
// forward pass: Model (CPU, model.h) or CudaModel (CUDA, cuda_model.h, builds with CUDA only).
//
// The contract of every implementation:
//   - attention backends and KV caches live on device(): a kCpu model takes CPU backends and host
//     pages, a kCuda model CUDA backends and device pages (LayerKvCache::device says which);
//   - forward() takes host spans and a host logits buffer and returns with the logits written;
//   - the same arguments are rejected with the same messages (check_forward_step and friends).
// Not thread-safe: one engine thread owns a model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "attn/attention_backend.h"
#include "model/model_config.h"
#include "util/dtype.h"

namespace spindle {

class ForwardModel {
 public:
  virtual ~ForwardModel() = default;

  virtual const ModelConfig& config() const = 0;
  // Where forward() runs: the device of its activations, attention backends and KV pages.
  virtual attn::Device device() const = 0;
  // Bytes of the weights the forward pass reads, where they live (host or device); see each model.
  virtual uint64_t weight_bytes() const = 0;
  // Scratch allocated now (grown on demand by forward, never shrunk). Run forward at the largest
  // batch first to measure the peak.
  virtual uint64_t workspace_bytes() const = 0;
  // The linear kernel of the projections ("reference", "avx512", "cublas_split", ...).
  virtual const char* linear_kernel_name() const = 0;

  // The attention shape the backends must be created for: the model's heads, head_dim and scale
  // 1/sqrt(head_dim), with the caller's KV dtype and page size.
  attn::AttentionShape attention_shape(DType kv_dtype, int page_size) const;

  // prefill serves steps where any sequence has more than one new token, decode the others.
  // Not owned; may be the same backend; both must run on device(). Re-binds the KV caches given
  // so far.
  virtual void set_attention_backends(attn::AttentionBackend* prefill, attn::AttentionBackend* decode) = 0;
  // One cache per layer (num_hidden_layers of them) on device(); the caller owns the pages.
  // Passed on to the backends now and whenever they change.
  virtual void bind_kv_caches(std::span<const attn::LayerKvCache> caches) = 0;

  // token_ids: [batch.num_tokens()] (every sequence's new tokens, in batch order), host memory.
  // logit_rows: indices into token_ids whose logits are wanted (e.g. each sequence's last row).
  // logits: host [logit_rows.size(), vocab_size] f32, written row by row in logit_rows order.
  virtual void forward(std::span<const int32_t> token_ids, const attn::BatchMetadata& batch,
                       std::span<const int64_t> logit_rows, float* logits) = 0;
};

// forward()'s argument checks, shared by every ForwardModel. Checks the token count against the
// batch, non-negative counts and logit rows inside the batch; fills positions ([num_tokens]:
// num_cached_tokens + i for each sequence's i-th new token) and returns whether any sequence has
// more than one new token (the prefill backend's steps).
bool check_forward_step(int64_t num_tokens, const attn::BatchMetadata& batch, std::span<const int64_t> logit_rows,
                        std::vector<int64_t>& positions);

// set_attention_backends' checks: both non-null and running on `device`.
void check_attention_backends(const attn::AttentionBackend* prefill, const attn::AttentionBackend* decode,
                              attn::Device device);

// bind_kv_caches' checks: one cache per layer, each on `device`.
void check_kv_caches(std::span<const attn::LayerKvCache> caches, int num_layers, attn::Device device);

}  // namespace spindle
