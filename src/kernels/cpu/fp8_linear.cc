#include "kernels/cpu/fp8_linear.h"

#include <algorithm>
#include <array>
#include <vector>

#include "util/error.h"
#include "util/fp8.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {
namespace {

constexpr int64_t kTileRows = 16;
constexpr int kLanes = 8;

// The 256 e4m3 codes as f32 (exact: every e4m3 value is an f32).
const std::array<float, 256>& fp8_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

// sum_i a[i] * b[i] over n, in kLanes f32 partial sums.
float dot(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (; i < n; ++i) acc[0] += a[i] * b[i];
  float sum = 0;
  for (float v : acc) sum += v;
  return sum;
}

class Fp8LinearKernel final : public LinearKernel {
 public:
  explicit Fp8LinearKernel(const Fp8LinearWeight& w) : w_(w) {
    SPINDLE_CHECK(w.data != nullptr && w.scales != nullptr && w.out_features > 0 && w.in_features > 0,
                  "fp8 linear kernel: weight [{}, {}] with {} data and {} scales", w.out_features, w.in_features,
                  w.data ? "" : "no", w.scales ? "" : "no");
  }

  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    const int64_t tiles = (w_.out_features + kTileRows - 1) / kTileRows;
    auto tile = [&](int64_t t) { run_tile(t, x, m, y, bias); };
    if (pool == nullptr || tiles < 2) {
      for (int64_t t = 0; t < tiles; ++t) tile(t);
    } else {
      pool->parallel_for(tiles, tile);
    }
  }
  const char* name() const override { return "fp8_reference"; }

 private:
  // Output rows [t * kTileRows, +kTileRows): decoded once, multiplied with every row of x.
  void run_tile(int64_t t, const float* x, int64_t m, float* y, const float* bias) const {
    const int64_t in = w_.in_features, out = w_.out_features;
    const int64_t begin = t * kTileRows, end = std::min(out, begin + kTileRows);
    thread_local std::vector<float> buffer;
    buffer.resize(static_cast<size_t>(kTileRows * in));
    for (int64_t o = begin; o < end; ++o) fp8_dequantize_row(w_, o, buffer.data() + (o - begin) * in);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t o = begin; o < end; ++o) {
        const float v = dot(x + r * in, buffer.data() + (o - begin) * in, in);
        y[r * out + o] = bias ? v + bias[o] : v;
      }
    }
  }

  Fp8LinearWeight w_;
};

}  // namespace

void fp8_dequantize_row(const Fp8LinearWeight& w, int64_t o, float* out) {
  const std::array<float, 256>& table = fp8_table();
  const int64_t in = w.in_features;
  const uint8_t* row = w.data + o * in;
  if (w.layout != Fp8ScaleLayout::kBlock128) {
    const float s = w.scales[w.layout == Fp8ScaleLayout::kPerTensor ? 0 : o];
    for (int64_t i = 0; i < in; ++i) out[i] = table[row[i]] * s;
    return;
  }
  const int64_t blocks_per_row = (in + kFp8LinearBlock - 1) / kFp8LinearBlock;
  const float* scales = w.scales + (o / kFp8LinearBlock) * blocks_per_row;
  for (int64_t i = 0; i < in; ++i) out[i] = table[row[i]] * scales[i / kFp8LinearBlock];
}

std::unique_ptr<LinearKernel> make_fp8_linear_kernel(const Fp8LinearWeight& weight) {
  return std::make_unique<Fp8LinearKernel>(weight);
}

}  // namespace spindle::kernels::cpu
