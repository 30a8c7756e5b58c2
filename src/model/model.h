// Model: the transformer forward pass on the CPU for LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM and Qwen3ForCausalLM (one code path; the config switches q/k/v bias, q/k norm,
// tied embeddings and rope scaling).
//
// Weights stay in the mmap'd checkpoint in their stored dtype (F32 or BF16 for projections;
// norms and embeddings may also be F16); activations are f32 throughout. One LinearKernel is
// made per projection at load; gate_proj and up_proj share one kernel when they lie back to
// back in the file (no copy), which is how Hugging Face's writer orders them.
//
// One forward() is one engine step: a ragged batch of many sequences, each with
// num_new_tokens new tokens at positions num_cached_tokens + i. Per layer:
//   h = RMSNorm(x); q, k, v = h W_q^T (+b), h W_k^T (+b), h W_v^T (+b)
//   Qwen3: q, k = RMSNorm per head over head_dim (q_norm, k_norm)
//   q, k = RoPE(q, k, position); a = attention(q, k, v) (the backend writes k, v into the pages)
//   x = x + a W_o^T; h = RMSNorm(x); x = x + (silu(h W_gate^T) * (h W_up^T)) W_down^T
// then the final RMSNorm and the LM head on the requested rows only.
//
// Not thread-safe: one engine thread owns a Model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "attn/attention_backend.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "model/forward_model.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace spindle {

class ThreadPool;

struct ModelOptions {
  ThreadPool* pool = nullptr;  // CPU workers for the linear kernels and ops; null: ThreadPool::global()
  // Makes the kernel of each projection; empty: kernels::cpu::make_linear_kernel (the fastest
  // for this machine). Tests pass make_reference_linear_kernel.
  std::function<std::unique_ptr<kernels::cpu::LinearKernel>(const kernels::cpu::LinearWeight&)>
      make_linear;
  // RoPE cos/sin positions precomputed at load; 0: max_position_embeddings (capped at 1 << 20).
  // Later positions are computed on the fly with the same arithmetic.
  int64_t rope_table_positions = 0;
};

class Model final : public ForwardModel {
 public:
  // Reads dir/config.json, maps the checkpoint, checks every weight's name, shape and dtype
  // (check_weights) and makes the linear kernels. Throws spindle::Error naming the folder.
  static std::unique_ptr<Model> load(const std::filesystem::path& dir, const ModelOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const override { return config_; }
  attn::Device device() const override { return attn::Device::kCpu; }
  // Bytes of the checkpoint tensors the forward pass reads (a tied or unused lm_head.weight does
  // not count) plus the f32 copies of biases; the weights are mmap'd, not copied.
  uint64_t weight_bytes() const override { return weight_bytes_; }
  // Current size of the scratch activations (grown on demand by forward, never shrunk) plus the
  // RoPE table. Run forward at the largest batch first to measure the peak.
  uint64_t workspace_bytes() const override;
  // The linear kernel chosen for the projections ("reference", ...).
  const char* linear_kernel_name() const override;
  // Layers whose gate_proj and up_proj run as one [2I, H] kernel (they lie back to back in the file).
  int num_fused_gate_up() const;

  // ForwardModel (forward_model.h): CPU attention backends and host KV pages.
  void set_attention_backends(attn::AttentionBackend* prefill, attn::AttentionBackend* decode) override;
  void bind_kv_caches(std::span<const attn::LayerKvCache> caches) override;
  void forward(std::span<const int32_t> token_ids, const attn::BatchMetadata& batch,
               std::span<const int64_t> logit_rows, float* logits) override;

 private:
  struct Layer;
  struct Workspace;

  Model() = default;
  void load_weights(const ModelOptions& options);
  void run_layer(int index, int64_t num_tokens, attn::AttentionBackend& backend);
  void ensure_workspace(int64_t num_tokens, int64_t num_logit_rows);
  // fn(begin, end) over [0, rows) in chunks, spread over the pool when the work is large.
  void parallel_rows(int64_t rows, int64_t cost_per_row, const std::function<void(int64_t, int64_t)>& fn);

  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  ThreadPool* pool_ = nullptr;
  uint64_t weight_bytes_ = 0;

  kernels::cpu::TypedWeight embed_;  // [vocab, hidden]
  kernels::cpu::TypedWeight final_norm_;
  std::unique_ptr<kernels::cpu::LinearKernel> lm_head_;
  std::vector<Layer> layers_;
  std::unique_ptr<kernels::cpu::RopeTable> rope_;

  attn::AttentionBackend* prefill_backend_ = nullptr;
  attn::AttentionBackend* decode_backend_ = nullptr;
  std::vector<attn::LayerKvCache> kv_caches_;

  std::unique_ptr<Workspace> ws_;
  std::vector<int64_t> positions_;  // [num_tokens] of the current step
};

}  // namespace spindle
