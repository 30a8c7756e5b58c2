// CpuOps: DeviceOps on the CPU (device_ops.h), the plain ops plus a joined gate/up product; the
// other fused entries run their defaults. Projections run through kernels::cpu::LinearKernel, the
// small ops through kernels/cpu/ops.h, row ranges spread over a ThreadPool when the work is large.
//
// Weights (CpuOps keeps their WeightSource, and so the mapped file, alive):
//   F32 / BF16             read in place (linear weights, norms, embedding table)
//   F16                    norms and embedding table read in place; linear weights widened to an
//                          f32 copy at load (the CPU linear kernels read F32 or BF16; F16 linear
//                          weights are rare in GGUF files, which use BF16, F32 or block types)
//   Q8_0, Q4_0, Q4_K,      linear weights repacked at load (kernels/cpu/quant_linear.h) and the
//   Q5_K, Q6_K            source released (WeightView::release); a tied LM head too
//   any dequantize_row     embedding table read in place, the looked-up rows dequantized
//   type
//   F8_E4M3 + scale        linear weights read in place (W8A16, kernels/cpu/fp8_linear.h), the
//                          scales widened to f32; parts not joined
//   F32 / BF16 with        linear weights quantized to Q8_0 at load, one tensor at a time
//   --quantization q8_0    (quantize_parts), then repacked as Q8_0 above; the source stays mapped
// Anything else is an error naming the type, the tensor and the file.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "model/cpu_moe.h"
#include "model/device_ops.h"
#include "model/model.h"
#include "util/huge_page_allocator.h"
#include "model/model_config.h"

namespace spindle {

class CpuOps final : public DeviceOps {
 public:
  CpuOps(const ModelConfig& config, const ModelOptions& options, std::unique_ptr<WeightSource> weights);
  ~CpuOps() override;

  WeightSource& weights() const { return *weights_; }

  attn::Device device() const override { return attn::Device::kCpu; }
  const char* linear_kernel_name() const override;

  WeightId place(std::span<const WeightView> parts, WeightUse use) override;
  // Joins gate_proj and up_proj where they lie back to back in one dtype (a view, no copy), or are
  // repacked or widened anyway (one copy of both); q/k/v run as three products.
  LinearGroup place_group(LinearGroupKind kind, std::span<const WeightView> weights,
                          std::span<const WeightView> biases) override;
  WeightId place_leading_rows(WeightId linear, int64_t rows) override;
  void finish_loading() override {}
  // The in-place tensors the forward reads (each counted once), the repacked and widened copies
  // and the f32 bias copies: what the weights hold resident.
  uint64_t weight_bytes() const override { return weight_bytes_; }

  const kernels::cuda::DeviceBatch* upload(const StepBatch& batch, int page_size, int plan_kv_len) override;
  const StepBatchView& step() const override { return step_; }
  void reserve(int64_t num_tokens, int64_t num_logit_rows) override;
  float* scratch(Scratch slot) override { return scratch_[static_cast<int>(slot)].data(); }
  uint64_t workspace_bytes() const override;
  // `host` itself (null: an error, the CPU does not sample on a device).
  float* logits_target(float* host) override;
  void finish_step(float* /*host*/, int64_t /*count*/) override {}
  void read_final_rows(float* host, int64_t count) override;

  void embed(WeightId table, const TokenId* ids, int64_t num_ids, int64_t hidden, float* out) override;
  void rms_norm(const float* x, float* out, int64_t rows, int64_t cols, WeightId w,
                const int64_t* row_index = nullptr) override;
  void add_rms_norm(float* hidden, const float* delta, float* out, int64_t rows, int64_t cols, WeightId w) override;
  void add(float* y, const float* x, int64_t rows, int64_t cols) override;
  void linear(const float* x, int64_t rows, std::span<const Product> products) override;
  void qk_norm_rope(float* q, float* k, int64_t rows, int num_heads, int num_kv_heads, WeightId q_norm,
                    WeightId k_norm, const int64_t* positions) override;
  void silu_mul(const float* gate, const float* up, int64_t stride, float* out, int64_t rows, int64_t cols) override;
  // Routes each row, gathers the step's rows per selected expert, runs each selected expert's
  // products once per chunk over its rows, and scatters back weighted (cpu_moe.cc).
  void moe(const float* x, int64_t rows, const MoeBlock& block, float* y) override;

 private:
  void moe_chunk(const float* x, int64_t rows, const MoeBlock& block, float* y);   // cpu_moe.cc
  void run_experts(const MoeBlock& block, int64_t hidden);                         // cpu_moe.cc
  void add_shared_expert(const float* x, int64_t rows, const MoeBlock& block, float* y);  // cpu_moe.cc
  int64_t linear_choose_rows(int64_t rows) const;  // see cpu_ops.cc
  struct Placed {
    kernels::cpu::TypedWeight vector;                     // kVector, plain
    std::optional<gguf::GgmlType> table_block;            // kVector: a block-typed embedding table
    std::span<const std::byte> table_bytes;               //   its rows [V, row_bytes]
    std::unique_ptr<kernels::cpu::LinearKernel> linear;   // kLinear
    kernels::cpu::LinearWeight linear_weight;             // kLinear: what `linear` reads
    std::unique_ptr<kernels::cpu::PackedQuantWeight> packed;  // kLinear: a repacked block type
    std::vector<float> widened;                           // kLinear: an F16 weight as f32
    std::vector<float> fp8_scales;                        // kLinear: an FP8 weight's scales (read in place)
    std::vector<float> bias;                              // kBias
  };
  Placed place_vector(const WeightView& w);
  // A linear weight that is not read in place: repacked (block types) or widened (F16), its parts
  // stacked along out_features, each read where it lies (never joined in a temporary first); the
  // sources released.
  Placed place_converted(std::span<const WeightView> parts);
  // --quantization q8_0: plain F32 / BF16 linear parts (in_features a multiple of 32) as Q8_0
  // blocks (gguf/quantize_q8_0.h), each view reading its part's blocks; empty when the parts stay
  // in their dtype (no quantization asked, a block or F16 type, or in_features not a multiple of 32:
  // logged).
  struct QuantizedPart {
    std::vector<std::byte> blocks;  // [rows, cols / 32] Q8_0 blocks
    WeightView view;
  };
  std::vector<QuantizedPart> quantize_parts(std::span<const WeightView> parts);
  // fn(begin, end) over [0, rows) in chunks, spread over the pool when the work is large.
  void parallel_rows(int64_t rows, int64_t cost_per_row, const std::function<void(int64_t, int64_t)>& fn);
  void count_bytes(const WeightView& t);
  const Placed& placed(WeightId id) const;

  ModelConfig config_;
  ThreadPool* pool_ = nullptr;
  std::function<std::unique_ptr<kernels::cpu::LinearKernel>(const kernels::cpu::LinearWeight&)> make_linear_;
  std::unique_ptr<WeightSource> weights_;
  WeightQuantization quantization_ = WeightQuantization::kNone;
  // Small repacked weights' bytes (below kHugePageMinBytes: per-expert weights), on huge pages;
  // declared before placed_ so that it outlives the weights that point into it.
  HugePageArena small_weights_;
  std::vector<Placed> placed_;
  std::set<const void*> counted_;  // tensors already in weight_bytes_ (a tied LM head reads the embedding)
  uint64_t weight_bytes_ = 0;
  float eps_ = 0.0f;
  std::unique_ptr<kernels::cpu::RopeTable> rope_;
  std::vector<float> scratch_[static_cast<int>(Scratch::kCount)];
  CpuMoeScratch moe_scratch_;  // sparse layers only
  StepBatchView step_;
};

}  // namespace spindle
