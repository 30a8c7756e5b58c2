// Test support: a Hugging Face golden checkpoint (tests/golden/<model>, F32 safetensors) written as
// an FP8 checkpoint folder the way FP8 exporters lay one out, and the float64 weights it holds.
//
// Every "*_proj.weight" (q, k, v, o, gate, up, down) becomes F8_E4M3 with a scale; the embedding,
// norms and lm_head stay F32 (lm_head listed as not converted). Scales s = max|W| / 448 over the
// scale's extent (the tensor, an output row, a 128x128 block; 1 where that is all zero), stored as
// F32; codes = float_to_fp8_e4m3(W / s) (util/fp8.h: nearest even, saturating). The float64
// weights returned are e4m3_definition(code) * s (tests/support/fp8_reference.h), in the HF
// layout, with the llama3 rope factors (golden_gguf.h), for reference_forward.h.
//
//   kFp8Block      quant_method "fp8", weight_block_size [128, 128], X.weight_scale_inv [ceil(o/128), ceil(i/128)]
//   kFp8Tensor     quant_method "fp8", activation_scheme "static": X.weight_scale [] and X.input_scale []
//   kCtChannel     compressed-tensors, strategy "channel": X.weight_scale [out, 1]
//   kCtTensor      compressed-tensors, strategy "tensor": X.weight_scale [1]
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "model/golden_gguf.h"
#include "safetensors_writer.h"
#include "support/fp8_reference.h"
#include "util/fp8.h"

namespace spindle::testing {

enum class Fp8Format { kFp8Block, kFp8Tensor, kCtChannel, kCtTensor };

struct Fp8FolderOptions {
  Fp8Format format = Fp8Format::kFp8Block;
  // Called with each tensor before it is written (bad folders for the error tests); false drops it.
  std::function<bool(NamedTensor&)> edit = {};
  // Every scale written as 1.0 (the codes unchanged): what a loader that ignored the scale computes.
  bool unit_scales = false;
};

namespace golden_fp8_detail {

inline nlohmann::json quantization_config(Fp8Format f) {
  using nlohmann::json;
  if (f == Fp8Format::kFp8Block) {
    return {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
            {"weight_block_size", {128, 128}}, {"modules_to_not_convert", {"lm_head"}}};
  }
  if (f == Fp8Format::kFp8Tensor) {
    return {{"quant_method", "fp8"}, {"activation_scheme", "static"}, {"ignored_layers", {"lm_head"}}};
  }
  const json weights = {{"type", "float"}, {"num_bits", 8}, {"symmetric", true}, {"dynamic", false},
                        {"strategy", f == Fp8Format::kCtChannel ? "channel" : "tensor"}};
  const json input = {{"type", "float"}, {"num_bits", 8}, {"symmetric", true}, {"dynamic", true}, {"strategy", "token"}};
  return {{"quant_method", "compressed-tensors"}, {"format", "float-quantized"}, {"quantization_status", "compressed"},
          {"ignore", {"lm_head"}},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", input}}}}}};
}

// The scale index of element (o, i) and the scale tensor's shape.
inline int64_t scale_index(Fp8Format f, int64_t o, int64_t i, int64_t in) {
  switch (f) {
    case Fp8Format::kFp8Block: return (o / 128) * ((in + 127) / 128) + i / 128;
    case Fp8Format::kCtChannel: return o;
    default: return 0;
  }
}
inline std::vector<int64_t> scale_shape(Fp8Format f, int64_t out, int64_t in) {
  switch (f) {
    case Fp8Format::kFp8Block: return {(out + 127) / 128, (in + 127) / 128};
    case Fp8Format::kCtChannel: return {out, 1};
    case Fp8Format::kCtTensor: return {1};
    case Fp8Format::kFp8Tensor: return {};
  }
  return {};
}

inline NamedTensor f32_tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
  NamedTensor t{std::move(name), DType::kF32, std::move(shape), {}};
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

// W [out, in] (f32) as FP8 codes and scales; `deq` gets the float64 dequantized values.
inline std::vector<NamedTensor> quantize(const std::string& name, const float* w, int64_t out, int64_t in,
                                         const Fp8FolderOptions& opt, std::vector<double>& deq) {
  const auto shape = scale_shape(opt.format, out, in);
  std::vector<float> scales(static_cast<size_t>(num_elements(shape)), 0.0f);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      float& s = scales[static_cast<size_t>(scale_index(opt.format, o, i, in))];
      s = std::max(s, std::abs(w[o * in + i]));
    }
  for (float& s : scales) s = s == 0 ? 1.0f : s / kFp8E4m3Max;
  NamedTensor codes{name, DType::kF8E4M3, {out, in}, std::vector<std::byte>(static_cast<size_t>(out * in))};
  deq.resize(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      const float s = scales[static_cast<size_t>(scale_index(opt.format, o, i, in))];
      const uint8_t c = float_to_fp8_e4m3(w[o * in + i] / s);
      codes.data[static_cast<size_t>(o * in + i)] = static_cast<std::byte>(c);
      deq[static_cast<size_t>(o * in + i)] = e4m3_definition(c) * (opt.unit_scales ? 1.0 : double{s});
    }
  if (opt.unit_scales) std::fill(scales.begin(), scales.end(), 1.0f);
  const std::string module = name.substr(0, name.size() - std::string(".weight").size());
  std::vector<NamedTensor> out_tensors{std::move(codes)};
  out_tensors.push_back(
      f32_tensor(module + (opt.format == Fp8Format::kFp8Block ? ".weight_scale_inv" : ".weight_scale"), shape, scales));
  if (opt.format == Fp8Format::kFp8Tensor) out_tensors.push_back(f32_tensor(module + ".input_scale", {}, {0.05f}));
  return out_tensors;
}

}  // namespace golden_fp8_detail

// Writes tests/golden/<model> (an F32 checkpoint) as an FP8 folder into dir; returns the float64
// weights it holds (with unit_scales: the weights Spindle would compute with if it used no scale —
// the real scaled values, for the negative control).
inline Float64Weights write_golden_fp8(const std::string& model, const std::filesystem::path& dir,
                                       const Fp8FolderOptions& options = {}) {
  namespace d = golden_fp8_detail;
  const golden_gguf_detail::HfConfig h = golden_gguf_detail::read_config(model);
  nlohmann::json config = h.json;
  config["quantization_config"] = d::quantization_config(options.format);
  std::ofstream(dir / "config.json") << config.dump(2);
  Float64Weights weights;
  gguf::testing::GgufWriter unused;  // (the factors only)
  golden_gguf_detail::write_llama3_factors(unused, h, weights);
  const Checkpoint checkpoint(model_dir(model));
  std::vector<NamedTensor> tensors;
  for (const TensorInfo& info : checkpoint.tensors()) {
    EXPECT_EQ(info.dtype, DType::kF32) << info.name;
    const auto* f = reinterpret_cast<const float*>(checkpoint.tensor(info.name).bytes.data());
    std::vector<NamedTensor> written;
    if (info.name.ends_with("_proj.weight")) {
      Fp8FolderOptions real = options;
      real.unit_scales = false;  // the reference keeps the real values either way
      std::vector<double> unused_deq;
      written = d::quantize(info.name, f, info.shape[0], info.shape[1], real, weights[info.name]);
      if (options.unit_scales) written = d::quantize(info.name, f, info.shape[0], info.shape[1], options, unused_deq);
    } else {
      std::vector<float> v(f, f + info.num_elements());
      weights[info.name].assign(v.begin(), v.end());
      written.push_back(d::f32_tensor(info.name, info.shape, v));
    }
    for (NamedTensor& t : written) {
      if (!options.edit || options.edit(t)) tensors.push_back(std::move(t));
    }
  }
  write_safetensors(dir / "model.safetensors", tensors);
  return weights;
}

}  // namespace spindle::testing
