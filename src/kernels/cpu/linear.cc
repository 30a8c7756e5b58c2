// make_linear_kernel: the policy that picks a linear implementation for this CPU and weight,
// and the direct (decode) kernel's thread split. The ISA code lives in linear_avx2.cc and
// linear_avx512.cc, the oneDNN paths in linear_onednn.cc (see linear.h for the list).
//
// Policy ("auto"): m <= kLinearDirectMaxRows runs the direct kernel (avx512 where AVX-512F/BW/VL
// are usable, else avx2 where AVX2+FMA are): it reads W once from memory, which is what decode
// costs. Larger m runs oneDNN: bf16 matmul only when LinearOptions::allow_bf16_activations and
// the CPU has AMX-BF16/AVX512-BF16 and W is bf16; f32 matmul otherwise (exact f32 products).
#include <algorithm>
#include <array>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_isa.h"
#include "kernels/cpu/linear_onednn.h"
#include "platform/cpu_info.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {
namespace {

constexpr std::array<std::string_view, 6> kNames = {"reference", "avx2", "avx512", "onednn_f32", "onednn_bf16",
                                                    "auto"};
// A task of the direct kernel reads at least this many bytes of W (pool overhead ~ microseconds).
constexpr int64_t kMinTaskBytes = int64_t{256} << 10;
// Tasks per thread when W is large enough (dynamic scheduling evens out slow cores).
constexpr int64_t kTasksPerThread = 4;

const CpuInfo& cpu() {
  static const CpuInfo info = detect_cpu_info();
  return info;
}

using SliceFn = void (*)(const LinearSliceParams&, int64_t, int64_t);

class DirectLinear final : public LinearKernel {
 public:
  DirectLinear(const LinearWeight& w, SliceFn fn, const char* name) : w_(w), fn_(fn), name_(name) {}
  const char* name() const override { return name_; }

  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    if (m <= 0) return;
    SPINDLE_CHECK(x != nullptr && y != nullptr, "linear {}: null x or y", name_);
    LinearSliceParams p;
    p.x = x;
    p.w = w_.data;
    p.w_dtype = w_.dtype;
    p.bias = bias;
    p.y = y;
    p.m = m;
    p.n = w_.out_features;
    p.k = w_.in_features;
    const int64_t threads = pool ? pool->num_threads() : 1;
    const int64_t col_bytes = p.k * int64_t(dtype_size(w_.dtype));
    int64_t cols = std::max((kMinTaskBytes + col_bytes - 1) / col_bytes,
                            (p.n + threads * kTasksPerThread - 1) / (threads * kTasksPerThread));
    cols = (cols + kLinearSliceAlign - 1) / kLinearSliceAlign * kLinearSliceAlign;
    const int64_t num_tasks = (p.n + cols - 1) / cols;
    if (threads == 1 || num_tasks == 1) {
      fn_(p, 0, p.n);
      return;
    }
    pool->parallel_for(num_tasks, [&](int64_t t) { fn_(p, t * cols, std::min(p.n, (t + 1) * cols)); });
  }

 private:
  LinearWeight w_;
  SliceFn fn_;
  const char* name_;
};

class AutoLinear final : public LinearKernel {
 public:
  AutoLinear(std::unique_ptr<LinearKernel> direct, std::unique_ptr<LinearKernel> large)
      : direct_(std::move(direct)), large_(std::move(large)) {
    name_ = std::string("auto(") + (direct_ ? direct_->name() : "-") + "," + large_->name() + ")";
  }
  const char* name() const override { return name_.c_str(); }
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    if (direct_ && m <= kLinearDirectMaxRows) {
      direct_->forward(x, m, y, pool, bias);
    } else {
      large_->forward(x, m, y, pool, bias);
    }
  }

 private:
  std::unique_ptr<LinearKernel> direct_, large_;
  std::string name_;
};

void check_weight(const LinearWeight& w) {
  SPINDLE_CHECK(w.dtype == DType::kF32 || w.dtype == DType::kBF16,
                "linear: weight dtype {} is not supported (F32 or BF16)", dtype_name(w.dtype));
  SPINDLE_CHECK(w.out_features > 0 && w.in_features > 0, "linear: weight shape [{}, {}] must be positive",
                w.out_features, w.in_features);
  SPINDLE_CHECK(w.data != nullptr, "linear: weight data is null");
}

bool has_avx2() { return cpu().has("avx2") && cpu().has("fma"); }
bool has_avx512() { return cpu().has("avx512f") && cpu().has("avx512bw") && cpu().has("avx512vl"); }

std::unique_ptr<LinearKernel> make_direct(const LinearWeight& w) {
  if (has_avx512()) return std::make_unique<DirectLinear>(w, &linear_slice_avx512, "avx512");
  if (has_avx2()) return std::make_unique<DirectLinear>(w, &linear_slice_avx2, "avx2");
  return nullptr;
}

}  // namespace

std::vector<std::string> linear_kernel_names() { return {kNames.begin(), kNames.end()}; }

std::string linear_kernel_unsupported_reason(std::string_view name, const LinearWeight& weight,
                                             const LinearOptions& options) {
  if (name == "reference" || name == "auto" || name == "onednn_f32") return {};
  if (name == "avx2") return has_avx2() ? "" : "CPU lacks usable AVX2+FMA";
  if (name == "avx512") return has_avx512() ? "" : "CPU lacks usable AVX-512F/BW/VL";
  if (name == "onednn_bf16") return onednn_linear_unsupported_reason(weight, true);
  std::string known;
  for (auto n : kNames) known += (known.empty() ? "" : ", ") + std::string(n);
  return "unknown linear kernel '" + std::string(name) + "' (known: " + known + ")";
}

std::unique_ptr<LinearKernel> make_named_linear_kernel(std::string_view name, const LinearWeight& weight,
                                                       const LinearOptions& options) {
  check_weight(weight);
  const std::string reason = linear_kernel_unsupported_reason(name, weight, options);
  SPINDLE_CHECK(reason.empty(), "linear kernel '{}' unavailable: {}", name, reason);
  if (name == "reference") return make_reference_linear_kernel(weight);
  if (name == "avx2") return std::make_unique<DirectLinear>(weight, &linear_slice_avx2, "avx2");
  if (name == "avx512") return std::make_unique<DirectLinear>(weight, &linear_slice_avx512, "avx512");
  if (name == "onednn_f32") return make_onednn_linear(weight, false);
  if (name == "onednn_bf16") return make_onednn_linear(weight, true);
  return make_linear_kernel(weight, options);  // "auto"
}

std::unique_ptr<LinearKernel> make_linear_kernel(const LinearWeight& weight, const LinearOptions& options) {
  check_weight(weight);
  const bool bf16 = options.allow_bf16_activations && onednn_linear_unsupported_reason(weight, true).empty();
  return std::make_unique<AutoLinear>(make_direct(weight), make_onednn_linear(weight, bf16));
}

}  // namespace spindle::kernels::cpu
