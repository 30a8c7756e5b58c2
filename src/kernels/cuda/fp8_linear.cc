#include "kernels/cuda/fp8_linear.h"

#include <algorithm>

#include "kernels/cuda/fp8_convert.h"
#include "util/error.h"

namespace spindle::kernels::cuda {

void Fp8Linear::reserve(int64_t max_out, int64_t max_elements, bool has_block_scales) {
  product_.reserve(static_cast<size_t>(2 * kGemvFp8MaxRows * std::max<int64_t>(max_out, 1)) * sizeof(float));
  const int64_t copies = has_block_scales ? 2 : 1;
  dequantized_.reserve(static_cast<size_t>(copies * std::max<int64_t>(max_elements, 1)) * sizeof(uint16_t));
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
  const int64_t copies = w.mode == Fp8Scale::kBlock128 ? 2 : 1;
  SPINDLE_CHECK(dequantized_.size() >= static_cast<size_t>(copies * out * in) * sizeof(uint16_t),
                "fp8 linear: scratch for a [{}, {}] weight ({} bf16 copies) not reserved", out, in, copies);
  auto* first = dequantized_.as<uint16_t>();
  if (w.mode != Fp8Scale::kBlock128) {
    launch_fp8_codes_bf16(w.codes, out, in, first, stream_);
    linear_.forward(DeviceWeight{first, DType::kBF16, out, in}, x, y, nullptr);
    launch_scale_columns(y, rows, out, w.scales, w.mode, bias, stream_);
    return;
  }
  uint16_t* second = first + out * in;
  launch_fp8_dequantize_bf16_split(w.codes, w.scales, w.mode, out, in, first, second, stream_);
  linear_.forward(DeviceWeight{first, DType::kBF16, out, in}, x, y, bias);
  linear_.accumulate(DeviceWeight{second, DType::kBF16, out, in}, x, y);
}

}  // namespace spindle::kernels::cuda
