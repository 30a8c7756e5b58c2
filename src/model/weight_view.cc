#include "model/weight_view.h"

#include <cstring>

#include "kernels/cpu/ops.h"
#include "model/fp8_weights.h"
#include "util/half.h"
#include "util/error.h"

namespace spindle {

int64_t WeightView::rows() const { return shape.size() < 2 ? 1 : shape.front(); }

uint64_t WeightView::num_elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

int64_t WeightView::block_elements() const { return block ? gguf::ggml_block_elements(*block) : 1; }

int64_t WeightView::block_bytes() const {
  return block ? gguf::ggml_block_bytes(*block) : static_cast<int64_t>(dtype_size(dtype));
}

std::string WeightView::type_name() const {
  return std::string(block ? gguf::ggml_type_name(*block) : dtype_name(dtype));
}

WeightView weight_view(const TensorView& view, std::string_view source) {
  WeightView w;
  w.name = view.info->name;
  w.source = std::string(source);
  w.dtype = view.info->dtype;
  w.shape = view.info->shape;
  w.bytes = view.bytes;
  return w;
}

WeightView CheckpointWeights::weight(std::string_view hf_name) {
  const TensorView tensor = checkpoint_->tensor(hf_name);
  WeightView w = weight_view(tensor, name());
  if (w.dtype == DType::kF8E4M3) w.scale = fp8_weight_scale(*checkpoint_, fp8_, *tensor.info);
  return w;
}

int64_t fp8_scale_count(Fp8ScaleMode mode, int64_t out, int64_t in) {
  switch (mode) {
    case Fp8ScaleMode::kPerTensor: return 1;
    case Fp8ScaleMode::kPerChannel: return out;
    case Fp8ScaleMode::kBlock128: return ((out + kFp8BlockSize - 1) / kFp8BlockSize) * ((in + kFp8BlockSize - 1) / kFp8BlockSize);
  }
  return 0;
}

std::vector<float> fp8_scales_f32(const WeightView& view) {
  SPINDLE_CHECK(view.dtype == DType::kF8E4M3 && view.scale.has_value() && view.shape.size() == 2,
                "{} is {}; an FP8 linear weight [out, in] with its scale was expected", view.where(), view.type_name());
  const WeightScale& s = *view.scale;
  const int64_t count = fp8_scale_count(s.mode, view.rows(), view.cols());
  const size_t size = dtype_size(s.dtype);
  SPINDLE_CHECK(static_cast<int64_t>(s.bytes.size()) == count * static_cast<int64_t>(size),
                "{}: scale {} holds {} bytes, {} {} scales expected", view.where(), s.name, s.bytes.size(), count,
                fp8_scale_mode_name(s.mode));
  std::vector<float> out(static_cast<size_t>(count));
  for (size_t i = 0; i < out.size(); ++i) {
    const std::byte* p = s.bytes.data() + i * size;  // (possibly unaligned: copied)
    uint16_t h = 0;
    switch (s.dtype) {
      case DType::kF32: std::memcpy(&out[i], p, 4); break;
      case DType::kBF16: std::memcpy(&h, p, 2); out[i] = bf16_bits_to_float(h); break;
      case DType::kF16: std::memcpy(&h, p, 2); out[i] = fp16_bits_to_float(h); break;
      default: SPINDLE_FAIL("{}: scale {} is {}; FP8 scales must be F32, BF16 or F16", view.where(), s.name, dtype_name(s.dtype));
    }
  }
  return out;
}

std::vector<float> weight_to_f32(const WeightView& view) {
  SPINDLE_CHECK(!view.quantized() && (view.dtype == DType::kF32 || view.dtype == DType::kF16 || view.dtype == DType::kBF16),
                "{} is {}; it must be F32, F16 or BF16", view.where(), view.type_name());
  std::vector<float> out(view.num_elements());
  kernels::cpu::embedding_gather({view.bytes.data(), view.dtype}, 1, static_cast<int64_t>(out.size()),
                                 std::vector<int32_t>{0}, out.data());
  return out;
}

}  // namespace spindle
