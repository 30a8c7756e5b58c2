// CudaOps' FP8 linear weights (cuda_ops.h): placed as one slot of e4m3 codes, zero padding to the
// slot alignment and the f32 scales; run by kernels::cuda::Fp8Linear.
#include <algorithm>
#include <array>

#include "model/cuda_ops.h"
#include "util/error.h"

namespace spindle {

namespace kcu = kernels::cuda;

namespace {

constexpr size_t kScaleAlign = 256;  // the scales start on the slot alignment

kcu::Fp8Scale device_mode(Fp8ScaleMode mode) {
  switch (mode) {
    case Fp8ScaleMode::kPerTensor: return kcu::Fp8Scale::kPerTensor;
    case Fp8ScaleMode::kPerChannel: return kcu::Fp8Scale::kPerChannel;
    case Fp8ScaleMode::kBlock128: return kcu::Fp8Scale::kBlock128;
  }
  SPINDLE_FAIL("unknown FP8 scale mode");
}

}  // namespace

bool CudaOps::place_fp8(std::span<const WeightView> parts, Placed& p) {
  if (parts.size() != 1) return false;  // each FP8 part has its own scales: not joined
  const WeightView& w = parts.front();
  p.fp8_scales = fp8_scales_f32(w);  // throws naming the tensor when its scale does not fit
  p.weight = {nullptr, DType::kF8E4M3, w.rows(), w.cols()};
  p.fp8.mode = device_mode(w.scale->mode);
  p.fp8.out_features = w.rows();
  p.fp8.in_features = w.cols();
  static const std::array<std::byte, kScaleAlign> zeros{};
  const size_t padded = (w.bytes.size() + kScaleAlign - 1) / kScaleAlign * kScaleAlign;
  p.parts.push_back(w.bytes);
  if (padded > w.bytes.size()) p.parts.push_back(std::span<const std::byte>(zeros).first(padded - w.bytes.size()));
  p.fp8_scale_offset = padded;
  p.parts.push_back(std::as_bytes(std::span<const float>(p.fp8_scales)));
  has_16bit_weights_ = true;  // its products convert x to bf16 in CublasLinear's scratch
  return true;
}

void CudaOps::finish_fp8() {
  int64_t max_out = 0, max_elements = 0;
  bool has_block_scales = false;
  for (Placed& p : placed_) {
    if (p.use != WeightUse::kLinear || p.weight.dtype != DType::kF8E4M3) continue;
    const auto* slot = static_cast<const std::byte*>(p.data);
    p.fp8.codes = reinterpret_cast<const uint8_t*>(slot);
    p.fp8.scales = reinterpret_cast<const float*>(slot + p.fp8_scale_offset);
    max_out = std::max(max_out, p.fp8.out_features);
    max_elements = std::max(max_elements, p.fp8.out_features * p.fp8.in_features);
    has_block_scales = has_block_scales || p.fp8.mode == kcu::Fp8Scale::kBlock128;
    p.fp8_scales = {};
  }
  if (max_out > 0) fp8_linear_->reserve(max_out, max_elements, has_block_scales);
}

}  // namespace spindle
