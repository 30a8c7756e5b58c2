// Transformer: THE forward pass of LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM and the mixtures of experts Qwen3MoeForCausalLM, MixtralForCausalLM and
// Qwen2MoeForCausalLM, written once over DeviceOps (device_ops.h); the config switches q/k/v bias,
// q/k norm, tied embeddings, rope scaling and, per layer, the dense MLP or the MoE block. load_cpu_model (model.h) runs it on CpuOps,
// load_cuda_model (cuda_model.h) on CudaOps.
//
// One forward() is one engine step over a StepBatch (kernels/step_batch.h): every sequence's new
// tokens, each at its position. Per layer:
//   h = RMSNorm(x); q, k, v = h W_q^T (+b), h W_k^T (+b), h W_v^T (+b)
//   Qwen3: q, k = RMSNorm per head over head_dim (q_norm, k_norm)
//   q, k = RoPE(q, k, position); a = attention(q, k, v) (the backend writes k, v into the pages)
//   x = x + a W_o^T; h = RMSNorm(x); x = x + (silu(h W_gate^T) * (h W_up^T)) W_down^T
//   (a sparse layer of Qwen3-MoE, Mixtral or Qwen2-MoE: x = x + LayerMath::moe(h), the mixture
//   of experts of model_config.h's MoeConfig)
// then the final RMSNorm and the LM head on the batch's logit rows only. Which ops run fused
// (q/k/v as one product, the K/V page write in the RoPE pass, gate_proj and up_proj as one
// [2I, H] product, CUDA graphs) the device decides behind DeviceOps' entries: nothing here asks.
//
// A step: upload(batch) once, the attention backend's prepare(batch, uploaded), forward(batch,
// backend, logits); engine::Runner (engine/runner.h) does the three. Not thread-safe: one engine
// thread owns a Transformer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "model/device_ops.h"
#include "model/model_config.h"
#include "util/dtype.h"

namespace spindle {

class WeightSource;

class Transformer {
 public:
  // Places every weight of `weights` (already checked against config) with `ops`, then
  // ops->finish_loading(). The source may be dropped afterwards where the device copied.
  Transformer(ModelConfig config, std::unique_ptr<DeviceOps> ops, WeightSource& weights);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return config_; }
  // Where forward() runs: the device of its activations, attention backends and KV pages.
  attn::Device device() const { return ops_->device(); }
  // Bytes of the weights the forward reads, where they live (CPU: the mmap'd tensors plus f32
  // bias copies, a tied or unused lm_head.weight not counted; CUDA: the device copies).
  uint64_t weight_bytes() const { return ops_->weight_bytes(); }
  // Scratch allocated now (grown on demand by forward, never shrunk), RoPE tables and library
  // workspaces. Run forward at the largest batch first to measure the peak.
  uint64_t workspace_bytes() const { return ops_->workspace_bytes(); }
  // Grows the scratch for a step of num_tokens rows and num_logit_rows logit rows as forward()
  // would at that size, computing nothing. On the CPU forward() allocates nothing else that
  // workspace_bytes() counts (tests/startup/workspace_probe_test.cc checks it), so this measures
  // the workspace of such a step without running it.
  void reserve_workspace(int64_t num_tokens, int64_t num_logit_rows);
  // The linear kernel of the projections ("reference", "avx512", "cublas_split", ...).
  const char* linear_kernel_name() const { return ops_->linear_kernel_name(); }
  // Layers whose gate_proj and up_proj run as one [2I, H] product.
  int num_fused_gate_up() const;
  // Layers whose q_proj, k_proj and v_proj run as one [Q + 2K, H] product.
  int num_fused_qkv() const;

  // The LM head computes the logits of the token ids [0, num_ids) only (a draft model proposing
  // from a vocabulary subset, engine/speculative/); every other entry of a logit row is kExcludedLogit.
  // num_ids = vocab_size: the whole vocabulary (the default). Throws for num_ids outside
  // [1, vocab_size], and where the device cannot compute a row range of the head (CUDA).
  void limit_logit_ids(int num_ids);
  // The token ids [0, num_logit_ids()) the LM head computes (vocab_size unless limited).
  int num_logit_ids() const { return num_logit_ids_; }

  // The attention shape the backends must be created for: the model's heads, head_dim and scale
  // 1/sqrt(head_dim), with the caller's KV dtype and page size.
  attn::AttentionShape attention_shape(DType kv_dtype, int page_size) const;

  // The step's batch on the device, once per step (see DeviceOps::upload). Checks the batch
  // (check_step_batch, token ids inside the vocabulary) first. plan_kv_len: a graph step's bound
  // on the context length (kernels::cuda::DeviceBatch::upload), 0 otherwise.
  const kernels::cuda::DeviceBatch* upload(const StepBatch& batch, int page_size, int plan_kv_len = 0);

  // How forward() runs the device work.
  enum class StepMode {
    kEager,  // op by op
    // Replay the device graph of this shape (the row count, and for a step of several new tokens
    // per sequence that count too: graph_key); without a valid one, run eagerly and capture one
    // for the next step of this shape (a failed capture is reported by last_capture_failure and
    // the step still completes). Only where supports_graphs(), and only for batches whose shape
    // the key determines: decode batches, or uniform ones (every sequence the same new tokens
    // and logit rows, engine::is_uniform_verify). The batch must be uploaded with the same
    // plan_kv_len at every step of the key.
    kGraph,
  };
  // Runs every layer over the uploaded batch with `attention` (prepared for this batch, running
  // on device(), its KV caches bound) and writes host logits [batch.num_logit_rows(), vocab_size]
  // f32, row r for the query row batch.logit_rows[r]. Returns when they are written. With logits
  // null (only where samples_on_device()) they stay on the device for sample() and forward
  // returns once the work is queued.
  void forward(const StepBatch& batch, attn::AttentionBackend& attention, float* logits,
               StepMode mode = StepMode::kEager);

  // After forward(): the final RMSNorm of its logit rows, [batch.num_logit_rows(), hidden_size]
  // f32 into `host` (the hidden state the LM head read: embeddings).
  void read_final_rows(float* host, int64_t num_rows) { ops_->read_final_rows(host, num_rows * config_.hidden_size); }
  // After a forward() whose logits stayed on the device (logits null): its first num_rows logit
  // rows, [num_rows, vocab_size] f32, copied into `host` (prompt logprobs where the device
  // samples); waits for the forward. The device's copy stays for sample(). Throws where the
  // logits never stay on the device (!samples_on_device()).
  void read_logits(float* host, int64_t num_rows);

  // Where the device chooses tokens from the logits a forward left on it (CUDA).
  bool samples_on_device() const { return ops_->samples_on_device(); }
  // The last forward's first rows.rows.size() logit rows sampled (kernels/sampling_batch.h); waits.
  void sample(const SamplingBatch& rows, std::vector<SampledRow>& out) { ops_->sample(rows, out); }
  // sample() in two halves, and the next step's tokens taken from the last queued sampling
  // (DeviceOps; the overlap schedule, engine/engine.h). take_pending_tokens after upload().
  void queue_sample(const SamplingBatch& rows) { ops_->queue_sample(rows); }
  void collect_sample(std::vector<SampledRow>& out) { ops_->collect_sample(out); }
  void take_pending_tokens(std::span<const PendingToken> tokens) { ops_->take_pending_tokens(tokens); }
  bool supports_graphs() const { return ops_->supports_graphs(); }
  DeviceOps::GraphStats graph_stats() const { return ops_->graph_stats(); }
  void release_graphs() { ops_->release_graphs(); }
  // Why the last failed capture failed (empty when none did).
  const std::string& last_capture_failure() const { return last_capture_failure_; }

 private:
  struct Layer {
    WeightId input_norm = kNoWeight, post_norm = kNoWeight;  // [H]
    WeightId q_norm = kNoWeight, k_norm = kNoWeight;         // [D], Qwen3 only
    LinearGroup qkv;                                         // q [Q,H], k [K,H], v [K,H] (+ biases)
    WeightId o = kNoWeight;                                  // [H, Q]
    LinearGroup gate_up;                                     // gate [I,H], up [I,H]
    WeightId down = kNoWeight;  // [H, I]
    std::optional<MoeBlock> moe;  // a sparse layer's MLP (then gate_up and down stay empty)
  };

  void place_weights(WeightSource& weights);
  void queue_forward(const StepBatch& batch, attn::AttentionBackend& attention, float* logits);
  void run_layer(int index, int64_t num_tokens, attn::AttentionBackend& attention);

  ModelConfig config_;
  std::unique_ptr<DeviceOps> ops_;
  WeightId embed_ = kNoWeight;       // [V, H]
  WeightId final_norm_ = kNoWeight;  // [H]
  WeightId lm_head_ = kNoWeight;     // [V, H] (the embedding table when tied)
  WeightId lm_head_rows_ = kNoWeight;  // [num_logit_ids_, H]: its first rows (limit_logit_ids)
  int num_logit_ids_ = 0;
  std::vector<Layer> layers_;
  std::string last_capture_failure_;
};

// The logit of a token id outside the LM head's subset (Transformer::limit_logit_ids): finite (a
// row with an infinity is the sampler's non_finite error), and so far below any real logit that
// every processed distribution gives it probability exactly 0 (exp of (-1e30 - max) / T is 0 in
// double precision for any temperature below 1e27; penalties and a logit bias of +-100 keep it so).
inline constexpr float kExcludedLogit = -1e30f;
// logits: rows compact rows of num_ids entries on entry ([rows, num_ids]); on exit [rows, vocab],
// row r's first num_ids entries those of compact row r, the rest kExcludedLogit. In place.
void widen_logit_rows(float* logits, int64_t rows, int64_t num_ids, int64_t vocab);

// Backends for a model on `device`: both non-null and running there.
void check_attention_backends(const attn::AttentionBackend* prefill, const attn::AttentionBackend* decode,
                              attn::Device device);
// One cache per layer, each on `device`.
void check_kv_caches(std::span<const attn::LayerKvCache> caches, int num_layers, attn::Device device);
// A StepBatch's own consistency: non-negative counts, rows contiguous in sequence order,
// positions, maxima and logit rows as add_sequence makes them, page tables long enough for
// `page_size`, every token id inside [0, vocab_size). (Page ids against the pool: the backends.)
void check_step_batch(const StepBatch& batch, int vocab_size, int page_size);

}  // namespace spindle
