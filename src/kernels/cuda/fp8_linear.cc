#include "kernels/cuda/fp8_linear.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/fp8_convert.h"
#include "util/error.h"
#include "util/switches.h"

namespace spindle::kernels::cuda {
namespace {

// The weight load of gemv_fp8_mma for n rows: SPINDLE_FP8_MMA_LOAD where set (the A/B of the
// block pipelines' first GPU run), else gemv_fp8_mma_load_for(n).
Fp8MmaLoad mma_load_for(int64_t n) {
  const std::string& forced = switches().fp8_mma_load;
  if (forced == "lanes") return Fp8MmaLoad::kLanePieces;
  if (forced == "spans") return Fp8MmaLoad::kRowSpans;
  if (forced == "stages") return Fp8MmaLoad::kBlockStages;
  if (forced == "pairs") return Fp8MmaLoad::kBlockPairs;
  return gemv_fp8_mma_load_for(n);
}

}  // namespace

void Fp8Linear::reserve(int64_t max_out, int64_t max_elements, bool has_block_scales) {
  max_out = std::max<int64_t>(max_out, 1);
  product_.reserve(static_cast<size_t>(2 * kFp8StreamMaxRows * max_out) * sizeof(float));
  const int64_t copies = has_block_scales ? 2 : 1;
  dequantized_.reserve(static_cast<size_t>(copies * std::max<int64_t>(max_elements, 1)) * sizeof(uint16_t));
  mma_buffer_.reserve(static_cast<size_t>(fp8_mma_workspace_bytes(max_out)));
  mma_ = fp8_mma_workspace_init(mma_buffer_.data(), static_cast<int64_t>(mma_buffer_.size()), max_out);
}

bool Fp8Linear::forward_stream(const DeviceFp8Weight& w, const CublasLinear::Input& x, float* y, const float* bias) {
  const int64_t rows = x.rows, in = w.in_features, out = w.out_features;
  const auto* x16 = static_cast<const uint16_t*>(x.converted);
  const bool gemv = rows <= kFp8GemvUseMaxRows && gemv_fp8_supports(rows, in, w.codes, x16);
  if (!gemv && !(rows <= kFp8StreamMaxRows && gemv_fp8_mma_supports(rows, in, w.codes, x16))) return false;
  // (An unreserved or too small mma workspace only makes launch_gemv_fp8_mma take fewer splits.)
  // One launch of n rows starting at x row r0 into dst (gemv: at most 8 rows per launch).
  const int64_t step = gemv ? kGemvFp8MaxRows : kGemvFp8MmaMaxRows;
  const auto launch = [&](int64_t r0, int64_t n, float* dst, const float* b) {
    if (gemv) {
      launch_gemv_fp8(w.codes, w.scales, w.mode, x16 + r0 * in, n, in, out, b, dst, stream_);
    } else {
      launch_gemv_fp8_mma(w.codes, w.scales, w.mode, x16 + r0 * in, n, in, out, b, dst, mma_, stream_, 0,
                          mma_load_for(n));
    }
  };
  if (!x.split) {
    launch(0, rows, y, bias);
    return true;
  }
  SPINDLE_CHECK(product_.size() >= static_cast<size_t>(2 * rows * out) * sizeof(float),
                "fp8 linear: scratch for {} outputs not reserved", out);
  float* halves = product_.as<float>();
  for (int64_t r0 = 0; r0 < 2 * rows; r0 += step) {  // hi rows, then lo rows
    launch(r0, std::min(step, 2 * rows - r0), halves + r0 * out, nullptr);
  }
  launch_add_row_halves(halves, rows, out, bias, y, stream_);
  return true;
}

void Fp8Linear::forward(const DeviceFp8Weight& w, const CublasLinear::Input& x, float* y, const float* bias) {
  const int64_t rows = x.rows, in = w.in_features, out = w.out_features;
  SPINDLE_CHECK(x.dtype == DType::kBF16 && x.cols == in,
                "fp8 linear: input prepared for {} [{} cols], the weight is FP8 [{}, {}] (bf16 input expected)",
                dtype_name(x.dtype), x.cols, out, in);
  if (forward_stream(w, x, y, bias)) return;
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
