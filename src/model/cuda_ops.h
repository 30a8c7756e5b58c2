// CudaOps: DeviceOps on one CUDA device (device_ops.h). Built only with SPINDLE_WITH_CUDA.
//
// Weights are uploaded once at finish_loading, in their stored dtype (F32, BF16 or F16), into one
// device allocation (256-byte aligned slots); biases as f32. A two-part linear (gate_proj and
// up_proj) is placed side by side as one [2I, H] weight when the dtypes agree; a tensor placed
// twice (a tied LM head reads the embedding table) has one slot. Projections: cuBLAS
// (kernels/cuda/cublas_linear.h; 16-bit weights get split activations unless
// allow_16bit_activations). FP8 linear weights (F8_E4M3 with their scale, model/fp8_config.h) are
// uploaded as bytes with their scales as f32 after them in the slot and run on
// kernels/cuda/fp8_linear.h (the streaming FP8 products up to 32 rows: gemv_fp8, gemv_fp8_mma;
// above, the FP8 prefill entry chosen per shape, kernels/cuda/fp8_linear_registry.h);
// q | k | v and gate | up join as 16-bit ones do where their scales allow (model/fp8_join.h; else
// they are placed one by one), and with FP8 weights no op writes a fused 16-bit copy of its output
// (the products convert their input themselves). Other ops: kernels/cuda/model_ops.h. RoPE reads the CPU RopeTable's
// cos/sin for positions below the table size and computes later positions with the same
// arithmetic. The step's batch is uploaded once (kernels::cuda::DeviceBatch) and shared with the
// attention backend.
//
// Streams: everything runs on one stream CudaOps creates (blocking: ordered with the legacy
// default stream, where the KV pool is cleared); the uploaded DeviceBatch carries it to the
// attention backends. finish_step and sample synchronize it. upload() makes the device current
// on the calling thread.
//
// Sampling: kernels/cuda/device_sampler.h over the kLogits scratch. Graphs: the forward's work
// captured on the stream (thread-local capture mode) and instantiated per key; a graph is
// dropped when any device buffer was reallocated after it was captured.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_sampler.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/fp8_linear_registry.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/moe_kernels.h"
#include "kernels/cuda/paged_attention.h"
#include "model/cuda_model.h"
#include "model/cuda_moe.h"
#include "model/device_ops.h"
#include "model/model_config.h"

namespace spindle {

class CudaOps final : public DeviceOps {
 public:
  // Makes options.device current on the calling thread.
  CudaOps(const ModelConfig& config, const CudaModelOptions& options);
  ~CudaOps() override;

  attn::Device device() const override { return attn::Device::kCuda; }
  const char* linear_kernel_name() const override { return linear_->name(); }

  WeightId place(std::span<const WeightView> parts, WeightUse use) override;
  // Joined (q/k/v with their biases side by side; gate/up) where the parts share one dtype (FP8
  // parts: and their scales join, model/fp8_join.h).
  LinearGroup place_group(LinearGroupKind kind, std::span<const WeightView> weights,
                          std::span<const WeightView> biases) override;
  void finish_loading() override;
  // Device bytes of the weights uploaded (tensors in their stored dtype, biases as f32; a tensor
  // placed twice counts once). Alignment padding between tensors (< 256 bytes each) is not counted.
  uint64_t weight_bytes() const override { return weight_bytes_; }

  const kernels::cuda::DeviceBatch* upload(const StepBatch& batch, int page_size, int plan_kv_len) override;
  const StepBatchView& step() const override { return batch_.step(); }
  void reserve(int64_t num_tokens, int64_t num_logit_rows) override;
  float* scratch(Scratch slot) override { return scratch_[static_cast<int>(slot)].as<float>(); }
  uint64_t workspace_bytes() const override;
  float* logits_target(float* /*host*/) override { return scratch(Scratch::kLogits); }
  void finish_step(float* host, int64_t count) override;
  void read_final_rows(float* host, int64_t count) override;

  bool samples_on_device() const override { return true; }
  void queue_sample(const SamplingBatch& batch) override;
  void collect_sample(std::vector<SampledRow>& out) override { sampler_.collect(out); }
  void take_pending_tokens(std::span<const PendingToken> tokens) override;

  bool supports_graphs() const override { return true; }
  // The forward's work captured on the stream (thread-local capture mode) and instantiated per key.
  void run_forward(int64_t graph_key, const std::function<void()>& work, std::string& capture_failure) override;
  void release_graphs() override;
  GraphStats graph_stats() const override { return graph_stats_; }

  void embed(WeightId table, const TokenId* ids, int64_t num_ids, int64_t hidden, float* out) override;
  void rms_norm(const float* x, float* out, int64_t rows, int64_t cols, WeightId w,
                const int64_t* row_index = nullptr) override;
  void add_rms_norm(float* hidden, const float* delta, float* out, int64_t rows, int64_t cols, WeightId w) override;
  void add(float* y, const float* x, int64_t rows, int64_t cols) override;
  void linear(const float* x, int64_t rows, std::span<const Product> products) override;
  void qk_norm_rope(float* q, float* k, int64_t rows, int num_heads, int num_kv_heads, WeightId q_norm,
                    WeightId k_norm, const int64_t* positions) override;
  void silu_mul(const float* gate, const float* up, int64_t stride, float* out, int64_t rows, int64_t cols) override;
  // A joined q/k/v group: its product into kQKV scratch, then one split + norm + RoPE pass that also
  // writes k and v into the backend's KV write target when it offers one (true then); at 1-2 rows
  // without q/k norms, where gemv16 takes the product, all of it in one gemv16 launch. Three
  // products: the default.
  bool attention_input(const AttentionInput& in, attn::AttentionBackend& attention, int layer) override;
  // The backend asked to write a 16-bit copy of out into the linear layers' input scratch (slot 0,
  // in the rounding mode), which the output projection then reads.
  void attend(attn::AttentionBackend& attention, int layer, attn::ConstTensor q, attn::ConstTensor k,
              attn::ConstTensor v, attn::Tensor out, bool kv_written) override;
  // A joined gate/up group: one gemv16 launch (product + SwiGLU) where CublasLinear::forward_swiglu
  // takes it (FP8: the joined product, then silu_mul). Two products: the default.
  void swiglu(const float* x, int64_t rows, const LinearGroup& gate_up, float* gate_up_scratch, float* act,
              int64_t im) override;
  // A sparse layer's mixture of experts on the device, no host sync (cuda_moe.cc, model/cuda_moe.h).
  void moe(const float* x, int64_t rows, const MoeBlock& block, float* y) override;

 private:
  // cuda_moe.cc: the MoE scratch grown for a step of `rows` rows (and the linear scratch for a
  // shared expert); its bytes; a layer's expert table; one chunk of rows: its routing and
  // grouping, its expert products, the shared expert.
  void reserve_moe(int64_t rows);
  uint64_t moe_workspace_bytes() const;
  const CudaMoeExperts& moe_experts(const MoeBlock& block);
  void moe_chunk(const float* x, int64_t rows, const MoeBlock& block, const CudaMoeExperts& experts, float* y);
  void moe_chunk_fused(const float* x, int64_t rows, const MoeBlock& block, const CudaMoeExperts& experts, float* y);
  kernels::cuda::MoeRouteParams moe_route_params(const float* x, int64_t rows, const MoeBlock& block);
  void moe_route(const float* x, int64_t rows, const MoeBlock& block);
  kernels::cuda::MoeGroupedParams moe_grouped_params(const float* x, int64_t rows, const MoeBlock& block,
                                                     const CudaMoeExperts& experts, bool gate_up);
  void moe_expert_products(const float* x, int64_t rows, const MoeBlock& block, const CudaMoeExperts& experts);
  void moe_shared_expert(const float* x, int64_t rows, const MoeBlock& block);

  // qkv [rows, Q + 2K] (q heads, k heads, v heads) -> q, k, v as qk_norm_rope leaves them; with a
  // non-empty kv it also writes each row's k and v into the layer's KV pages there.
  void split_qkv_rope(const float* qkv, float* q, float* k, float* v, int64_t rows, int num_heads, int num_kv_heads,
                      WeightId q_norm, WeightId k_norm, const int64_t* positions, const attn::KvWriteTarget& kv);
  // The joined q/k/v product into qkv_product.y, then split_qkv_rope of it (one gemv16 launch
  // where it takes them).
  void linear_split_qkv_rope(const float* x, int64_t rows, const Product& qkv_product, float* q, float* k, float* v,
                             int num_heads, int num_kv_heads, WeightId q_norm, WeightId k_norm,
                             const int64_t* positions, const attn::KvWriteTarget& kv);
  // The joined gate/up product and SwiGLU (gate_up [rows, 2 im] scratch).
  void linear_swiglu(const float* x, int64_t rows, WeightId gate_up_weight, float* gate_up, float* act, int64_t im);
  // Where the attention backend may write a 16-bit copy of its output out [rows, cols]; empty
  // where this device needs none. attention_output_copied: the backend wrote it.
  attn::OutputCopy attention_output_copy(const float* out, int64_t rows, int64_t cols);
  void attention_output_copied(const float* out, int64_t rows, int64_t cols, const attn::OutputCopy& copy);
  // Graphs: replay_graph returns false when no valid graph is kept under key; end_capture keeps
  // the captured graph under key, or returns false (keeping nothing) saying why.
  bool replay_graph(int64_t key);
  void begin_capture();
  bool end_capture(int64_t key, std::string* why);
  void abort_capture();

  // One placed weight: its host parts until finish_loading, then its device slot.
  struct Placed {
    WeightUse use = WeightUse::kVector;
    std::vector<std::span<const std::byte>> parts;  // host bytes, back to back in the slot
    std::vector<float> bias;                        // kBias: the f32 copy to upload
    size_t offset = 0;                              // slot offset in weights_
    bool shares_slot = false;                       // placed before (a tied LM head): nothing to copy
    kernels::cuda::DeviceWeight weight;             // kLinear (data set at finish_loading)
    std::vector<float> fp8_scales;                  // kLinear FP8: the scales to upload after the codes
    size_t fp8_scale_offset = 0;                    //   their offset in the slot
    kernels::cuda::DeviceFp8Weight fp8;             //   the device view (set at finish_loading)
    kernels::cuda::Fp8PrefillProduct* fp8_prefill = nullptr;  // > 32 rows; null: fp8_linear_ (W8A16)
    kernels::cuda::WeightType type = kernels::cuda::WeightType::kF32;  // kVector
    const void* data = nullptr;                     // the device slot, after finish_loading
  };
  const Placed& placed(WeightId id) const;
  void upload_rope(int64_t table_positions);
  // Where an op writing `out` [rows, cols] also writes its 16-bit copy for the linear() that
  // reads it next: only outputs that are linear inputs (kNormed, kFinalRows, kActivation), only
  // in the rounding mode with one 16-bit weight dtype. Sets ready16_ when it returns a target.
  // slot: CublasLinear::input16_target's (1 for a copy written while slot 0 is being read).
  kernels::cuda::Out16 out16_for(const float* out, int64_t rows, int64_t cols, int slot = 0);
  // x made ready for a product with w: the 16-bit copy its producer wrote (ready16_), else prepare().
  kernels::cuda::CublasLinear::Input input_for(const float* x, int64_t rows, const kernels::cuda::DeviceWeight& w);

  struct Graph {
    cudaGraphExec_t exec = nullptr;
    uint64_t epoch = 0;  // kernels::cuda::reallocation_epoch() when it was captured
  };

  ModelConfig config_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;  // created by the constructor
  std::map<int64_t, Graph> graphs_;
  GraphStats graph_stats_;
  double capture_started_ = 0;      // seconds (steady clock) at begin_capture
  uint64_t free_before_capture_ = 0;
  uint64_t epoch_at_capture_ = 0;
  kernels::cuda::DeviceSampler sampler_;
  std::unique_ptr<kernels::cuda::CublasLinear> linear_;
  std::unique_ptr<kernels::cuda::Fp8Linear> fp8_linear_;
  // An FP8 weight's placement (codes, padding, f32 scales in one slot); false where its parts
  // cannot be one weight.
  bool place_fp8(std::span<const WeightView> parts, Placed& p);
  // The FP8 views and scratch once the slots are uploaded, and the prefill products chosen.
  void finish_fp8();
  // The FP8 prefill entry of each FP8 weight shape (fp8_prefill_kernel_: a name or "auto").
  void choose_fp8_prefill();
  std::string fp8_prefill_kernel_;
  std::filesystem::path fp8_prefill_cache_dir_;  // "auto"'s on-disk check cache; empty: none
  std::string cache_fingerprint_;
  std::map<std::string, std::unique_ptr<kernels::cuda::Fp8PrefillProduct>> fp8_prefill_;  // by entry name
  int64_t fp8_max_in_ = 0, fp8_max_out_ = 0, fp8_max_elements_ = 0;
  bool fp8_has_block_ = false;
  int fp8_joined_ = 0, fp8_apart_ = 0;  // FP8 groups placed joined / one by one (logged at finish_fp8)
  std::string fp8_apart_why_;           // the first group placed apart: why
  std::vector<Placed> placed_;
  std::map<const void*, size_t> slot_of_;  // host data -> offset (a tensor placed twice shares a slot)
  size_t cursor_ = 0;                      // bytes of the layout so far
  uint64_t weight_bytes_ = 0;
  bool has_16bit_weights_ = false;         // any projection BF16/F16: the linear layers need scratch
  DType linear16_dtype_ = DType::kF32;     // the 16-bit dtype of every projection, else kF32
  // The input whose 16-bit copy the last op wrote (out16_for), for the next linear() over exactly
  // that x; every other op clears it, and so does a prepare() (it overwrites the copy).
  struct Ready16 {
    const float* x = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    const void* target = nullptr;  // where the copy is
  };
  Ready16 ready16_;
  kernels::cuda::DeviceBuffer weights_;
  kernels::cuda::DeviceBuffer rope_table_;  // [rope_positions_, head_dim]: cos then sin per row
  kernels::cuda::DeviceBuffer inv_freq_;    // [head_dim / 2]
  int64_t rope_positions_ = 0;
  kernels::cuda::DeviceBuffer scratch_[static_cast<int>(Scratch::kCount)];
  kernels::cuda::DeviceBatch batch_;
  std::unique_ptr<CudaMoeState> moe_;  // a mixture of experts' tables and scratch (reserve_moe)
};

}  // namespace spindle
