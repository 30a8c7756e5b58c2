// make_linear_kernel: the policy that picks a linear implementation for this CPU and weight,
// and the direct (decode) kernel's thread split. The ISA code lives in linear_avx2.cc and
// linear_avx512.cc, the oneDNN paths in linear_onednn.cc (see linear.h for the list).
//
// Policy ("auto"): m <= kLinearDirectMaxRows runs the direct kernel (avx512 where AVX-512F/BW/VL
// are usable, else avx2 where AVX2+FMA are; amx/amx_bf16 rows on AMX CPUs, see linear.h): it reads
// W once from memory, which is what decode costs. Larger m runs amx_bf16 when
// LinearOptions::allow_bf16_activations, W is bf16 and AMX is usable; else oneDNN: bf16 matmul
// when bf16 activations are allowed and the CPU has AVX512-BF16, f32 matmul otherwise (exact f32
// products).
#include "kernels/cpu/linear.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/linear_isa.h"
#include "kernels/cpu/linear_onednn.h"
#include "platform/cpu_info.h"
#include "util/error.h"
#include "util/switches.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {
namespace {

constexpr std::array<std::string_view, 9> kNames = {"reference", "avx2",       "avx512",      "avx512_bf16", "amx",
                                                    "amx_bf16",  "onednn_f32", "onednn_bf16", "auto"};
// A task of the direct kernel reads at least this many bytes of W (pool overhead ~ microseconds).
// 128 KiB, not 256: the 1-row 384x384 products of kjv-tiny and kjv-draft (288 KiB) then run on
// two threads; on the 2-core Xeon VM kjv-tiny decode 0.87-0.88 -> 0.78-0.80 ms, kjv-draft
// 5983-6166 -> 6443-6798 tok/s (64 KiB: no better; bench/results/2026-12-04-spec-cpu2).
constexpr int64_t kMinTaskBytes = int64_t{128} << 10;
// Tasks per thread when W is large enough (dynamic scheduling evens out slow cores).
constexpr int64_t kTasksPerThread = 4;

const CpuInfo& cpu() {
  static const CpuInfo info = detect_cpu_info();
  return info;
}

using SliceFn = void (*)(const LinearSliceParams&, int64_t, int64_t);

LinearSliceParams slice_params(const LinearWeight& w, const float* x, int64_t m, float* y, const float* bias) {
  LinearSliceParams p;
  p.x = x;
  p.w = w.data;
  p.w_dtype = w.dtype;
  p.bias = bias;
  p.y = y;
  p.m = m;
  p.n = w.out_features;
  p.k = w.in_features;
  return p;
}

// Runs fn(col_begin, col_end) over W's rows (output columns) in slices of a multiple of `align`
// columns, each reading at least kMinTaskBytes / min(rows, kMaxTaskRowsScale) of W, on the pool.
// A task's work is its W bytes times the rows of x (from 2-3 rows the direct kernels are bound by
// arithmetic, not by reading W), so with more rows smaller slices are worth a hand-off: a 5-row
// verify's 384x384 products (288 KiB) run on both threads instead of one. Only the split changes:
// every column is computed by the same code whichever slice it lands in.
constexpr int64_t kMaxTaskRowsScale = 8;
template <class Fn>
void for_column_slices(const LinearWeight& w, ThreadPool* pool, int64_t rows, int64_t align, Fn&& fn) {
  const int64_t n = w.out_features;
  const int64_t threads = pool ? pool->num_threads() : 1;
  const int64_t col_bytes = w.in_features * int64_t(dtype_size(w.dtype));
  const int64_t min_bytes = kMinTaskBytes / std::clamp<int64_t>(rows, 1, kMaxTaskRowsScale);
  int64_t cols = std::max((min_bytes + col_bytes - 1) / col_bytes,
                          (n + threads * kTasksPerThread - 1) / (threads * kTasksPerThread));
  cols = (cols + align - 1) / align * align;
  const int64_t num_tasks = (n + cols - 1) / cols;
  if (threads == 1 || num_tasks == 1) {
    fn(int64_t{0}, n);
    return;
  }
  pool->parallel_for(num_tasks, [&](int64_t t) { fn(t * cols, std::min(n, (t + 1) * cols)); });
}

class DirectLinear final : public LinearKernel {
 public:
  DirectLinear(const LinearWeight& w, SliceFn fn, const char* name) : w_(w), fn_(fn), name_(name) {}
  const char* name() const override { return name_; }

  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    if (m <= 0) return;
    SPINDLE_CHECK(x != nullptr && y != nullptr, "linear {}: null x or y", name_);
    const LinearSliceParams p = slice_params(w_, x, m, y, bias);
    // (Slices of whole sub-blocks: the avx2/avx512 kernels take any column range.)
    for_column_slices(w_, pool, m, kLinearSubBlockCols, [&](int64_t c0, int64_t c1) { fn_(p, c0, c1); });
  }

 private:
  LinearWeight w_;
  SliceFn fn_;
  const char* name_;
};

// AVX512-BF16 dot products (linear_avx512_bf16.cc), bf16 weights: x rounded to bf16 once per call
// (on the calling thread, into a per-thread buffer), then the same column slices as DirectLinear.
class Bf16DotLinear final : public LinearKernel {
 public:
  explicit Bf16DotLinear(const LinearWeight& w) : w_(w) {}
  const char* name() const override { return "avx512_bf16"; }

  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    if (m <= 0) return;
    SPINDLE_CHECK(x != nullptr && y != nullptr, "linear avx512_bf16: null x or y");
    thread_local std::vector<uint16_t> rounded;
    rounded.resize(size_t(m * w_.in_features));
    linear_round_to_bf16_avx512(x, m * w_.in_features, rounded.data());
    // (A pointer, not the thread_local itself, goes into the pool's lambda.)
    const uint16_t* xb = rounded.data();
    const LinearSliceParams p = slice_params(w_, x, m, y, bias);
    for_column_slices(w_, pool, m, kLinearSubBlockCols,
                      [&](int64_t c0, int64_t c1) { linear_slice_avx512_bf16(p, xb, c0, c1); });
  }

 private:
  LinearWeight w_;
};

// AMX tiles (linear_amx.cc), bf16 weights: x split into three bf16 parts, so the products are
// f32-accurate ("amx"), or x rounded to bf16 ("amx_bf16", parts = 1). Rows of x go in groups of up
// to kLinearAmxMaxBlocks * kLinearAmxRows = 64: each group packs x (on the pool when it is large),
// then every column slice runs the tiles.
class AmxLinear final : public LinearKernel {
 public:
  AmxLinear(const LinearWeight& w, int64_t parts) : w_(w), parts_(parts) {}
  const char* name() const override { return parts_ == 1 ? "amx_bf16" : "amx"; }

  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    if (m <= 0) return;
    SPINDLE_CHECK(x != nullptr && y != nullptr, "linear amx: null x or y");
    constexpr int64_t kGroup = kLinearAmxMaxBlocks * kLinearAmxRows;
    const int64_t k = w_.in_features, n = w_.out_features;
    const int64_t nchunks = (k + kLinearAmxChunk - 1) / kLinearAmxChunk;
    thread_local std::vector<uint16_t> packed;
    thread_local std::vector<float> rounded;
    if (parts_ == 1 && n % 16 != 0) {
      // The last < 16 columns run on the avx512 kernel from p.x: give it x rounded to bf16 too, so
      // every column is the same bf16-activation product.
      rounded.resize(size_t(m * k));
      for (int64_t e = 0; e < m * k; ++e) rounded[e] = bf16_bits_to_float(float_to_bf16_bits(x[e]));
      x = rounded.data();
    }
    for (int64_t i0 = 0; i0 < m; i0 += kGroup) {
      const int64_t rows = std::min(kGroup, m - i0);
      const int64_t nmb = (rows + kLinearAmxRows - 1) / kLinearAmxRows;
      packed.resize(size_t(nchunks * parts_ * nmb * kLinearAmxTileElems));
      // (A pointer, not the thread_local itself, goes into the pool's lambdas: named there, the
      // thread_local would be each worker's own, empty vector.)
      uint16_t* buf = packed.data();
      const float* xg = x + i0 * k;
      // Packing touches rows * k floats; below kSerialPackElems it is cheaper than a pool fan-out.
      constexpr int64_t kSerialPackElems = int64_t{32} << 10;
      const int64_t threads = pool ? pool->num_threads() : 1;
      const int64_t pack_tasks = rows * k < kSerialPackElems ? 1 : std::min(threads, nchunks);
      if (pack_tasks <= 1) {
        linear_amx_pack_x(xg, rows, k, parts_, buf, 0, nchunks);
      } else {
        pool->parallel_for(pack_tasks, [&](int64_t t) {
          linear_amx_pack_x(xg, rows, k, parts_, buf, t * nchunks / pack_tasks, (t + 1) * nchunks / pack_tasks);
        });
      }
      const LinearSliceParams p = slice_params(w_, xg, rows, y + i0 * n, bias);
      const uint16_t* tiles = buf;
      // (The split of before: 1 row's bytes per task, whole 16-column tiles.)
      for_column_slices(w_, pool, 1, kLinearSliceAlign,
                        [&](int64_t c0, int64_t c1) { linear_slice_amx(p, parts_, tiles, c0, c1); });
    }
  }

 private:
  LinearWeight w_;
  int64_t parts_;
};

// The decode kernel of "auto": m < min_rows on `small`, otherwise on `large` (AMX).
class RowSplitLinear final : public LinearKernel {
 public:
  RowSplitLinear(std::unique_ptr<LinearKernel> small, std::unique_ptr<LinearKernel> large, int64_t min_rows)
      : small_(std::move(small)), large_(std::move(large)), min_rows_(min_rows) {
    name_ = std::string(small_->name()) + "+" + large_->name();
  }
  const char* name() const override { return name_.c_str(); }
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    forward_choosing_for(x, m, m, y, pool, bias);
  }
  void forward_choosing_for(const float* x, int64_t m, int64_t choose_rows, float* y, ThreadPool* pool,
                            const float* bias) override {
    (choose_rows < min_rows_ ? small_ : large_)->forward(x, m, y, pool, bias);
  }

 private:
  std::unique_ptr<LinearKernel> small_, large_;
  int64_t min_rows_;
  std::string name_;
};

class AutoLinear final : public LinearKernel {
 public:
  AutoLinear(std::unique_ptr<LinearKernel> direct, std::unique_ptr<LinearKernel> large)
      : direct_(std::move(direct)), large_(std::move(large)) {
    name_ = std::string("auto(") + (direct_ ? direct_->name() : "-") + "," + large_->name() + ")";
  }
  const char* name() const override { return name_.c_str(); }
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    forward_choosing_for(x, m, m, y, pool, bias);
  }
  // Direct (<= kLinearDirectMaxRows rows) or large by m; within the direct kernel by choose_rows.
  void forward_choosing_for(const float* x, int64_t m, int64_t choose_rows, float* y, ThreadPool* pool,
                            const float* bias) override {
    if (direct_ && m <= kLinearDirectMaxRows) {
      direct_->forward_choosing_for(x, m, choose_rows, y, pool, bias);
    } else {
      large_->forward(x, m, y, pool, bias);
    }
  }

 private:
  std::unique_ptr<LinearKernel> direct_, large_;
  std::string name_;
};

void check_weight(const LinearWeight& w) {
  SPINDLE_CHECK(!w.quantized(), "linear: a {} weight runs on the quantized kernels (make_linear_kernel or "
                "make_quant_linear_kernel), not a named plain one", quant_type_name(w.quant->type));
  SPINDLE_CHECK(w.dtype == DType::kF32 || w.dtype == DType::kBF16,
                "linear: weight dtype {} is not supported (F32 or BF16)", dtype_name(w.dtype));
  SPINDLE_CHECK(w.out_features > 0 && w.in_features > 0, "linear: weight shape [{}, {}] must be positive",
                w.out_features, w.in_features);
  SPINDLE_CHECK(w.data != nullptr, "linear: weight data is null");
}

bool has_avx2() { return cpu().has("avx2") && cpu().has("fma"); }
bool has_avx512() { return cpu().has("avx512f") && cpu().has("avx512bw") && cpu().has("avx512vl"); }

std::string amx_unsupported_reason(const LinearWeight& w) {
  if (!has_avx512() || !cpu().has("avx512_bf16")) return "CPU lacks usable AVX-512F/BW/VL and AVX512-BF16";
  for (const char* f : {"amx_tile", "amx_bf16"}) {
    const CpuFeature* feature = cpu().find(f);
    if (feature == nullptr || !feature->present) return std::string("CPU lacks ") + f;
    if (!feature->usable) return std::string(f) + " present but unusable: " + feature->reason;
  }
  if (w.dtype != DType::kBF16) return "amx serves bf16 weights only";
  return {};
}

std::string avx512_bf16_unsupported_reason(const LinearWeight& w) {
  if (!has_avx512()) return "CPU lacks usable AVX-512F/BW/VL";
  const CpuFeature* feature = cpu().find("avx512_bf16");
  if (feature == nullptr || !feature->present) return "CPU lacks avx512_bf16";
  if (!feature->usable) return "avx512_bf16 present but unusable: " + feature->reason;
  if (w.dtype != DType::kBF16) return "avx512_bf16 serves bf16 weights only";
  return {};
}

// bf16_activations: the amx rows (linear_amx_bf16_min_rows() and up) round x to bf16 (amx_bf16);
// otherwise the exact amx kernel from kLinearAmxMinRows.
std::unique_ptr<LinearKernel> make_direct(const LinearWeight& w, bool bf16_activations) {
  if (has_avx512()) {
    auto avx512 = std::make_unique<DirectLinear>(w, &linear_slice_avx512, "avx512");
    if (amx_unsupported_reason(w).empty()) {
      auto amx = std::make_unique<AmxLinear>(w, bf16_activations ? 1 : kLinearAmxParts);
      const int64_t min_rows = bf16_activations ? linear_amx_bf16_min_rows() : kLinearAmxMinRows;
      if (min_rows <= 1) return amx;
      return std::make_unique<RowSplitLinear>(std::move(avx512), std::move(amx), min_rows);
    }
    // AVX512-BF16 without AMX (Zen 4): bf16 dot products for every row count (see linear.h).
    if (bf16_activations && avx512_bf16_unsupported_reason(w).empty()) {
      auto dot = std::make_unique<Bf16DotLinear>(w);
      const int64_t min_rows = linear_bf16_dot_min_rows();
      if (min_rows <= 1) return dot;
      return std::make_unique<RowSplitLinear>(std::move(avx512), std::move(dot), min_rows);
    }
    return avx512;
  }
  if (has_avx2()) return std::make_unique<DirectLinear>(w, &linear_slice_avx2, "avx2");
  return nullptr;
}

}  // namespace

// The registry's values (util/switches.h, kind kMeasured: its defaults are the constants of
// linear.h, tests/kernels/linear_test.cc checks that; 1 .. kLinearDirectMaxRows + 1).
int64_t linear_amx_bf16_min_rows() { return switches().linear_amx_bf16_min_rows; }
int64_t linear_bf16_dot_min_rows() { return switches().linear_bf16_dot_min_rows; }

std::vector<std::string> linear_kernel_names() { return {kNames.begin(), kNames.end()}; }

std::string linear_kernel_unsupported_reason(std::string_view name, const LinearWeight& weight,
                                             const LinearOptions& options) {
  if (name == "reference" || name == "auto" || name == "onednn_f32") return {};
  if (name == "avx2") return has_avx2() ? "" : "CPU lacks usable AVX2+FMA";
  if (name == "avx512") return has_avx512() ? "" : "CPU lacks usable AVX-512F/BW/VL";
  if (name == "avx512_bf16") return avx512_bf16_unsupported_reason(weight);
  if (name == "amx" || name == "amx_bf16") return amx_unsupported_reason(weight);
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
  if (name == "avx512_bf16") return std::make_unique<Bf16DotLinear>(weight);
  if (name == "amx") return std::make_unique<AmxLinear>(weight, kLinearAmxParts);
  if (name == "amx_bf16") return std::make_unique<AmxLinear>(weight, 1);
  if (name == "onednn_f32") return make_onednn_linear(weight, false);
  if (name == "onednn_bf16") return make_onednn_linear(weight, true);
  return make_linear_kernel(weight, options);  // "auto"
}

// quant_linear_kernel.cc
std::unique_ptr<LinearKernel> make_default_quant_linear_kernel(const LinearWeight& weight);

std::unique_ptr<LinearKernel> make_linear_kernel(const LinearWeight& weight, const LinearOptions& options) {
  if (weight.quantized()) return make_default_quant_linear_kernel(weight);
  check_weight(weight);
  const bool bf16 = options.allow_bf16_activations && onednn_linear_unsupported_reason(weight, true).empty();
  // More than kLinearDirectMaxRows rows with bf16 activations: amx_bf16 where AMX is usable (x
  // rounded to bf16 as oneDNN's bf16 matmul rounds it: the same product, W read in place), else
  // oneDNN (see linear.h for the measurement).
  if (bf16 && amx_unsupported_reason(weight).empty())
    return std::make_unique<AutoLinear>(make_direct(weight, bf16), std::make_unique<AmxLinear>(weight, 1));
  return std::make_unique<AutoLinear>(make_direct(weight, bf16), make_onednn_linear(weight, bf16));
}

}  // namespace spindle::kernels::cpu
