// LinearKernel over quantized weights (linear.h's make_quant_linear_kernel): an adapter from the
// LinearKernel interface to quant_linear_forward (the registry, linear_registry.cc, lists one entry
// per ISA; which one runs is measured, kernels/cpu/select).
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

}  // namespace spindle::kernels::cpu
