// Linear layers through oneDNN matmul (the prefill path; see linear.h).
//
// oneDNN sees the product as dst[M, N] = src[M, K] . weights[K, N]; our W [n, k] row-major is
// exactly weights[K, N] with strides {1, K}, so no weight is copied for f32 weights or the bf16
// path. For the f32 path over bf16 weights, blocks of W rows are widened into a per-thread f32
// buffer of about kWidenBlockBytes and multiplied block by block (y's row stride stays n).
// M is a run-time dimension where oneDNN implements that as fast as a fixed M; otherwise one
// primitive per exact M is created (a few ms of JIT) and cached (up to kMaxExactPrimitives).
//
// The element-wise loops around the products (widening, x to bf16, bias) run on oneDNN's own
// OpenMP threads (this file is compiled with -fopenmp; Debian's oneDNN uses libgomp too), not on
// the ThreadPool: one team per phase of the call. Between calls the OpenMP workers sleep where
// `spindle` set OMP_WAIT_POLICY=PASSIVE (platform/openmp_policy.h); under libgomp's default they
// poll for milliseconds on the cores the ThreadPool's next kernel needs.
#include <dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/linear_onednn.h"
#include "platform/cpu_info.h"
#include "util/error.h"
#include "util/half.h"

namespace spindle::kernels::cpu {
namespace {

using dnnl::memory;

constexpr int64_t kWidenBlockBytes = int64_t{8} << 20;

const CpuInfo& cpu() {
  static const CpuInfo info = detect_cpu_info();
  return info;
}

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

bool is_reference_impl(const dnnl::matmul::primitive_desc& pd) {
  return std::string(pd.impl_info_str()).find("ref") != std::string::npos;
}

// src [m, k] (row stride k), weights [k, ncols] with strides {1, k}, dst [m, ncols] row stride ldy.
dnnl::matmul::primitive_desc make_pd(memory::dim m, memory::dim k, memory::dim ncols, memory::dim ldy,
                                     memory::data_type ab_type) {
  const memory::desc src({m, k}, ab_type, {k, 1});
  const memory::desc wei({k, ncols}, ab_type, {1, k});
  const memory::desc dst({m, ncols}, memory::data_type::f32, {ldy, 1});
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), cpu_engine());
}

class OneDnnLinear final : public LinearKernel {
 public:
  OneDnnLinear(const LinearWeight& w, bool bf16) : w_(w), bf16_(bf16) {
    const int64_t k = w.in_features, n = w.out_features;
    if (w.dtype == DType::kBF16 && !bf16) {
      block_cols_ = std::max<int64_t>(64, kWidenBlockBytes / int64_t(sizeof(float)) / k / 64 * 64);
      block_cols_ = std::min(block_cols_, n);
    } else {
      block_cols_ = n;
    }
    name_ = bf16 ? "onednn_bf16" : "onednn_f32";
  }
  const char* name() const override { return name_.c_str(); }

  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    if (m <= 0) return;
    SPINDLE_CHECK(x != nullptr && y != nullptr, "linear {}: null x or y", name_);
    const int64_t k = w_.in_features, n = w_.out_features;
    dnnl::stream stream(cpu_engine());
    const memory::data_type ab_type = bf16_ ? memory::data_type::bf16 : memory::data_type::f32;
    const void* src = x;
    if (bf16_) {
      thread_local std::vector<uint16_t> x16;
      x16.resize(size_t(m * k));
      uint16_t* out = x16.data();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t t = 0; t < k; ++t) out[i * k + t] = float_to_bf16_bits(x[i * k + t]);
      src = x16.data();
    }
    thread_local std::vector<float> wide;
    for (int64_t j0 = 0; j0 < n; j0 += block_cols_) {
      const int64_t nb = std::min(block_cols_, n - j0);
      const void* wei;
      if (w_.dtype == DType::kBF16 && !bf16_) {
        wide.resize(size_t(nb * k));
        const uint16_t* w16 = static_cast<const uint16_t*>(w_.data) + j0 * k;
        float* out = wide.data();
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < nb; ++r)
          for (int64_t t = 0; t < k; ++t) out[r * k + t] = bf16_bits_to_float(w16[r * k + t]);
        wei = wide.data();
      } else {
        wei = static_cast<const char*>(w_.data) + j0 * k * int64_t(dtype_size(w_.dtype));
      }
      const memory src_mem({{m, k}, ab_type, {k, 1}}, cpu_engine(), const_cast<void*>(src));
      const memory wei_mem({{k, nb}, ab_type, {1, k}}, cpu_engine(), const_cast<void*>(wei));
      const memory dst_mem({{m, nb}, memory::data_type::f32, {n, 1}}, cpu_engine(), y + j0);
      {
        std::lock_guard lock(mutex_);  // one product at a time: oneDNN's threads span all cores
        primitive(m, nb).execute(stream, {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, wei_mem},
                                          {DNNL_ARG_DST, dst_mem}});
        stream.wait();
      }
      if (bias) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < nb; ++j) y[i * n + j0 + j] += bias[j0 + j];
      }
    }
  }

 private:
  // Caller holds mutex_. The run-time-M primitive serves every m when oneDNN implements it with
  // the same kernel family as a fixed-M one (gemm:jit on AVX2 machines); where the fixed-M
  // implementation differs (brg:avx512_core vs gemm:jit with run-time M on AVX-512 machines,
  // ~1.5x faster), primitives per exact m are created and cached instead.
  dnnl::matmul& primitive(int64_t m, int64_t ncols) {
    const memory::data_type ab_type = bf16_ ? memory::data_type::bf16 : memory::data_type::f32;
    const int64_t k = w_.in_features, n = w_.out_features;
    auto runtime = runtime_m_.find(ncols);
    if (runtime == runtime_m_.end()) {
      std::optional<dnnl::matmul> prim;
      try {
        const auto pd = make_pd(DNNL_RUNTIME_DIM_VAL, k, ncols, n, ab_type);
        const auto fixed = make_pd(std::max<int64_t>(m, 64), k, ncols, n, ab_type);
        if (!is_reference_impl(pd) && std::string(pd.impl_info_str()) == fixed.impl_info_str()) prim.emplace(pd);
      } catch (const dnnl::error&) {
      }
      runtime = runtime_m_.emplace(ncols, std::move(prim)).first;
    }
    if (runtime->second) return *runtime->second;
    const auto key = std::make_pair(m, ncols);
    auto exact = exact_m_.find(key);
    if (exact == exact_m_.end()) {
      if (exact_m_.size() >= kMaxExactPrimitives) exact_m_.clear();
      exact = exact_m_.emplace(key, dnnl::matmul(make_pd(m, k, ncols, n, ab_type))).first;
    }
    return exact->second;
  }

  static constexpr size_t kMaxExactPrimitives = 64;
  LinearWeight w_;
  bool bf16_;
  int64_t block_cols_ = 0;
  std::string name_;
  std::mutex mutex_;
  std::map<int64_t, std::optional<dnnl::matmul>> runtime_m_;         // by ncols
  std::map<std::pair<int64_t, int64_t>, dnnl::matmul> exact_m_;      // by (m, ncols)
};

}  // namespace

std::string onednn_linear_unsupported_reason(const LinearWeight& weight, bool bf16_activations) {
  if (!bf16_activations) return {};
  if (weight.dtype != DType::kBF16) return "bf16 activations need bf16 weights";
  if (!cpu().has("amx_bf16") && !cpu().has("avx512_bf16"))
    return "CPU has neither AMX-BF16 nor AVX512-BF16 (oneDNN has no fast bf16 matmul here)";
  try {
    const auto pd = make_pd(64, weight.in_features, 64, 64, memory::data_type::bf16);
    if (is_reference_impl(pd)) return std::string("oneDNN offers only a reference bf16 matmul (") +
                                      pd.impl_info_str() + ")";
  } catch (const dnnl::error& e) {
    return std::string("oneDNN bf16 matmul unavailable: ") + e.what();
  }
  return {};
}

std::unique_ptr<LinearKernel> make_onednn_linear(const LinearWeight& weight, bool bf16_activations) {
  return std::make_unique<OneDnnLinear>(weight, bf16_activations);
}

void set_linear_threads_for_calling_thread(int num_threads) {
  SPINDLE_CHECK(num_threads >= 1, "linear threads {} must be positive", num_threads);
  omp_set_num_threads(num_threads);
}

}  // namespace spindle::kernels::cpu
