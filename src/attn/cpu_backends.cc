// The CPU attention backends: reference, cpu_avx2, cpu_avx512, cpu_amx. Each wraps one kernel of
// kernels/cpu behind the AttentionBackend interface; the rank-local page range is applied here.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>

#include "attn/attention_backend.h"
#include "attn/paged_backend.h"
#include "kernels/cpu/paged_attention.h"
#include "platform/device_info.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle::attn {
namespace {

namespace kc = kernels::cpu;
using Kernel = std::function<void(const kc::PagedAttentionParams&)>;

constexpr int kMaxPageSize = 256;

class CpuPagedAttentionBackend final : public PagedBackend {
 public:
  CpuPagedAttentionBackend(std::string name, Kernel kernel, const AttentionShape& shape, const DpConfig& dp,
                           const BackendOptions& options)
      : PagedBackend(std::move(name), Device::kCpu, shape, dp),
        kernel_(std::move(kernel)),
        pool_(options.pool ? options.pool : &ThreadPool::global()) {}

 private:
  void run_layer(int /*layer*/, const kc::KvWriteParams* write, const kc::PagedAttentionParams& attention) override {
    if (write != nullptr) kc::write_kv_pages(*write);  // (null only with a write target; the CPU offers none)
    kc::PagedAttentionParams p = attention;
    p.pool = pool_;
    kernel_(p);
  }

  Kernel kernel_;
  ThreadPool* pool_;
};

// "" when the CPU has the feature usable; else why not.
std::string feature_gap(const CpuInfo& cpu, std::string_view feature) {
  const CpuFeature* f = cpu.find(feature);
  if (f == nullptr || !f->present) return fmt::format("cpu lacks {}", feature);
  if (!f->usable) return fmt::format("{} present but unusable: {}", feature, f->reason);
  return "";
}

// any_head_dim: the float64 reference, which also reads f16 KV (the CUDA backends' ground truth).
// Every CPU kernel reads FP8 (fp8_e4m3) pages: the reference per element, avx2/avx512 (and amx,
// which runs its avx512 path for them) by converting each K/V tile with its head's scale.
void add_shape_gaps(const AttentionShape& shape, bool any_head_dim, std::vector<std::string>& reasons) {
  const bool f16_ok = any_head_dim && shape.kv_dtype == DType::kF16;
  if (shape.kv_dtype != DType::kF32 && shape.kv_dtype != DType::kBF16 && shape.kv_dtype != DType::kF8E4M3 &&
      !f16_ok) {
    reasons.push_back(fmt::format("KV dtype {} not supported (bf16, f32, fp8_e4m3)", kv_cache_dtype_name(shape.kv_dtype)));
  }
  if (!any_head_dim && !kc::cpu_backend_head_dim_supported(shape.head_dim)) {
    reasons.push_back(fmt::format("head_dim {} not supported (multiples of {} from {} to {})", shape.head_dim,
                                  kc::kCpuBackendHeadDimStep, kc::kCpuBackendMinHeadDim, kc::kCpuBackendMaxHeadDim));
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
        kc::paged_attention_avx512(p, has_bf16_dot && p.kv.dtype == DType::kBF16);
      }));
  // AMX tiles need bf16 operands; with an f32 or fp8_e4m3 KV cache it runs the AVX-512 path.
  registry.register_backend(make_cpu_descriptor(
      "cpu_amx", 30, "AMX-BF16 tiles for Q.K^T and P.V (f32, fp8_e4m3 KV: AVX-512 path)",
      {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile", "amx_bf16"},
      false, [](const kc::PagedAttentionParams& p) {
        // Linux grants AMX tile state per process: this process (e.g. a validation child) must
        // ask before its first tile instruction, or the CPU raises SIGILL.
        static const AmxPermission permission = request_amx_permission();
        SPINDLE_CHECK(permission.granted, "cpu_amx: OS denied AMX tile state: {}", permission.reason);
        if (p.kv.dtype == DType::kBF16) {
          kc::paged_attention_amx(p);
        } else {
          kc::paged_attention_avx512(p, false);
        }
      }));
}

}  // namespace spindle::attn
