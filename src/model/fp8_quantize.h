// `--quantization fp8`: a bf16 / f16 / f32 checkpoint's linear weights quantized to FP8 E4M3 at
// load, per output channel, so an unquantized folder runs the FP8 path (issue 47).
//
// Every "*_proj.weight" (q, k, v, o, gate, up, down) [out, in]: s[o] = max_i |W[o, i]| / 448 (1 for
// an all-zero row), computed in f32; codes = float_to_fp8_e4m3(W[o, i] / s[o]) (util/fp8.h: nearest
// even, saturating); served as a per-channel FP8 weight (dequantized = code * s[o]). The embedding
// table, norms, biases and the LM head stay as stored (as FP8 exporters leave lm_head).
// The quantized bytes are owned by the source (host memory, out * in + 4 * out bytes per weight),
// made on first request and kept while the source lives.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/weight_view.h"

namespace spindle {

class Fp8QuantizedWeights final : public WeightSource {
 public:
  explicit Fp8QuantizedWeights(std::unique_ptr<WeightSource> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  bool contains(std::string_view hf_name) const override { return inner_->contains(hf_name); }
  // A linear weight quantized (see above); anything else as the inner source gives it. Throws naming
  // the tensor for a linear weight that is not F32, F16 or BF16 (already FP8, or a block type).
  WeightView weight(std::string_view hf_name) override;

 private:
  struct Quantized {
    std::vector<std::byte> codes;
    std::vector<float> scales;
  };
  std::unique_ptr<WeightSource> inner_;
  std::deque<Quantized> quantized_;  // stable addresses for the views handed out
};

// True for the names --quantization fp8 quantizes.
bool is_fp8_quantized_name(std::string_view hf_name);

}  // namespace spindle
