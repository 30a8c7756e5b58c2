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
#include "attn/paged_backend.h"
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

class CudaReferenceBackend final : public PagedBackend {
 public:
  CudaReferenceBackend(const AttentionShape& shape, const DpConfig& dp) : PagedBackend("cuda_reference", shape, dp) {
    SPINDLE_CHECK(shape.head_dim <= kcu::kCudaReferenceMaxHeadDim, "cuda_reference: head_dim {} not supported (up to {})",
                  shape.head_dim, kcu::kCudaReferenceMaxHeadDim);
    SPINDLE_CHECK(shape.kv_dtype == DType::kF32 || shape.kv_dtype == DType::kBF16,
                  "cuda_reference: KV dtype {} not supported (bf16, f32)", dtype_name(shape.kv_dtype));
  }

 private:
  struct DeviceLayer {
    kcu::DeviceBuffer k, v;
  };

  // Mirrors this rank's host pages on the device.
  void on_bind() override {
    device_layers_.clear();
    device_layers_.resize(layers().size());
    for (size_t i = 0; i < layers().size(); ++i) {
      const RankPages host = rank_pages(layers()[i]);
      DeviceLayer& d = device_layers_[i];
      d.k.reserve(host.bytes);
      d.v.reserve(host.bytes);
      CUDA_CHECK(cudaMemcpy(d.k.data(), host.k, host.bytes, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(d.v.data(), host.v, host.bytes, cudaMemcpyHostToDevice));
    }
  }

  void run_layer(int layer, const kc::KvWriteParams& host_write, const kc::PagedAttentionParams& host) override {
    kc::write_kv_pages(host_write);  // the host pool

    const int64_t q_cols = int64_t{shape().num_heads} * shape().head_dim;
    const int64_t kv_cols = int64_t{shape().num_kv_heads} * shape().head_dim;
    const size_t q_bytes = sizeof(float) * static_cast<size_t>(num_tokens() * q_cols);
    const size_t kv_bytes = sizeof(float) * static_cast<size_t>(num_tokens() * kv_cols);
    q_.reserve(q_bytes);
    k_.reserve(kv_bytes);
    v_.reserve(kv_bytes);
    out_.reserve(q_bytes);
    CUDA_CHECK(cudaMemcpy(q_.data(), host.q, q_bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(k_.data(), host_write.k, kv_bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(v_.data(), host_write.v, kv_bytes, cudaMemcpyHostToDevice));

    DeviceLayer& dev = device_layers_[layer];
    kc::KvWriteParams w = host_write;
    w.k = k_.as<float>();
    w.v = v_.as<float>();
    w.k_pages = dev.k.data();
    w.v_pages = dev.v.data();
    kcu::write_kv_pages(w, scratch_);  // the device mirror

    kc::PagedAttentionParams p = host;
    p.q = q_.as<float>();
    p.out = out_.as<float>();
    p.k_pages = dev.k.data();
    p.v_pages = dev.v.data();
    kcu::paged_attention_reference(p, scratch_);
    CUDA_CHECK(cudaMemcpy(host.out, out_.data(), q_bytes, cudaMemcpyDeviceToHost));
  }

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
