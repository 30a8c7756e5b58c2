#include "model/weight_view.h"

#include "kernels/cpu/ops.h"
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

std::vector<float> weight_to_f32(const WeightView& view) {
  SPINDLE_CHECK(!view.quantized() && (view.dtype == DType::kF32 || view.dtype == DType::kF16 || view.dtype == DType::kBF16),
                "{} is {}; it must be F32, F16 or BF16", view.where(), view.type_name());
  std::vector<float> out(view.num_elements());
  kernels::cpu::embedding_gather({view.bytes.data(), view.dtype}, 1, static_cast<int64_t>(out.size()),
                                 std::vector<int32_t>{0}, out.data());
  return out;
}

}  // namespace spindle
