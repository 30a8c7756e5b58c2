// WeightView: one stored weight as a device places it (DESIGN.md section 8: bytes, type, shape,
// block / scale layout), whatever file it came from; WeightSource: the tensors of a checkpoint by
// the names the transformer uses (weight_map.h), so Transformer places a safetensors folder and a
// GGUF file through one walk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/ggml_type.h"
#include "model/fp8_config.h"
#include "model/safetensors.h"
#include "util/dtype.h"

namespace spindle {

// A weight: `shape` outermost first (a linear weight [out, in] as Hugging Face stores nn.Linear,
// a norm [n], an embedding table [V, H]), its rows back to back in `bytes`. The element encoding
// is a plain dtype (F32, F16, BF16: `block` empty) or a ggml block type (`block` set, `dtype`
// unused): then each row is shape.back() / block_elements() blocks of block_bytes() bytes
// (gguf/ggml_type.h). An FP8 weight (dtype kF8E4M3, e4m3 bytes [out, in]) carries its scale:
// dequantized = fp8 * scale in the scale's mode (fp8_config.h); a source never hands out an FP8
// weight without one.
struct WeightScale {
  std::string name;  // the scale tensor, for errors
  Fp8ScaleMode mode = Fp8ScaleMode::kPerTensor;
  DType dtype = DType::kF32;  // F32, BF16 or F16
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;  // fp8_scale_count(mode) elements, possibly unaligned
  // X.input_scale (a static activation scale, one element) when the checkpoint stores one. No product
  // reads it today (activations are quantized dynamically); joining compares it (model/fp8_join.h).
  std::optional<float> input_scale;
};

struct WeightView {
  std::string name;    // as the file names it, for errors
  std::string source;  // the file or folder, for errors
  DType dtype = DType::kF32;
  std::optional<gguf::GgmlType> block;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
  std::optional<WeightScale> scale;  // FP8 weights only
  // Called by a device that has copied or converted the bytes and will not read them again (a
  // repacked quantized weight): the source may give the range back to the OS. Empty: nothing to do.
  std::function<void()> release;

  bool quantized() const { return block.has_value(); }
  int64_t rows() const;             // shape[0] (1 for a vector)
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  uint64_t num_elements() const;
  int64_t block_elements() const;   // 1 for plain dtypes
  int64_t block_bytes() const;      // dtype_size for plain dtypes
  int64_t row_bytes() const { return cols() / block_elements() * block_bytes(); }
  // "F32", "BF16", "Q4_K", ...
  std::string type_name() const;
  // "<source>: tensor <name>" for errors.
  std::string where() const { return source + ": tensor " + name; }
};

// A safetensors tensor as a WeightView.
WeightView weight_view(const TensorView& view, std::string_view source);

// An FP8 weight's scales as f32: 1 (per-tensor), out (per-channel) or ceil(out/128) * ceil(in/128)
// (block, row-major) floats. Throws naming the weight when it has no scale or the scale's size is
// not that.
std::vector<float> fp8_scales_f32(const WeightView& view);
int64_t fp8_scale_count(Fp8ScaleMode mode, int64_t out, int64_t in);

// A plain (F32, F16, BF16) weight widened to f32, e.g. a bias; throws naming it for a block type.
std::vector<float> weight_to_f32(const WeightView& view);

// The tensors of one checkpoint by the transformer's names (model.layers.{i}.self_attn.q_proj.weight,
// ...), in Hugging Face's layout: a source of another layout converts (a GGUF file's q/k rows
// un-permuted). Views stay valid while the source lives.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The file or folder (errors, logs).
  virtual std::string name() const = 0;
  virtual bool contains(std::string_view hf_name) const = 0;
  // Throws naming the source and the tensor when absent.
  virtual WeightView weight(std::string_view hf_name) = 0;
};

// A safetensors folder (the checkpoint checked against the config by the caller), read in place.
class CheckpointWeights final : public WeightSource {
 public:
  // fp8: the config's quantization_config; an F8_E4M3 weight gets its scale tensor (fp8_weights.h).
  explicit CheckpointWeights(std::unique_ptr<Checkpoint> checkpoint, std::optional<Fp8Quantization> fp8 = {})
      : checkpoint_(std::move(checkpoint)), fp8_(std::move(fp8)) {}
  const Checkpoint& checkpoint() const { return *checkpoint_; }
  std::string name() const override { return checkpoint_->dir().string(); }
  bool contains(std::string_view hf_name) const override { return checkpoint_->find(hf_name) != nullptr; }
  WeightView weight(std::string_view hf_name) override;

 private:
  std::unique_ptr<Checkpoint> checkpoint_;
  std::optional<Fp8Quantization> fp8_;
};

}  // namespace spindle
