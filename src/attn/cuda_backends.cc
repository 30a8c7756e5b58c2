// The CUDA attention backends (built only with SPINDLE_WITH_CUDA): cuda_reference.
//
// First slice, a stepping stone: the backend keeps its own device copy of the KV pages. At
// bind_kv_caches it allocates device pages of the same geometry for this rank's page range and
// uploads the host pages; forward copies q/k/v to the device, writes the new K/V into both the
// device pages (kernel) and the host pages (CPU, so callers that inspect the host pool, like the
// validation child, still see them), runs the kernel and copies out back. Host pages changed by
// anyone else after bind are not seen until the next bind.
#include <fmt/format.h>

#include <vector>

#include "attn/attention_backend.h"
#include "attn/fault_injection.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_attention.h"
#include "platform/device_info.h"
#include "util/error.h"

namespace spindle::attn {
namespace {

namespace kc = kernels::cpu;
namespace kcu = kernels::cuda;

constexpr int kMinCcMajor = 8;

class CudaReferenceBackend final : public AttentionBackend {
 public:
  CudaReferenceBackend(const AttentionShape& shape, const DpConfig& dp)
      : shape_(shape), dp_(dp), fault_(fault_for("cuda_reference")) {
    SPINDLE_CHECK(shape_.head_dim <= kcu::kCudaReferenceMaxHeadDim,
                  "cuda_reference: head_dim {} not supported (up to {})", shape_.head_dim,
                  kcu::kCudaReferenceMaxHeadDim);
    SPINDLE_CHECK(shape_.kv_dtype == DType::kF32 || shape_.kv_dtype == DType::kBF16,
                  "cuda_reference: KV dtype {} not supported (bf16, f32)", dtype_name(shape_.kv_dtype));
  }

  std::string_view name() const override { return "cuda_reference"; }

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
    device_layers_.clear();
    device_layers_.resize(layers_.size());
    for (size_t i = 0; i < layers_.size(); ++i) {
      const RankPages host = rank_pages(layers_[i]);
      DeviceLayer& d = device_layers_[i];
      d.k.reserve(host.bytes);
      d.v.reserve(host.bytes);
      CUDA_CHECK(cudaMemcpy(d.k.data(), host.k, host.bytes, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(d.v.data(), host.v, host.bytes, cudaMemcpyHostToDevice));
    }
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

    const LayerKvCache& cache = layers_[layer];
    const RankPages host = rank_pages(cache);
    DeviceLayer& dev = device_layers_[layer];

    // Host-side checks on the host view first (same geometry as the device mirror).
    kc::PagedAttentionParams p;
    p.q = q.data;
    p.out = out.data;
    p.k_pages = host.k;
    p.v_pages = host.v;
    p.kv_dtype = cache.dtype;
    p.num_pages = host.num_pages;
    p.page_size = cache.page_size;
    p.num_heads = shape_.num_heads;
    p.num_kv_heads = shape_.num_kv_heads;
    p.head_dim = shape_.head_dim;
    p.scale = shape_.scale;
    p.causal = batch_.causal;
    p.sequences = sequences_;
    kc::check_paged_attention_params(p, num_tokens_);
    if (num_tokens_ == 0) return;

    kc::KvWriteParams w;
    w.k = k.data;
    w.v = v.data;
    w.k_pages = host.k;
    w.v_pages = host.v;
    w.kv_dtype = cache.dtype;
    w.num_pages = host.num_pages;
    w.page_size = cache.page_size;
    w.num_kv_heads = shape_.num_kv_heads;
    w.head_dim = shape_.head_dim;
    w.sequences = sequences_;
    kc::write_kv_pages(w);  // the host pool

    const size_t q_bytes = sizeof(float) * static_cast<size_t>(num_tokens_ * q_cols);
    const size_t kv_bytes = sizeof(float) * static_cast<size_t>(num_tokens_ * kv_cols);
    q_.reserve(q_bytes);
    k_.reserve(kv_bytes);
    v_.reserve(kv_bytes);
    out_.reserve(q_bytes);
    CUDA_CHECK(cudaMemcpy(q_.data(), q.data, q_bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(k_.data(), k.data, kv_bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(v_.data(), v.data, kv_bytes, cudaMemcpyHostToDevice));

    w.k = k_.as<float>();
    w.v = v_.as<float>();
    w.k_pages = dev.k.data();
    w.v_pages = dev.v.data();
    kcu::write_kv_pages(w, scratch_);  // the device mirror

    p.q = q_.as<float>();
    p.out = out_.as<float>();
    p.k_pages = dev.k.data();
    p.v_pages = dev.v.data();
    kcu::paged_attention_reference(p, scratch_);
    CUDA_CHECK(cudaMemcpy(out.data, out_.data(), q_bytes, cudaMemcpyDeviceToHost));

    if (fault_ == FaultMode::kWrong) {
      for (int64_t i = 0; i < out.rows * out.cols; ++i) out.data[i] += 0.5f;
    }
  }

 private:
  struct RankPages {
    std::byte* k = nullptr;
    std::byte* v = nullptr;
    int num_pages = 0;
    size_t bytes = 0;
  };
  struct DeviceLayer {
    kcu::DeviceBuffer k, v;
  };

  // This rank's contiguous share of the host pool; page tables index into it.
  RankPages rank_pages(const LayerKvCache& cache) const {
    const int pages_per_rank = cache.num_pages / dp_.dp_size;
    const size_t page_bytes = static_cast<size_t>(cache.page_size) * cache.num_kv_heads *
                              cache.head_dim * dtype_size(cache.dtype);
    RankPages r;
    r.k = static_cast<std::byte*>(cache.k_pages) + page_bytes * pages_per_rank * dp_.dp_rank;
    r.v = static_cast<std::byte*>(cache.v_pages) + page_bytes * pages_per_rank * dp_.dp_rank;
    r.num_pages = pages_per_rank;
    r.bytes = page_bytes * pages_per_rank;
    return r;
  }

  AttentionShape shape_;
  DpConfig dp_;
  FaultMode fault_;
  BatchMetadata batch_;
  std::vector<kc::AttentionSequence> sequences_;
  int64_t num_tokens_ = 0;
  std::vector<LayerKvCache> layers_;
  std::vector<DeviceLayer> device_layers_;
  kcu::DeviceBuffer q_, k_, v_, out_;
  kcu::AttentionScratch scratch_;
};

std::vector<std::string> cuda_reference_gaps(const DeviceInfo& device, const AttentionShape& shape) {
  std::vector<std::string> reasons;
  if (device.cuda_devices.empty()) {
    reasons.push_back(device.cuda_status.empty() ? "no CUDA device"
                                                 : fmt::format("no CUDA device: {}", device.cuda_status));
  } else {
    const CudaDeviceInfo& d = device.cuda_devices.front();  // the device this worker is bound to
    if (d.cc_major < kMinCcMajor) {
      reasons.push_back(fmt::format("CUDA device {} ({}) has compute capability {}.{}, needs {}.0",
                                    d.index, d.name, d.cc_major, d.cc_minor, kMinCcMajor));
    }
  }
  if (shape.kv_dtype != DType::kF32 && shape.kv_dtype != DType::kBF16) {
    reasons.push_back(fmt::format("KV dtype {} not supported (bf16, f32)", dtype_name(shape.kv_dtype)));
  }
  if (shape.head_dim > kcu::kCudaReferenceMaxHeadDim) {
    reasons.push_back(fmt::format("head_dim {} not supported (up to {})", shape.head_dim,
                                  kcu::kCudaReferenceMaxHeadDim));
  }
  return reasons;
}

}  // namespace

void register_cuda_attention_backends(AttentionRegistry& registry) {
  BackendDescriptor d;
  d.name = "cuda_reference";
  d.device = Device::kCuda;
  d.phases = kBothPhases;
  d.priority = 0;
  d.description = "one thread block per (row, head), float accumulation: the CUDA ground truth";
  d.unsupported_reasons = cuda_reference_gaps;
  d.factory = [](const AttentionShape& shape, const DpConfig& dp, const BackendOptions&) {
    return std::make_unique<CudaReferenceBackend>(shape, dp);
  };
  registry.register_backend(std::move(d));
}

}  // namespace spindle::attn
