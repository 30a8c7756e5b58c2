// What a Llama-3.2-1B ModelConfig holds, whichever file it came from: the Hugging Face config.json
// (tests/model/model_config_test.cc, its public fields in tests/fixtures/models/llama-3.2-1b) and
// the GGUF conversion's hyperparameters (tests/model/gguf_model_config_test.cc). The RoPE scaling
// and the EOS ids differ between the two sources and are checked by each test.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "model/model_config.h"

namespace spindle::testing {

inline void expect_llama32_1b_shape(const ModelConfig& c) {
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_hidden_layers, 16);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  EXPECT_EQ(c.bos_token_ids, std::vector<TokenId>{128000});
}

}  // namespace spindle::testing
