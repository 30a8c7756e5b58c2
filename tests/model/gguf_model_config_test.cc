// gguf::HyperParams -> ModelConfig, including the Llama-3 RoPE parameters recovered from the
// rope_freqs.weight factors. The factors are made here in float64 from the scaling's definition
// (transformers' _compute_llama3_parameters: keep short wavelengths, divide long ones by factor,
// interpolate in between) and rounded to f32 as llama.cpp's converter stores them.
#include "model/gguf_model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "model/llama32_1b_expectations.h"
#include "util/error.h"

namespace spindle {
namespace {

std::vector<float> llama3_factors(int head_dim, double theta, double factor, double low,
                                  double high, double old_len) {
  std::vector<float> out;
  for (int i = 0; i < head_dim; i += 2) {
    const double freq = 1.0 / std::pow(theta, static_cast<double>(i) / head_dim);
    const double wavelen = 2 * std::numbers::pi / freq;
    double f = factor;
    if (wavelen < old_len / high) {
      f = 1;
    } else if (wavelen <= old_len / low) {
      const double smooth = (old_len / wavelen - low) / (high - low);
      f = 1 / ((1 - smooth) / factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

gguf::HyperParams llama_params() {
  gguf::HyperParams hp;
  hp.architecture = "llama";
  hp.rope_layout = gguf::RopeLayout::kInterleaved;
  hp.context_length = 131072;
  hp.embedding_length = 2048;
  hp.block_count = 16;
  hp.feed_forward_length = 8192;
  hp.head_count = 32;
  hp.head_count_kv = 8;
  hp.key_length = hp.value_length = hp.rope_dimension_count = 64;
  hp.vocab_size = 128256;
  hp.rms_norm_eps = 1e-5;
  hp.rope_freq_base = 500000;
  hp.tied_embeddings = true;
  hp.bos_token_id = 128000;
  hp.eos_token_id = 128009;
  hp.file_type = 32;
  return hp;
}

TEST(GgufModelConfig, FieldsMapOneToOne) {
  const ModelConfig c = model_config_from_gguf(llama_params(), "m.gguf");
  testing::expect_llama32_1b_shape(c);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kNone);  // no rope_freqs.weight here
  EXPECT_EQ(c.eos_token_ids, std::vector<TokenId>{128009});

  gguf::HyperParams qwen = llama_params();
  qwen.architecture = "qwen3";
  qwen.qk_norm = true;
  qwen.file_type = 15;  // Q4_K_M
  qwen.rope_scaling = gguf::RopeScalingType::kLinear;
  qwen.rope_scaling_factor = 4;
  const ModelConfig q = model_config_from_gguf(qwen, "q.gguf");
  EXPECT_EQ(q.architecture, Architecture::kQwen3);
  EXPECT_TRUE(q.qk_norm);
  EXPECT_EQ(q.torch_dtype, DType::kF32);
  EXPECT_EQ(q.rope_scaling.type, RopeScaling::kLinear);
  EXPECT_EQ(q.rope_scaling.factor, 4);
}

// Llama 3.1 (head_dim 128, factor 8) and Llama 3.2 (head_dim 64, factor 32) as released.
TEST(GgufModelConfig, Llama3ParametersRecoveredFromFactors) {
  struct Case { int head_dim; double factor, low, high, old_len; };
  for (const Case& k : {Case{128, 8, 1, 4, 8192}, Case{64, 32, 1, 4, 8192}, Case{64, 16, 2, 6, 4096}}) {
    SCOPED_TRACE(k.head_dim * 1000 + k.factor);
    gguf::HyperParams hp = llama_params();
    hp.key_length = hp.value_length = hp.rope_dimension_count = k.head_dim;
    hp.rope_freq_factors = llama3_factors(k.head_dim, 500000, k.factor, k.low, k.high, k.old_len);
    const ModelConfig c = model_config_from_gguf(hp, "m.gguf");
    ASSERT_EQ(c.rope_scaling.type, RopeScaling::kLlama3);
    EXPECT_NEAR(c.rope_scaling.factor, k.factor, 1e-5 * k.factor);  // the f32 maximum
    // Only L / (hi - lo) and lo / (hi - lo) are determined by the factors (1e-4: the f32
    // factors' rounding through the least-squares fit).
    const RopeScaling& s = c.rope_scaling;
    const double span = s.high_freq_factor - s.low_freq_factor;
    EXPECT_NEAR(s.original_max_position_embeddings / span / (k.old_len / (k.high - k.low)), 1.0, 1e-4);
    EXPECT_NEAR(s.low_freq_factor / span, k.low / (k.high - k.low), 1e-4);
    if (k.low == 1 && k.high == 4) {  // the released models: the smallest whole L is theirs
      EXPECT_EQ(s.original_max_position_embeddings, k.old_len);
      EXPECT_NEAR(s.low_freq_factor, k.low, 1e-3);
      EXPECT_NEAR(s.high_freq_factor, k.high, 1e-3);
    }
    // And the recovered scaling gives the file's factors back.
    const auto again = llama3_factors(k.head_dim, 500000, s.factor, s.low_freq_factor,
                                      s.high_freq_factor, s.original_max_position_embeddings);
    for (size_t i = 0; i < again.size(); ++i) {
      EXPECT_NEAR(again[i], hp.rope_freq_factors[i], 1e-4 * again[i]) << i;
    }
  }
}

TEST(GgufModelConfig, FactorsNotOfTheLlama3FormAreErrors) {
  gguf::HyperParams hp = llama_params();
  hp.rope_freq_factors = llama3_factors(64, 500000, 32, 1, 4, 8192);
  hp.rope_freq_factors[20] *= 1.01f;  // one factor off the curve
  try {
    model_config_from_gguf(hp, "m.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("m.gguf: tensor 'rope_freqs.weight': factor "), std::string::npos)
        << e.message();
  }
  hp.rope_freq_factors.assign(32, 1.0f);
  hp.rope_freq_factors.back() = 4.0f;  // a step: no point between 1 and the maximum
  try {
    model_config_from_gguf(hp, "m.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("0 of its factors lie strictly between 1 and the largest"),
              std::string::npos) << e.message();
  }
  hp.rope_freq_factors.assign(32, 1.0f);
  EXPECT_EQ(model_config_from_gguf(hp, "m.gguf").rope_scaling.type, RopeScaling::kNone);
  hp.rope_freq_factors = llama3_factors(64, 500000, 32, 1, 4, 8192);
  hp.rope_scaling = gguf::RopeScalingType::kLinear;
  hp.rope_scaling_factor = 2;
  EXPECT_THROW(model_config_from_gguf(hp, "m.gguf"), Error);
}

}  // namespace
}  // namespace spindle
