#include <vector>

#include "kernels/cpu/linear.h"
#include "util/error.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {
namespace {

class ReferenceLinear final : public LinearKernel {
 public:
  explicit ReferenceLinear(const LinearWeight& w) : w_(w) {}
  const char* name() const override { return "reference"; }

  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    const int64_t n = w_.out_features, k = w_.in_features;
    auto row_of_outputs = [&](int64_t j) {
      for (int64_t i = 0; i < m; ++i) {
        double acc = bias ? bias[j] : 0.0;
        for (int64_t t = 0; t < k; ++t) acc += double{x[i * k + t]} * weight(j * k + t);
        y[i * n + j] = static_cast<float>(acc);
      }
    };
    if (pool) {
      pool->parallel_for(n, row_of_outputs);
    } else {
      for (int64_t j = 0; j < n; ++j) row_of_outputs(j);
    }
  }

 private:
  double weight(int64_t index) const {
    if (w_.dtype == DType::kF32) return static_cast<const float*>(w_.data)[index];
    return bf16_bits_to_float(static_cast<const uint16_t*>(w_.data)[index]);
  }
  LinearWeight w_;
};

}  // namespace

std::unique_ptr<LinearKernel> make_reference_linear_kernel(const LinearWeight& weight) {
  SPINDLE_CHECK(!weight.quantized(), "linear reference: a {} weight runs on the quantized kernels only",
                quant_type_name(weight.quant->type));
  return std::make_unique<ReferenceLinear>(weight);
}

}  // namespace spindle::kernels::cpu
