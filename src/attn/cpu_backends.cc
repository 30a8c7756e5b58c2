// The CPU attention backends: reference, cpu_avx2, cpu_avx512, cpu_amx. Each wraps one kernel of
// kernels/cpu behind the AttentionBackend interface; the rank-local page range is applied here.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>

#include "attn/attention_backend.h"
#include "attn/fault_injection.h"
#include "kernels/cpu/paged_attention.h"
#include "platform/device_info.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle::attn {
namespace {

namespace kc = kernels::cpu;
using Kernel = std::function<void(const kc::PagedAttentionParams&)>;

constexpr std::array<int, 5> kOptimizedHeadDims = {64, 80, 96, 128, 256};
constexpr int kMaxPageSize = 256;

class CpuPagedAttentionBackend final : public AttentionBackend {
 public:
  CpuPagedAttentionBackend(std::string name, Kernel kernel, const AttentionShape& shape,
                           const DpConfig& dp, const BackendOptions& options)
      : name_(std::move(name)),
        kernel_(std::move(kernel)),
        shape_(shape),
        dp_(dp),
        pool_(options.pool ? options.pool : &ThreadPool::global()),
        fault_(fault_for(name_)) {}

  std::string_view name() const override { return name_; }

  void prepare(const BatchMetadata& batch, bool /*graph_mode*/) override {
    batch_ = batch;
    sequences_.clear();
    int offset = 0;
    for (const auto& s : batch_.sequences) {
      const int64_t total = int64_t{s.num_cached_tokens} + s.num_new_tokens;
      SPINDLE_CHECK(static_cast<int64_t>(s.page_table.size()) * shape_.page_size >= total,
                    "sequence {}: page table of {} pages cannot hold {} tokens (page size {})",
                    sequences_.size(), s.page_table.size(), total, shape_.page_size);
      sequences_.push_back({s.num_new_tokens, s.num_cached_tokens, offset, s.page_table.data()});
      offset += s.num_new_tokens;
    }
    num_tokens_ = offset;
  }

  void bind_kv_caches(std::span<const LayerKvCache> layers) override {
    for (size_t i = 0; i < layers.size(); ++i) {
      const auto& l = layers[i];
      SPINDLE_CHECK(l.num_kv_heads == shape_.num_kv_heads && l.head_dim == shape_.head_dim &&
                        l.page_size == shape_.page_size && l.dtype == shape_.kv_dtype,
                    "layer {} KV cache ({} kv heads, head_dim {}, page {}, {}) does not match the "
                    "backend shape {}",
                    i, l.num_kv_heads, l.head_dim, l.page_size, dtype_name(l.dtype), shape_.to_string());
      SPINDLE_CHECK(l.num_pages >= dp_.dp_size, "layer {}: {} pages cannot be split over {} DP ranks",
                    i, l.num_pages, dp_.dp_size);
    }
    layers_.assign(layers.begin(), layers.end());
  }

  void forward(int layer, ConstTensor q, ConstTensor k, ConstTensor v, Tensor out) override {
    SPINDLE_CHECK(layer >= 0 && layer < static_cast<int>(layers_.size()),
                  "layer {} has no bound KV cache ({} bound)", layer, layers_.size());
    const int64_t q_cols = int64_t{shape_.num_heads} * shape_.head_dim;
    const int64_t kv_cols = int64_t{shape_.num_kv_heads} * shape_.head_dim;
    SPINDLE_CHECK(q.rows == num_tokens_ && out.rows == num_tokens_ && k.rows == num_tokens_ &&
                      v.rows == num_tokens_,
                  "forward: tensors have {}/{}/{}/{} rows (q/k/v/out) but the prepared batch has {}",
                  q.rows, k.rows, v.rows, out.rows, num_tokens_);
    SPINDLE_CHECK(q.cols == q_cols && out.cols == q_cols && k.cols == kv_cols && v.cols == kv_cols,
                  "forward: q/out need {} columns and k/v {}", q_cols, kv_cols);
    act_out_fatal_fault(fault_);

    // This rank's contiguous share of the pool; page tables index into it.
    const LayerKvCache& cache = layers_[layer];
    const int pages_per_rank = cache.num_pages / dp_.dp_size;
    const size_t page_bytes = size_t{static_cast<size_t>(cache.page_size)} * kv_cols * dtype_size(cache.dtype);
    auto* k_base = static_cast<std::byte*>(cache.k_pages) + page_bytes * pages_per_rank * dp_.dp_rank;
    auto* v_base = static_cast<std::byte*>(cache.v_pages) + page_bytes * pages_per_rank * dp_.dp_rank;

    kc::PagedAttentionParams p;
    p.q = q.data;
    p.out = out.data;
    p.k_pages = k_base;
    p.v_pages = v_base;
    p.kv_dtype = cache.dtype;
    p.num_pages = pages_per_rank;
    p.page_size = cache.page_size;
    p.num_heads = shape_.num_heads;
    p.num_kv_heads = shape_.num_kv_heads;
    p.head_dim = shape_.head_dim;
    p.scale = shape_.scale;
    p.causal = batch_.causal;
    p.sequences = sequences_;
    p.pool = pool_;
    kc::check_paged_attention_params(p, num_tokens_);

    kc::KvWriteParams w;
    w.k = k.data;
    w.v = v.data;
    w.k_pages = k_base;
    w.v_pages = v_base;
    w.kv_dtype = cache.dtype;
    w.num_pages = pages_per_rank;
    w.page_size = cache.page_size;
    w.num_kv_heads = shape_.num_kv_heads;
    w.head_dim = shape_.head_dim;
    w.sequences = sequences_;
    kc::write_kv_pages(w);

    kernel_(p);
    if (fault_ == FaultMode::kWrong) {
      for (int64_t i = 0; i < out.rows * out.cols; ++i) out.data[i] += 0.5f;
    }
  }

 private:
  std::string name_;
  Kernel kernel_;
  AttentionShape shape_;
  DpConfig dp_;
  ThreadPool* pool_;
  FaultMode fault_;
  BatchMetadata batch_;
  std::vector<kc::AttentionSequence> sequences_;
  int64_t num_tokens_ = 0;
  std::vector<LayerKvCache> layers_;
};

// "" when the CPU has the feature usable; else why not.
std::string feature_gap(const CpuInfo& cpu, std::string_view feature) {
  const CpuFeature* f = cpu.find(feature);
  if (f == nullptr || !f->present) return fmt::format("cpu lacks {}", feature);
  if (!f->usable) return fmt::format("{} present but unusable: {}", feature, f->reason);
  return "";
}

void add_shape_gaps(const AttentionShape& shape, bool any_head_dim, std::vector<std::string>& reasons) {
  if (shape.kv_dtype != DType::kF32 && shape.kv_dtype != DType::kBF16) {
    reasons.push_back(fmt::format("KV dtype {} not supported (bf16, f32)", dtype_name(shape.kv_dtype)));
  }
  if (!any_head_dim &&
      std::find(kOptimizedHeadDims.begin(), kOptimizedHeadDims.end(), shape.head_dim) ==
          kOptimizedHeadDims.end()) {
    reasons.push_back(fmt::format("head_dim {} not supported (64, 80, 96, 128, 256)", shape.head_dim));
  }
  if (shape.page_size < 1 || shape.page_size > kMaxPageSize) {
    reasons.push_back(fmt::format("page size {} not supported (1 to {})", shape.page_size, kMaxPageSize));
  }
}

BackendDescriptor make_cpu_descriptor(std::string name, int priority, std::string description,
                                      std::initializer_list<std::string_view> features,
                                      bool any_head_dim, Kernel kernel) {
  BackendDescriptor d;
  d.name = name;
  d.device = Device::kCpu;
  d.phases = kBothPhases;
  d.priority = priority;
  d.description = std::move(description);
  std::vector<std::string_view> needed(features);
  d.unsupported_reasons = [needed, any_head_dim](const DeviceInfo& device, const AttentionShape& shape) {
    std::vector<std::string> reasons;
    for (auto feature : needed) {
      if (auto gap = feature_gap(device.cpu, feature); !gap.empty()) reasons.push_back(std::move(gap));
    }
    add_shape_gaps(shape, any_head_dim, reasons);
    return reasons;
  };
  d.factory = [name, kernel](const AttentionShape& shape, const DpConfig& dp, const BackendOptions& options) {
    return std::make_unique<CpuPagedAttentionBackend>(name, kernel, shape, dp, options);
  };
  return d;
}

}  // namespace

void register_cpu_attention_backends(AttentionRegistry& registry) {
  registry.register_backend(make_cpu_descriptor(
      "reference", 0, "plain loops, float64 accumulation: the ground truth", {}, true,
      kc::paged_attention_reference));
  registry.register_backend(make_cpu_descriptor(
      "cpu_avx2", 10, "flash-style tiled online softmax, AVX2 + FMA + F16C", {"avx2", "fma", "f16c"},
      false, kc::paged_attention_avx2));
  // AVX512-BF16 dot products when the CPU has them and the KV cache is bf16.
  registry.register_backend(make_cpu_descriptor(
      "cpu_avx512", 20, "AVX-512F/BW, AVX512-BF16 dot products where present",
      {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl"}, false,
      [](const kc::PagedAttentionParams& p) {
        static const bool has_bf16_dot = detect_cpu_info().has("avx512_bf16");
        kc::paged_attention_avx512(p, has_bf16_dot && p.kv_dtype == DType::kBF16);
      }));
  // AMX tiles need bf16 operands; with an f32 KV cache it runs the AVX-512 path.
  registry.register_backend(make_cpu_descriptor(
      "cpu_amx", 30, "AMX-BF16 tiles for Q.K^T and P.V (f32 KV: AVX-512 path)",
      {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile", "amx_bf16"},
      false, [](const kc::PagedAttentionParams& p) {
        // Linux grants AMX tile state per process: this process (e.g. a validation child) must
        // ask before its first tile instruction, or the CPU raises SIGILL.
        static const AmxPermission permission = request_amx_permission();
        SPINDLE_CHECK(permission.granted, "cpu_amx: OS denied AMX tile state: {}", permission.reason);
        if (p.kv_dtype == DType::kBF16) {
          kc::paged_attention_amx(p);
        } else {
          kc::paged_attention_avx512(p, false);
        }
      }));
}

}  // namespace spindle::attn
