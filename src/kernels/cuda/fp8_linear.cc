#include "kernels/cuda/fp8_linear.h"

#include <algorithm>

#include "kernels/cuda/fp8_convert.h"
#include "util/error.h"

namespace spindle::kernels::cuda {

void Fp8Linear::reserve(int64_t max_out, int64_t max_elements) {
  product_.reserve(static_cast<size_t>(2 * kGemvFp8MaxRows * std::max<int64_t>(max_out, 1)) * sizeof(float));
  dequantized_.reserve(static_cast<size_t>(std::max<int64_t>(max_elements, 1)) * sizeof(uint16_t));
}

void Fp8Linear::forward(const DeviceFp8Weight& w, const CublasLinear::Input& x, float* y, const float* bias) {
  const int64_t rows = x.rows, in = w.in_features, out = w.out_features;
  SPINDLE_CHECK(x.dtype == DType::kBF16 && x.cols == in,
                "fp8 linear: input prepared for {} [{} cols], the weight is FP8 [{}, {}] (bf16 input expected)",
                dtype_name(x.dtype), x.cols, out, in);
  const auto* x16 = static_cast<const uint16_t*>(x.converted);
  if (rows <= kGemvFp8MaxRows && gemv_fp8_supports(rows, in, w.codes, x16)) {
    if (!x.split) {
      launch_gemv_fp8(w.codes, w.scales, w.mode, x16, rows, in, out, bias, y, stream_);
      return;
    }
    SPINDLE_CHECK(product_.size() >= static_cast<size_t>(2 * rows * out) * sizeof(float),
                  "fp8 linear: scratch for {} outputs not reserved", out);
    float* halves = product_.as<float>();
    for (int64_t r0 = 0; r0 < 2 * rows; r0 += kGemvFp8MaxRows) {  // hi rows, then lo rows
      const int64_t n = std::min(kGemvFp8MaxRows, 2 * rows - r0);
      launch_gemv_fp8(w.codes, w.scales, w.mode, x16 + r0 * in, n, in, out, nullptr, halves + r0 * out, stream_);
    }
    launch_add_row_halves(halves, rows, out, bias, y, stream_);
    return;
  }
  SPINDLE_CHECK(dequantized_.size() >= static_cast<size_t>(out * in) * sizeof(uint16_t),
                "fp8 linear: scratch for a [{}, {}] weight not reserved", out, in);
  launch_fp8_dequantize_bf16(w.codes, w.scales, w.mode, out, in, dequantized_.as<uint16_t>(), stream_);
  linear_.forward(DeviceWeight{dequantized_.data(), DType::kBF16, out, in}, x, y, bias);
}

}  // namespace spindle::kernels::cuda
