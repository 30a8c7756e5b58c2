// CudaModel: the transformer forward pass on one CUDA device, the GPU counterpart of Model
// (model.h): the same architectures in one code path, the same loading and checks
// (model_files.h: a folder Model rejects is rejected here with the same message) and the same
// forward contract (ForwardModel). Built only with SPINDLE_WITH_CUDA.
//
// Weights are uploaded once at load, in their stored dtype (F32, BF16 or F16), into one device
// allocation; biases as f32. A layer's gate_proj and up_proj are placed side by side as one
// [2I, H] weight when their dtypes agree (one product); a tied LM head reads the embedding table.
// The checkpoint is unmapped once uploaded.
//
// Per layer, as Model (activations f32 [T, *] on the device):
//   h = RMSNorm(x); q, k, v = h W_q^T (+b), h W_k^T (+b), h W_v^T (+b)
//   Qwen3: q, k = RMSNorm per head over head_dim (q_norm, k_norm)
//   q, k = RoPE(q, k, position); a = attention(q, k, v) (the backend writes k, v into the pages)
//   x = x + a W_o^T; h = RMSNorm(x); x = x + (silu(h W_gate^T) * (h W_up^T)) W_down^T
// then the final RMSNorm and the LM head on the requested rows only; the logits are copied to
// the host. Projections: cuBLAS (kernels/cuda/cublas_linear.h; 16-bit weights get split
// activations unless allow_16bit_activations). Other ops: kernels/cuda/model_ops.h. RoPE reads
// the CPU RopeTable's cos/sin for positions below the table size and computes later positions
// with the same arithmetic.
//
// Streams: everything runs on the legacy default stream, where the CUDA attention backends run;
// forward() synchronizes it before returning. load() and forward() make options.device current
// on the calling thread. Not thread-safe: one engine thread owns a CudaModel.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "attn/attention_backend.h"
#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/model_ops.h"
#include "model/forward_model.h"
#include "model/model_config.h"

namespace spindle {

class Checkpoint;

struct CudaModelOptions {
  int device = 0;  // CUDA runtime ordinal (after CUDA_VISIBLE_DEVICES)
  // RoPE cos/sin positions precomputed at load; 0: max_position_embeddings (capped at 1 << 20).
  int64_t rope_table_positions = 0;
  // bf16/f16 weights: round activations to 16 bits before each product (faster prefill, ~1e-2
  // relative logit error) instead of the default hi/lo split (~1e-5). See cublas_linear.h.
  bool allow_16bit_activations = false;
};

class CudaModel final : public ForwardModel {
 public:
  // Reads dir/config.json, maps and checks the checkpoint (as Model::load), then uploads the
  // weights to options.device. Throws spindle::Error naming the folder, or the CUDA failure.
  static std::unique_ptr<CudaModel> load(const std::filesystem::path& dir, const CudaModelOptions& options = {});
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const ModelConfig& config() const override { return config_; }
  attn::Device device() const override { return attn::Device::kCuda; }
  int cuda_device() const { return device_; }
  // Device bytes of the weights uploaded (tensors in their stored dtype, biases as f32; a tied
  // LM head counts once). Alignment padding between tensors (< 256 bytes each) is not counted.
  uint64_t weight_bytes() const override { return weight_bytes_; }
  // Device bytes now allocated for scratch: activations, step metadata, the RoPE table and the
  // cuBLAS workspace and conversion scratch. Grown on demand by forward, never shrunk.
  uint64_t workspace_bytes() const override;
  // "cublas_split" or "cublas_round16" (f32 weights are multiplied in f32 either way).
  const char* linear_kernel_name() const override;
  // Layers whose gate_proj and up_proj run as one [2I, H] product.
  int num_fused_gate_up() const;

  // ForwardModel: CUDA attention backends and device KV pages (LayerKvCache::device kCuda).
  void set_attention_backends(attn::AttentionBackend* prefill, attn::AttentionBackend* decode) override;
  void bind_kv_caches(std::span<const attn::LayerKvCache> caches) override;
  void forward(std::span<const int32_t> token_ids, const attn::BatchMetadata& batch,
               std::span<const int64_t> logit_rows, float* logits) override;

 private:
  struct Norm {
    const void* data = nullptr;  // [cols] on the device
    kernels::cuda::WeightType type = kernels::cuda::WeightType::kF32;
  };
  struct Layer;
  struct Workspace;

  CudaModel();
  void upload_weights(const Checkpoint& checkpoint);
  void upload_rope(int64_t table_positions);
  void ensure_workspace(int64_t num_tokens, int64_t num_logit_rows);
  void run_layer(int index, int64_t num_tokens, attn::AttentionBackend& backend);
  void rms_norm(const float* x, float* out, int64_t rows, int64_t cols, const Norm& weight,
                const int64_t* row_index = nullptr);

  ModelConfig config_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;  // the legacy default stream
  uint64_t weight_bytes_ = 0;

  kernels::cuda::DeviceBuffer weights_;  // every weight, 256-byte aligned slots
  Norm embed_;                           // [vocab, hidden]
  Norm final_norm_;
  kernels::cuda::DeviceWeight lm_head_;  // [vocab, hidden]
  bool has_16bit_weights_ = false;       // any projection BF16/F16: the linear layers need scratch
  std::vector<Layer> layers_;
  kernels::cuda::DeviceBuffer rope_table_;  // [rope_positions_, head_dim]: cos then sin per row
  kernels::cuda::DeviceBuffer inv_freq_;    // [head_dim / 2]
  int64_t rope_positions_ = 0;
  std::unique_ptr<kernels::cuda::CublasLinear> linear_;

  attn::AttentionBackend* prefill_backend_ = nullptr;
  attn::AttentionBackend* decode_backend_ = nullptr;
  std::vector<attn::LayerKvCache> kv_caches_;

  std::unique_ptr<Workspace> ws_;
  std::vector<int64_t> positions_;  // [num_tokens] of the current step (host)
  std::vector<std::byte> staging_;  // host copy of the step's positions, logit rows and token ids
};

}  // namespace spindle
