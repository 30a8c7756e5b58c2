// Reading FP8 KV-cache scales from a checkpoint (model/kv_scale_tensors.h): every name vLLM loads,
// per-layer (scalar) and per-head shapes, dtypes, and the errors naming the tensor. The expected
// values are the ones written (F32 exactly; BF16 values chosen exact in bf16).
#include "model/kv_scale_tensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "safetensors_writer.h"
#include "util/error.h"
#include "util/half.h"

namespace spindle {
namespace {

using ::testing::HasSubstr;
using testing::NamedTensor;
using testing::TempDir;

NamedTensor f32_tensor(std::string name, std::vector<int64_t> shape, std::vector<float> values) {
  NamedTensor t{std::move(name), DType::kF32, std::move(shape), {}};
  t.data.resize(values.size() * 4);
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

NamedTensor bf16_tensor(std::string name, std::vector<int64_t> shape, std::vector<float> values) {
  NamedTensor t{std::move(name), DType::kBF16, std::move(shape), {}};
  for (float v : values) {
    const uint16_t bits = float_to_bf16_bits(v);
    t.data.push_back(static_cast<std::byte>(bits & 0xff));
    t.data.push_back(static_cast<std::byte>(bits >> 8));
  }
  return t;
}

ModelConfig config_of(int layers, int kv_heads) {
  ModelConfig c;
  c.num_hidden_layers = layers;
  c.num_key_value_heads = kv_heads;
  return c;
}

std::optional<KvScales> read(const std::vector<NamedTensor>& tensors, int layers = 2, int kv_heads = 3) {
  TempDir dir;
  testing::write_safetensors(dir.path() / "model.safetensors", tensors);
  const Checkpoint checkpoint(dir.path());
  return read_checkpoint_kv_scales(checkpoint, config_of(layers, kv_heads));
}

std::string error_of(const std::vector<NamedTensor>& tensors) {
  try {
    read(tensors);
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

TEST(KvScaleTensors, NamesVllmLoads) {
  for (const char* n : {"model.layers.0.self_attn.k_scale", "model.layers.12.self_attn.v_scale",
                        "model.layers.3.self_attn.attn.k_scale", "model.layers.3.self_attn.k_proj.output_scale",
                        "model.layers.3.self_attn.v_proj.output_scale", "model.layers.3.self_attn.kv_scale",
                        "model.layers.3.self_attn.k_proj.k_scale", "model.layers.3.self_attn.v_proj.v_scale"}) {
    EXPECT_TRUE(is_kv_scale_name(n)) << n;
  }
  for (const char* n : {"model.layers.0.self_attn.k_proj.weight_scale", "model.layers.0.self_attn.k_proj.input_scale",
                        "model.layers.0.mlp.k_scale", "lm_head.k_scale", "model.layers.x.self_attn.k_scale"}) {
    EXPECT_FALSE(is_kv_scale_name(n)) << n;
  }
}

TEST(KvScaleTensors, NoneStoredIsNullopt) {
  EXPECT_FALSE(read({f32_tensor("model.norm.weight", {4}, {1, 1, 1, 1})}).has_value());
}

TEST(KvScaleTensors, PerLayerAndPerHeadValuesOfEachNaming) {
  const auto s = read({f32_tensor("model.layers.0.self_attn.k_scale", {}, {0.5f}),
                       f32_tensor("model.layers.0.self_attn.v_scale", {1}, {0.25f}),
                       // layer 1: compressed-tensors' output scales, per head, V in bf16
                       f32_tensor("model.layers.1.self_attn.k_proj.output_scale", {3}, {1.0f, 2.0f, 3.0f}),
                       bf16_tensor("model.layers.1.self_attn.v_proj.output_scale", {3}, {0.125f, 0.75f, 8.0f})});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->source, "checkpoint");
  EXPECT_EQ(s->k, (std::vector<float>{0.5f, 0.5f, 0.5f, 1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(s->v, (std::vector<float>{0.25f, 0.25f, 0.25f, 0.125f, 0.75f, 8.0f}));
  // The deprecated kv_scale: one tensor for K and V.
  const auto old = read({f32_tensor("model.layers.0.self_attn.kv_scale", {}, {0.5f}),
                         f32_tensor("model.layers.1.self_attn.kv_scale", {}, {4.0f})});
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->k, (std::vector<float>{0.5f, 0.5f, 0.5f, 4.0f, 4.0f, 4.0f}));
  EXPECT_EQ(old->v, old->k);
}

TEST(KvScaleTensors, BadScalesNameTheTensor) {
  const NamedTensor k0 = f32_tensor("model.layers.0.self_attn.k_scale", {}, {0.5f});
  const NamedTensor v0 = f32_tensor("model.layers.0.self_attn.v_scale", {}, {0.5f});
  // Layer 1 lacks its pair.
  EXPECT_THAT(error_of({k0, v0}), HasSubstr("layer 1 has no K and V scale pair"));
  EXPECT_THAT(error_of({k0, v0, f32_tensor("model.layers.1.self_attn.k_scale", {2}, {1, 1}),
                        f32_tensor("model.layers.1.self_attn.v_scale", {}, {1})}),
              HasSubstr("tensor model.layers.1.self_attn.k_scale has shape [2]"));
  EXPECT_THAT(error_of({k0, v0, f32_tensor("model.layers.1.self_attn.k_scale", {}, {0.0f}),
                        f32_tensor("model.layers.1.self_attn.v_scale", {}, {1})}),
              HasSubstr("model.layers.1.self_attn.k_scale: KV-cache scale 0"));
  NamedTensor i8{"model.layers.1.self_attn.v_scale", DType::kI8, {}, {std::byte{1}}};
  EXPECT_THAT(error_of({k0, v0, f32_tensor("model.layers.1.self_attn.k_scale", {}, {1}), i8}),
              HasSubstr("is I8; KV-cache scales must be F32, BF16 or F16"));
}

}  // namespace
}  // namespace spindle
