// Writes a random-weight bf16 Llama checkpoint folder (config.json + model.safetensors) for
// benchmarks: no download, no torch. Tensors are written in name order, as Hugging Face's writer
// does (so gate_proj and up_proj lie back to back). Weights are uniform with standard deviation
// 1/sqrt(fan_in) (activations stay O(1), no denormals); norm weights are 1.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace spindle::bench {

struct BenchModelShape {
  int vocab_size = 128256;
  int hidden_size = 2048;
  int intermediate_size = 8192;
  int num_hidden_layers = 16;
  int num_attention_heads = 32;
  int num_key_value_heads = 8;
  int head_dim = 64;
  bool tie_word_embeddings = true;
  int max_position_embeddings = 131072;
  double rope_theta = 500000.0;
};

// A fresh folder under the system temp dir, removed (with its contents) by the destructor.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("spindle_bench_model_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Llama-3.2-1B's shape (the defaults above).
inline BenchModelShape llama_3_2_1b_shape() { return {}; }

// Returns the bytes of tensor data written.
inline uint64_t write_bench_model(const std::filesystem::path& dir, const BenchModelShape& s, uint64_t seed = 1) {
  std::filesystem::create_directories(dir);
  nlohmann::json config = {
      {"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
      {"vocab_size", s.vocab_size}, {"hidden_size", s.hidden_size},
      {"intermediate_size", s.intermediate_size}, {"num_hidden_layers", s.num_hidden_layers},
      {"num_attention_heads", s.num_attention_heads}, {"num_key_value_heads", s.num_key_value_heads},
      {"head_dim", s.head_dim}, {"max_position_embeddings", s.max_position_embeddings},
      {"rms_norm_eps", 1e-5}, {"hidden_act", "silu"}, {"tie_word_embeddings", s.tie_word_embeddings},
      {"torch_dtype", "bfloat16"}, {"bos_token_id", 0}, {"eos_token_id", 1},
      {"rope_theta", s.rope_theta},
      {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}}};
  std::ofstream(dir / "config.json") << config.dump(2);

  struct Spec {
    std::vector<int64_t> shape;
    bool norm = false;
  };
  const int64_t h = s.hidden_size, im = s.intermediate_size, d = s.head_dim;
  std::map<std::string, Spec> specs;  // sorted by name
  specs["model.embed_tokens.weight"] = {{s.vocab_size, h}};
  specs["model.norm.weight"] = {{h}, true};
  if (!s.tie_word_embeddings) specs["lm_head.weight"] = {{s.vocab_size, h}};
  for (int i = 0; i < s.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    specs[p + "input_layernorm.weight"] = {{h}, true};
    specs[p + "post_attention_layernorm.weight"] = {{h}, true};
    specs[p + "self_attn.q_proj.weight"] = {{s.num_attention_heads * d, h}};
    specs[p + "self_attn.k_proj.weight"] = {{s.num_key_value_heads * d, h}};
    specs[p + "self_attn.v_proj.weight"] = {{s.num_key_value_heads * d, h}};
    specs[p + "self_attn.o_proj.weight"] = {{h, s.num_attention_heads * d}};
    specs[p + "mlp.gate_proj.weight"] = {{im, h}};
    specs[p + "mlp.up_proj.weight"] = {{im, h}};
    specs[p + "mlp.down_proj.weight"] = {{h, im}};
  }
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, spec] : specs) {
    uint64_t n = 1;
    for (const int64_t x : spec.shape) n *= static_cast<uint64_t>(x);
    header[name] = {{"dtype", "BF16"}, {"shape", spec.shape}, {"data_offsets", {offset, offset + 2 * n}}};
    offset += 2 * n;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';

  std::ofstream out(dir / "model.safetensors", std::ios::binary | std::ios::trunc);
  SPINDLE_CHECK(out.good(), "cannot write {}", (dir / "model.safetensors").string());
  const uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<uint16_t> buf;
  uint64_t tensor_index = 0;
  for (const auto& [name, spec] : specs) {
    uint64_t n = 1;
    for (const int64_t x : spec.shape) n *= static_cast<uint64_t>(x);
    buf.resize(n);
    if (spec.norm) {
      std::fill(buf.begin(), buf.end(), float_to_bf16_bits(1.0f));
    } else {
      const float amplitude = std::sqrt(3.0f / static_cast<float>(spec.shape.back()));
      const int64_t chunks = 64;
      ThreadPool::global().parallel_for(chunks, [&](int64_t c) {
        uint64_t x = (seed + 0x9e3779b97f4a7c15ull * (tensor_index * chunks + c + 1)) | 1;
        for (uint64_t i = c * n / chunks; i < (c + 1) * n / chunks; ++i) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
          const float u = static_cast<float>(x >> 40) * (1.0f / 16777216.0f);  // [0, 1)
          buf[i] = float_to_bf16_bits(amplitude * (2.0f * u - 1.0f));
        }
      });
    }
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(2 * n));
    ++tensor_index;
  }
  SPINDLE_CHECK(out.good(), "cannot write {}", (dir / "model.safetensors").string());
  return offset;
}

}  // namespace spindle::bench
