// LinearKernel over quantized weights (linear.h's make_quant_linear_kernel): an adapter from the
// LinearKernel interface to quant_linear_forward, and "auto"'s default ISA for them.
#include <string>
#include <vector>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/quant_linear.h"
#include "platform/cpu_info.h"
#include "util/error.h"

namespace spindle::kernels::cpu {
namespace {

const CpuInfo& cpu() {
  static const CpuInfo info = detect_cpu_info();
  return info;
}

bool supported(QuantKernelIsa isa) { return quant_linear_unsupported_reasons(isa, cpu()).empty(); }

// y = quantized x . W^T (+ bias) on one ISA.
class QuantLinear final : public LinearKernel {
 public:
  QuantLinear(const PackedQuantWeight& w, QuantKernelIsa isa) : w_(w), isa_(isa) {
    name_ = std::string(quant_type_name(w.type)) + "/" + std::string(quant_kernel_isa_name(isa));
    for (char& c : name_) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  const char* name() const override { return name_.c_str(); }
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    if (m <= 0) return;
    SPINDLE_CHECK(x != nullptr && y != nullptr, "linear {}: null x or y", name_);
    quant_linear_forward(isa_, w_, x, m, y, pool);
    if (bias == nullptr) return;
    for (int64_t i = 0; i < m; ++i) {
      float* row = y + i * w_.n;
      for (int64_t j = 0; j < w_.n; ++j) row[j] += bias[j];
    }
  }

 private:
  const PackedQuantWeight& w_;
  QuantKernelIsa isa_;
  std::string name_;
};

// "auto" for quantized weights: `small` below kQuantAmxMinRows rows (by choose_rows), amx_int8 from there.
class QuantRowSplit final : public LinearKernel {
 public:
  QuantRowSplit(std::unique_ptr<LinearKernel> small, std::unique_ptr<LinearKernel> large)
      : small_(std::move(small)), large_(std::move(large)) {
    name_ = std::string(small_->name()) + "+" + large_->name();
  }
  const char* name() const override { return name_.c_str(); }
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    forward_choosing_for(x, m, m, y, pool, bias);
  }
  void forward_choosing_for(const float* x, int64_t m, int64_t choose_rows, float* y, ThreadPool* pool,
                            const float* bias) override {
    (choose_rows < kQuantAmxMinRows ? small_ : large_)->forward(x, m, y, pool, bias);
  }

 private:
  std::unique_ptr<LinearKernel> small_, large_;
  std::string name_;
};

}  // namespace

std::unique_ptr<LinearKernel> make_quant_linear_kernel(const LinearWeight& weight, QuantKernelIsa isa) {
  SPINDLE_CHECK(weight.quantized(), "make_quant_linear_kernel: the weight is not quantized");
  const PackedQuantWeight& w = *weight.quant;
  SPINDLE_CHECK(weight.out_features == w.n && weight.in_features == w.k,
                "make_quant_linear_kernel: descriptor [{}, {}] is not the packed weight's [{}, {}]",
                weight.out_features, weight.in_features, w.n, w.k);
  const std::vector<std::string> reasons = quant_linear_unsupported_reasons(isa, cpu());
  if (!reasons.empty()) {
    std::string joined;
    for (const auto& r : reasons) joined += (joined.empty() ? "" : "; ") + r;
    SPINDLE_FAIL("quantized linear kernel {} cannot run here: {}", quant_kernel_isa_name(isa), joined);
  }
  return std::make_unique<QuantLinear>(w, isa);
}

std::optional<QuantKernelIsa> default_quant_decode_isa() {
  for (QuantKernelIsa isa : {QuantKernelIsa::kAvx512Vnni, QuantKernelIsa::kAvxVnni, QuantKernelIsa::kAvx2}) {
    if (supported(isa)) return isa;
  }
  return std::nullopt;
}

// make_linear_kernel's quantized branch (linear.cc).
std::unique_ptr<LinearKernel> make_default_quant_linear_kernel(const LinearWeight& weight) {
  const std::optional<QuantKernelIsa> isa = default_quant_decode_isa();
  SPINDLE_CHECK(isa.has_value(), "a {} weight needs AVX2+FMA+F16C on this CPU for the int8 kernels: {}",
                quant_type_name(weight.quant->type),
                quant_linear_unsupported_reasons(QuantKernelIsa::kAvx2, cpu()).front());
  auto small = make_quant_linear_kernel(weight, *isa);
  if (!supported(QuantKernelIsa::kAmxInt8)) return small;
  return std::make_unique<QuantRowSplit>(std::move(small), make_quant_linear_kernel(weight, QuantKernelIsa::kAmxInt8));
}

}  // namespace spindle::kernels::cpu
