// Hyper-parameters through the per-architecture key tables, from files written by the independent
// test writer, and from the llama.cpp snapshot's llama-spm vocabulary file against the Python
// reader's values.
#include "gguf/gguf_hparams.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "gguf_test_writer.h"
#include "support/gunzipped_file.h"
#include "util/error.h"

namespace spindle::gguf {
namespace {

using testing::GgufWriter;
namespace t = testing;

class GgufHparams : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("spindle_gguf_hp_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A complete model description for `arch`, without tensors.
  static GgufWriter model(std::string_view arch) {
    GgufWriter w;
    const std::string a(arch);
    w.kv_string("general.architecture", arch);
    w.kv<uint32_t>(a + ".context_length", t::kTU32, 4096);
    w.kv<uint32_t>(a + ".embedding_length", t::kTU32, 256);
    w.kv<uint32_t>(a + ".block_count", t::kTU32, 3);
    w.kv<uint32_t>(a + ".feed_forward_length", t::kTU32, 688);
    w.kv<uint32_t>(a + ".attention.head_count", t::kTU32, 8);
    w.kv<uint32_t>(a + ".attention.head_count_kv", t::kTU32, 2);
    w.kv<float>(a + ".attention.layer_norm_rms_epsilon", t::kTF32, 1e-5f);
    w.kv<float>(a + ".rope.freq_base", t::kTF32, 500000.0f);
    w.kv_strings("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e"});
    w.kv<uint32_t>("tokenizer.ggml.bos_token_id", t::kTU32, 1);
    w.kv<uint32_t>("tokenizer.ggml.eos_token_id", t::kTU32, 2);
    return w;
  }

  HyperParams read(const GgufWriter& w) {
    const auto path = dir_ / "m.gguf";
    w.write(path);
    return read_hyper_params(GgufFile(path));
  }

  std::string error(const GgufWriter& w) {
    try {
      read(w);
    } catch (const Error& e) {
      return e.message();
    }
    return "no error";
  }

  std::filesystem::path dir_;
};

TEST_F(GgufHparams, LlamaWithDefaults) {
  GgufWriter w = model("llama");
  w.kv<uint32_t>("general.file_type", t::kTU32, 7);
  w.tensor({"token_embd.weight", 0, {256, 5}, std::vector<uint8_t>(256 * 5 * 4)});
  const HyperParams hp = read(w);
  EXPECT_EQ(hp.architecture, "llama");
  EXPECT_EQ(hp.rope_layout, RopeLayout::kInterleaved);
  EXPECT_FALSE(hp.attention_bias);
  EXPECT_FALSE(hp.qk_norm);
  EXPECT_EQ(hp.context_length, 4096);
  EXPECT_EQ(hp.embedding_length, 256);
  EXPECT_EQ(hp.block_count, 3);
  EXPECT_EQ(hp.feed_forward_length, 688);
  EXPECT_EQ(hp.head_count, 8);
  EXPECT_EQ(hp.head_count_kv, 2);
  EXPECT_EQ(hp.key_length, 32);  // 256 / 8
  EXPECT_EQ(hp.value_length, 32);
  EXPECT_EQ(hp.rope_dimension_count, 32);
  EXPECT_EQ(hp.rms_norm_eps, static_cast<double>(1e-5f));
  EXPECT_EQ(hp.rope_freq_base, 500000.0);
  EXPECT_EQ(hp.rope_scaling, RopeScalingType::kNone);
  EXPECT_TRUE(hp.rope_freq_factors.empty());
  EXPECT_EQ(hp.vocab_size, 5);
  EXPECT_TRUE(hp.tied_embeddings);
  EXPECT_EQ(hp.bos_token_id, 1);
  EXPECT_EQ(hp.eos_token_id, 2);
  EXPECT_EQ(hp.file_type, 7);
}

TEST_F(GgufHparams, QwenArchitecturesKeepNeoxLayout) {
  for (const char* arch : {"qwen2", "qwen3"}) {
    GgufWriter w = model(arch);
    w.kv<uint32_t>(std::string(arch) + ".attention.key_length", t::kTU32, 64);
    w.kv<uint32_t>(std::string(arch) + ".attention.value_length", t::kTU32, 64);
    w.kv<uint32_t>(std::string(arch) + ".rope.dimension_count", t::kTU32, 64);
    w.tensor({"token_embd.weight", 0, {256, 5}, std::vector<uint8_t>(256 * 5 * 4)});
    w.tensor({"output.weight", 0, {256, 5}, std::vector<uint8_t>(256 * 5 * 4)});
    const HyperParams hp = read(w);
    EXPECT_EQ(hp.architecture, arch);
    EXPECT_EQ(hp.rope_layout, RopeLayout::kNeox);
    EXPECT_EQ(hp.attention_bias, std::string_view(arch) == "qwen2");
    EXPECT_EQ(hp.qk_norm, std::string_view(arch) == "qwen3");
    EXPECT_EQ(hp.key_length, 64);
    EXPECT_FALSE(hp.tied_embeddings);
  }
}

// qwen3moe, qwen2moe and llama with experts (Mixtral): counts, widths (llama.cpp's defaults when
// a key is absent), renormalization, and the dense blocks (those without a router).
TEST_F(GgufHparams, MixturesOfExperts) {
  const auto router = [](int block, uint64_t experts) {
    return t::TestTensor("blk." + std::to_string(block) + ".ffn_gate_inp.weight", 0, {256, experts},
                         std::vector<uint8_t>(256 * experts * 4));
  };
  GgufWriter q3 = model("qwen3moe");
  q3.kv<uint32_t>("qwen3moe.expert_count", t::kTU32, 8);
  q3.kv<uint32_t>("qwen3moe.expert_used_count", t::kTU32, 2);
  q3.kv<uint32_t>("qwen3moe.expert_feed_forward_length", t::kTU32, 128);
  q3.tensor(router(0, 8));
  q3.tensor(router(2, 8));
  HyperParams hp = read(q3);
  EXPECT_EQ(hp.architecture, "qwen3moe");
  EXPECT_TRUE(hp.qk_norm);
  EXPECT_FALSE(hp.attention_bias);
  EXPECT_EQ(hp.expert_count, 8);
  EXPECT_EQ(hp.expert_used_count, 2);
  EXPECT_EQ(hp.expert_feed_forward_length, 128);
  EXPECT_EQ(hp.expert_shared_feed_forward_length, 0);
  EXPECT_TRUE(hp.expert_weights_norm);
  EXPECT_EQ(hp.dense_blocks, std::vector<int64_t>{1});

  GgufWriter q2 = model("qwen2moe");
  q2.kv<uint32_t>("qwen2moe.expert_count", t::kTU32, 4);
  q2.kv<uint32_t>("qwen2moe.expert_used_count", t::kTU32, 2);
  for (int b = 0; b < 3; ++b) q2.tensor(router(b, 4));
  hp = read(q2);
  EXPECT_TRUE(hp.attention_bias);
  EXPECT_EQ(hp.expert_feed_forward_length, 688 / 2);  // feed_forward_length / expert_used_count
  EXPECT_EQ(hp.expert_shared_feed_forward_length, 688);
  EXPECT_FALSE(hp.expert_weights_norm);
  EXPECT_TRUE(hp.dense_blocks.empty());
  q2.kv<uint8_t>("qwen2moe.expert_weights_norm", t::kTBool, 1);
  q2.kv<uint32_t>("qwen2moe.expert_shared_feed_forward_length", t::kTU32, 512);
  hp = read(q2);
  EXPECT_TRUE(hp.expert_weights_norm);
  EXPECT_EQ(hp.expert_shared_feed_forward_length, 512);

  GgufWriter mixtral = model("llama");
  mixtral.kv<uint32_t>("llama.expert_count", t::kTU32, 8);
  mixtral.kv<uint32_t>("llama.expert_used_count", t::kTU32, 2);
  mixtral.kv<uint32_t>("llama.attention.sliding_window", t::kTU32, 4096);  // (the whole context: full)
  for (int b = 0; b < 3; ++b) mixtral.tensor(router(b, 8));
  hp = read(mixtral);
  EXPECT_EQ(hp.rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(hp.expert_feed_forward_length, 688);
  EXPECT_TRUE(hp.expert_weights_norm);
  EXPECT_EQ(hp.expert_count, 8);
}

TEST_F(GgufHparams, LinearScalingAndLlama3Factors) {
  GgufWriter linear = model("qwen2");
  linear.kv_string("qwen2.rope.scaling.type", "linear");
  linear.kv<float>("qwen2.rope.scaling.factor", t::kTF32, 4.0f);
  EXPECT_EQ(read(linear).rope_scaling, RopeScalingType::kLinear);
  EXPECT_EQ(read(linear).rope_scaling_factor, 4.0);

  GgufWriter legacy = model("llama");
  legacy.kv<float>("llama.rope.scale_linear", t::kTF32, 2.0f);
  EXPECT_EQ(read(legacy).rope_scaling, RopeScalingType::kLinear);
  EXPECT_EQ(read(legacy).rope_scaling_factor, 2.0);

  GgufWriter none = model("llama");
  none.kv_string("llama.rope.scaling.type", "none");
  none.kv<float>("llama.rope.scaling.factor", t::kTF32, 8.0f);
  EXPECT_EQ(read(none).rope_scaling, RopeScalingType::kNone);

  GgufWriter freqs = model("llama");
  std::vector<float> factors(16);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.5f * i;
  std::vector<uint8_t> bytes(factors.size() * 4);
  std::memcpy(bytes.data(), factors.data(), bytes.size());
  freqs.tensor({"rope_freqs.weight", 0, {16}, bytes});
  EXPECT_EQ(read(freqs).rope_freq_factors, factors);
}

struct HpCase {
  std::string name;
  std::function<void(GgufWriter&)> edit;
  std::string expected;  // a substring of the message
};

TEST_F(GgufHparams, ErrorsNameTheKey) {
  const std::vector<HpCase> cases{
      {"unsupported_arch", [](GgufWriter& w) { w = model("gpt2"); },
       "metadata key 'general.architecture' is 'gpt2', which Spindle does not support "
       "(supported: llama, qwen2, qwen3, qwen2moe, qwen3moe)"},
      {"no_arch", [](GgufWriter& w) { w = GgufWriter(); },
       "missing metadata key 'general.architecture'"},
      {"missing_block_count",
       [](GgufWriter& w) {
         GgufWriter m;
         m.kv_string("general.architecture", "llama");
         m.kv<uint32_t>("llama.context_length", t::kTU32, 16);
         m.kv<uint32_t>("llama.embedding_length", t::kTU32, 16);
         w = m;
       },
       "missing metadata key 'llama.block_count'"},
      {"wrong_type", [](GgufWriter& w) {
         w = model("qwen3");
         w.kv_string("qwen3.attention.key_length", "64");
       }, "metadata key 'qwen3.attention.key_length' holds a string, expected an integer"},
      {"yarn", [](GgufWriter& w) {
         w.kv_string("llama.rope.scaling.type", "yarn");
         w.kv<float>("llama.rope.scaling.factor", t::kTF32, 4.0f);
       }, "metadata key 'llama.rope.scaling.type' is 'yarn'"},
      {"longrope", [](GgufWriter& w) { w.kv_string("llama.rope.scaling.type", "longrope"); },
       "metadata key 'llama.rope.scaling.type' is 'longrope'"},
      {"attn_factor", [](GgufWriter& w) {
         w.kv<float>("llama.rope.scaling.attn_factor", t::kTF32, 1.2f);
       }, "metadata key 'llama.rope.scaling.attn_factor' is 1.2"},
      {"partial_rope", [](GgufWriter& w) {
         w.kv<uint32_t>("llama.rope.dimension_count", t::kTU32, 16);
       }, "metadata key 'llama.rope.dimension_count' = 16 with head size 32"},
      {"eps_missing", [](GgufWriter& w) {
         GgufWriter m;
         m.kv_string("general.architecture", "llama");
         for (const char* key : {"context_length", "embedding_length", "block_count",
                                 "feed_forward_length", "attention.head_count"}) {
           m.kv<uint32_t>(std::string("llama.") + key, t::kTU32, 64);
         }
         w = m;
       }, "missing metadata key 'llama.attention.layer_norm_rms_epsilon'"},
      {"mixtral_used_missing", [](GgufWriter& w) { w.kv<uint32_t>("llama.expert_count", t::kTU32, 8); },
       "missing metadata key 'llama.expert_used_count'"},
      {"mixtral_used_exceeds", [](GgufWriter& w) {
         w.kv<uint32_t>("llama.expert_count", t::kTU32, 8);
         w.kv<uint32_t>("llama.expert_used_count", t::kTU32, 9);
       }, "metadata key 'llama.expert_used_count' = 9 exceeds 'llama.expert_count' = 8"},
      {"dense_qwen3_with_experts", [](GgufWriter& w) {
         w = model("qwen3");
         w.kv<uint32_t>("qwen3.expert_count", t::kTU32, 8);
       }, "metadata key 'qwen3.expert_count' is 8: architecture 'qwen3' has no mixture-of-experts form"},
      {"qwen3moe_without_experts", [](GgufWriter& w) { w = model("qwen3moe"); },
       "missing metadata key 'qwen3moe.expert_count'"},
      {"sliding_window", [](GgufWriter& w) {
         w.kv<uint32_t>("llama.attention.sliding_window", t::kTU32, 1024);
       }, "metadata key 'llama.attention.sliding_window' is 1024, smaller than the context length 4096: "
          "sliding-window attention is not supported"},
      {"sliding_window_moe", [](GgufWriter& w) {
         w = model("qwen2moe");
         w.kv<uint32_t>("qwen2moe.attention.sliding_window", t::kTU32, 4095);
       }, "metadata key 'qwen2moe.attention.sliding_window' is 4095"},
      {"gating_sigmoid", [](GgufWriter& w) {
         w.kv<uint32_t>("llama.expert_count", t::kTU32, 8);
         w.kv<uint32_t>("llama.expert_used_count", t::kTU32, 2);
         w.kv<uint32_t>("llama.expert_gating_func", t::kTU32, 2);
       }, "metadata key 'llama.expert_gating_func' is 2: Spindle routes with a softmax (1) only"},
      {"weights_scale", [](GgufWriter& w) {
         w.kv<uint32_t>("llama.expert_count", t::kTU32, 8);
         w.kv<uint32_t>("llama.expert_used_count", t::kTU32, 2);
         w.kv<float>("llama.expert_weights_scale", t::kTF32, 2.5f);
       }, "metadata key 'llama.expert_weights_scale' is 2.5"},
      {"mixtral_unnormalized", [](GgufWriter& w) {
         w.kv<uint32_t>("llama.expert_count", t::kTU32, 8);
         w.kv<uint32_t>("llama.expert_used_count", t::kTU32, 2);
         w.kv<uint8_t>("llama.expert_weights_norm", t::kTBool, 0);
       }, "metadata key 'llama.expert_weights_norm' is false"},
      {"moe_without_routers", [](GgufWriter& w) {
         w = model("qwen3moe");
         w.kv<uint32_t>("qwen3moe.expert_count", t::kTU32, 8);
         w.kv<uint32_t>("qwen3moe.expert_used_count", t::kTU32, 2);
       }, "metadata key 'qwen3moe.expert_count' is 8, but no block has a router (tensor 'blk.N.ffn_gate_inp.weight')"},
      {"control_unedited_is_valid", [](GgufWriter&) {}, "no error"},
      {"rope_freqs_shape", [](GgufWriter& w) {
         w.tensor({"rope_freqs.weight", 0, {8}, std::vector<uint8_t>(32)});
       }, "tensor 'rope_freqs.weight' is F32 with 8 elements, expected F32 [16]"},
      {"rope_freqs_zero", [](GgufWriter& w) {
         w.tensor({"rope_freqs.weight", 0, {16}, std::vector<uint8_t>(64)});
       }, "tensor 'rope_freqs.weight': factor 0 is 0"},
      {"embedding_width", [](GgufWriter& w) {
         w.tensor({"token_embd.weight", 0, {128, 5}, std::vector<uint8_t>(128 * 5 * 4)});
       }, "tensor 'token_embd.weight' has ne[0] = 128, but embedding_length is 256"},
      {"block_count_zero", [](GgufWriter& w) {
         GgufWriter m;
         m.kv_string("general.architecture", "llama");
         m.kv<uint32_t>("llama.context_length", t::kTU32, 16);
         m.kv<uint32_t>("llama.embedding_length", t::kTU32, 16);
         m.kv<int32_t>("llama.block_count", t::kTI32, 0);
         w = m;
       }, "metadata key 'llama.block_count' is 0 (must be 1 to 2147483647)"},
  };
  for (const HpCase& c : cases) {
    GgufWriter w = model("llama");
    c.edit(w);
    const std::string message = error(w);
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": " << message;
    if (c.expected != "no error") {
      EXPECT_NE(message.find("m.gguf"), std::string::npos) << c.name << ": " << message;
    }
  }
}

TEST_F(GgufHparams, KvHeadsMustDivideHeads) {
  GgufWriter w;
  w.kv_string("general.architecture", "llama");
  for (const auto& [key, value] : std::vector<std::pair<std::string, uint32_t>>{
           {"context_length", 64}, {"embedding_length", 64}, {"block_count", 1},
           {"feed_forward_length", 64}, {"attention.head_count", 4},
           {"attention.head_count_kv", 3}}) {
    w.kv<uint32_t>("llama." + key, t::kTU32, value);
  }
  w.kv<float>("llama.attention.layer_norm_rms_epsilon", t::kTF32, 1e-6f);
  EXPECT_NE(error(w).find("'llama.attention.head_count_kv' = 3 does not divide "
                          "'llama.attention.head_count' = 4"), std::string::npos) << error(w);
}

// llama.cpp's converter (conversion/llama.py, LlamaModel.permute) reorders q/k rows by
// reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2).reshape(rows, cols); here that numpy
// recipe is spelled out as index arithmetic over a [n_head, 2, half] array viewed as
// [n_head, half, 2] after the swap, and interleaved_rope_row must find each HF row in the result.
TEST(GgufRopeLayout, InterleavedRowUndoesTheConverterPermutation) {
  for (const int64_t head_dim : {2, 8, 64, 128}) {
    const int64_t heads = 3;
    const int64_t half = head_dim / 2;
    std::vector<int64_t> permuted(heads * head_dim);  // permuted[new row] = HF row it holds
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t a = 0; a < half; ++a) {    // axis 1 after the swap (was axis 2)
        for (int64_t b = 0; b < 2; ++b) {     // axis 2 after the swap (was axis 1)
          const int64_t new_row = (h * half + a) * 2 + b;
          const int64_t old_row = (h * 2 + b) * half + a;
          permuted[new_row] = old_row;
        }
      }
    }
    for (int64_t hf = 0; hf < heads * head_dim; ++hf) {
      EXPECT_EQ(permuted[interleaved_rope_row(hf, head_dim)], hf) << head_dim << " " << hf;
    }
  }
  EXPECT_THROW(interleaved_rope_row(0, 3), Error);
}

// The llama.cpp snapshot's llama-spm vocabulary file carries a llama model's hyper-parameters;
// the expected values are the Python reader's (tests/golden/gguf/*.expected.json).
TEST(GgufHparamsVocab, LlamaSpmMatchesTheIndependentReader) {
  const std::filesystem::path dir = std::filesystem::path(SPINDLE_SOURCE_DIR) / "tests/golden/gguf";
  std::ifstream in(dir / "ggml-vocab-llama-spm.gguf.expected.json");
  ASSERT_TRUE(in);
  const auto expected = nlohmann::json::parse(in);
  auto value = [&](std::string_view key) -> nlohmann::json {
    for (const auto& kv : expected["metadata"]) {
      if (kv["key"] == key) return kv["value"];
    }
    return nullptr;
  };
  const spindle::testing::GunzippedFile unpacked(dir / "ggml-vocab-llama-spm.gguf.gz");  // stored gzip-compressed
  const HyperParams hp = read_hyper_params(GgufFile(unpacked.path()));
  EXPECT_EQ(hp.architecture, "llama");
  EXPECT_EQ(hp.block_count, value("llama.block_count").get<int64_t>());
  EXPECT_EQ(hp.context_length, value("llama.context_length").get<int64_t>());
  EXPECT_EQ(hp.embedding_length, value("llama.embedding_length").get<int64_t>());
  EXPECT_EQ(hp.feed_forward_length, value("llama.feed_forward_length").get<int64_t>());
  EXPECT_EQ(hp.head_count, value("llama.attention.head_count").get<int64_t>());
  EXPECT_EQ(hp.head_count_kv, value("llama.attention.head_count_kv").get<int64_t>());
  EXPECT_EQ(hp.rope_dimension_count, value("llama.rope.dimension_count").get<int64_t>());
  EXPECT_EQ(hp.rms_norm_eps, value("llama.attention.layer_norm_rms_epsilon").get<double>());
  EXPECT_EQ(hp.vocab_size, value("tokenizer.ggml.tokens")["count"].get<int64_t>());
  EXPECT_EQ(hp.bos_token_id, value("tokenizer.ggml.bos_token_id").get<int64_t>());
  EXPECT_EQ(hp.eos_token_id, value("tokenizer.ggml.eos_token_id").get<int64_t>());
  EXPECT_EQ(hp.rope_layout, RopeLayout::kInterleaved);
}

}  // namespace
}  // namespace spindle::gguf
