#include "model/fp8_quantize.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"
#include "util/fp8.h"

namespace spindle {

bool is_fp8_quantized_name(std::string_view hf_name) { return hf_name.ends_with("_proj.weight"); }

WeightView Fp8QuantizedWeights::weight(std::string_view hf_name) {
  WeightView w = inner_->weight(hf_name);
  if (!is_fp8_quantized_name(hf_name)) return w;
  SPINDLE_CHECK(!w.quantized() && w.shape.size() == 2 &&
                    (w.dtype == DType::kF32 || w.dtype == DType::kF16 || w.dtype == DType::kBF16),
                "{} is {}; --quantization fp8 quantizes F32, F16 or BF16 linear weights (this checkpoint is "
                "quantized already: serve it without --quantization)",
                w.where(), w.type_name());
  const int64_t out = w.rows(), in = w.cols();
  const std::vector<float> f = weight_to_f32(w);
  Quantized& q = quantized_.emplace_back();
  q.codes.resize(static_cast<size_t>(out * in));
  q.scales.resize(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const float* row = f.data() + o * in;
    float m = 0;
    for (int64_t i = 0; i < in; ++i) m = std::max(m, std::abs(row[i]));
    const float s = m == 0 ? 1.0f : m / kFp8E4m3Max;
    q.scales[static_cast<size_t>(o)] = s;
    for (int64_t i = 0; i < in; ++i) q.codes[static_cast<size_t>(o * in + i)] = std::byte{float_to_fp8_e4m3(row[i] / s)};
  }
  WeightView v;
  v.name = w.name;
  v.source = w.source + " (--quantization fp8)";
  v.dtype = DType::kF8E4M3;
  v.shape = w.shape;
  v.bytes = q.codes;
  v.scale = WeightScale{w.name + " (per-channel scale)", Fp8ScaleMode::kPerChannel, DType::kF32, {out, 1},
                        std::as_bytes(std::span<const float>(q.scales)), std::nullopt};  // (no activation scale)
  return v;
}

}  // namespace spindle
