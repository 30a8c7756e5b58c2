// The direct and AMX linear kernels' classes and their thread split (linear_kernels.h makes them;
// the ISA code lives in linear_avx2.cc, linear_avx512.cc, linear_avx512_bf16.cc and linear_amx.cc,
// the oneDNN paths in linear_onednn.cc; kernels/cpu/linear_registry.cc registers them all).
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_kernels.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/linear_isa.h"
#include "util/error.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {
namespace {

// A task of the direct kernel reads at least this many bytes of W (pool overhead ~ microseconds).
// 128 KiB, not 256: the 1-row 384x384 products of kjv-tiny and kjv-draft (288 KiB) then run on
// two threads; on the 2-core Xeon VM kjv-tiny decode 0.87-0.88 -> 0.78-0.80 ms, kjv-draft
// 5983-6166 -> 6443-6798 tok/s (64 KiB: no better; bench/results/2026-12-04-spec-cpu2).
constexpr int64_t kMinTaskBytes = int64_t{128} << 10;
// Tasks per thread when W is large enough (dynamic scheduling evens out slow cores).
constexpr int64_t kTasksPerThread = 4;

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

}  // namespace

void check_linear_weight(const LinearWeight& w) {
  SPINDLE_CHECK(!w.quantized(), "linear: a {} weight runs on the quantized kernels (the int8 entries of the "
                "registry), not a plain one", quant_type_name(w.quant->type));
  SPINDLE_CHECK(w.dtype == DType::kF32 || w.dtype == DType::kBF16,
                "linear: weight dtype {} is not supported (F32 or BF16)", dtype_name(w.dtype));
  SPINDLE_CHECK(w.out_features > 0 && w.in_features > 0, "linear: weight shape [{}, {}] must be positive",
                w.out_features, w.in_features);
  SPINDLE_CHECK(w.data != nullptr, "linear: weight data is null");
}

std::unique_ptr<LinearKernel> make_avx2_linear(const LinearWeight& w) {
  return std::make_unique<DirectLinear>(w, &linear_slice_avx2, "avx2");
}
std::unique_ptr<LinearKernel> make_avx512_linear(const LinearWeight& w) {
  return std::make_unique<DirectLinear>(w, &linear_slice_avx512, "avx512");
}
std::unique_ptr<LinearKernel> make_avx512_bf16_linear(const LinearWeight& w) { return std::make_unique<Bf16DotLinear>(w); }
std::unique_ptr<LinearKernel> make_amx_linear(const LinearWeight& w, bool bf16_activations) {
  return std::make_unique<AmxLinear>(w, bf16_activations ? 1 : kLinearAmxParts);
}

}  // namespace spindle::kernels::cpu
