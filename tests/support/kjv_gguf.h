// Test support: models/kjv-tiny (a Hugging Face folder: config.json, bf16 model.safetensors,
// tokenizer.json, chat_template.jinja) written as ONE GGUF file, as llama.cpp's converter would
// lay it out, from the formats' definitions (tests/gguf/gguf_test_writer.h):
//   general.architecture llama; llama.* hyper-parameters from config.json
//   tensors: the HF names mapped to llama.cpp's (token_embd, blk.N.attn_q, ...), no output (tied),
//            BF16 as stored or widened to F32 (exact); 1-D norms F32; q/k rows permuted per head
//            (convert_hf_to_gguf.py's permute: [2, D/2] -> [D/2, 2] within each head)
//   tokenizer: ggml.model gpt2, ggml.pre smaug-bpe (the Llama-3 split regex of kjv-tiny's
//            tokenizer.json, merges not skipped, as that tokenizer.json says ignore_merges false),
//            tokens and merges from tokenizer.json, token_type 3 (control) for its special added
//            tokens, bos 0 and add_bos_token (its post-processor prepends <|endoftext|>), eos 0,
//            chat_template from chat_template.jinja.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_test_writer.h"

namespace spindle::testing {

namespace kjv_gguf_detail {

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  const std::vector<std::pair<std::string, std::string>> layer = {
      {"input_layernorm.weight", "attn_norm.weight"}, {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"}, {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  const std::string n = hf.substr(prefix.size(), dot - prefix.size()), suffix = hf.substr(dot + 1);
  for (const auto& [from, to] : layer)
    if (from == suffix) return "blk." + n + "." + to;
  throw std::runtime_error("kjv_gguf: no GGUF name for " + hf);
}

// bf16 bits -> f32 bytes (exact).
inline std::vector<uint8_t> widen_bf16(const uint8_t* p, size_t n) {
  std::vector<uint8_t> out(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = uint32_t{p[2 * i]} << 16 | uint32_t{p[2 * i + 1]} << 24;
    std::memcpy(out.data() + 4 * i, &bits, 4);
  }
  return out;
}

// Rows of each head reordered [2, D/2] -> [D/2, 2] (convert_hf_to_gguf.py's permute).
inline std::vector<uint8_t> permute_rows(const std::vector<uint8_t>& bytes, int64_t rows, int64_t head_dim) {
  const size_t row_bytes = bytes.size() / static_cast<size_t>(rows);
  std::vector<uint8_t> out(bytes.size());
  for (int64_t h = 0; h < rows / head_dim; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < head_dim / 2; ++i)
        std::memcpy(out.data() + (h * head_dim + 2 * i + j) * row_bytes,
                    bytes.data() + (h * head_dim + j * head_dim / 2 + i) * row_bytes, row_bytes);
  return out;
}

// tokenizer.json, its added tokens and the chat template as tokenizer.ggml.* keys.
inline void write_tokenizer(gguf::testing::GgufWriter& w, const std::filesystem::path& dir) {
  using namespace gguf::testing;
  const nlohmann::json t = nlohmann::json::parse(read_file(dir / "tokenizer.json"));
  std::vector<std::string> tokens(t.at("model").at("vocab").size());
  for (const auto& [text, id] : t.at("model").at("vocab").items()) tokens.at(id.get<size_t>()) = text;
  std::vector<int32_t> types(tokens.size(), 1);
  for (const auto& a : t.at("added_tokens")) {
    if (a.at("id").get<size_t>() >= tokens.size()) tokens.resize(a.at("id").get<size_t>() + 1), types.resize(tokens.size(), 1);
    tokens[a.at("id").get<size_t>()] = a.at("content");
    if (a.value("special", false)) types[a.at("id").get<size_t>()] = 3;
  }
  std::vector<std::string> merges;
  for (const auto& m : t.at("model").at("merges"))
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  w.kv_string("tokenizer.ggml.model", "gpt2");
  w.kv_string("tokenizer.ggml.pre", "smaug-bpe");
  w.kv_strings("tokenizer.ggml.tokens", tokens);
  w.kv_array<int32_t>("tokenizer.ggml.token_type", kTI32, types);
  w.kv_strings("tokenizer.ggml.merges", merges);
  w.kv<uint32_t>("tokenizer.ggml.bos_token_id", kTU32, 0);
  w.kv<uint32_t>("tokenizer.ggml.eos_token_id", kTU32, 0);
  w.kv<bool>("tokenizer.ggml.add_bos_token", kTBool, true);
  w.kv_string("tokenizer.chat_template", read_file(dir / "chat_template.jinja"));

}

// The safetensors tensors under llama.cpp's names (q/k rows permuted), BF16 or widened to F32.
inline void write_tensors(gguf::testing::GgufWriter& w, const std::filesystem::path& dir, bool f32, int64_t head_dim) {
  using namespace gguf::testing;
  const std::string st = read_file(dir / "model.safetensors");
  uint64_t header_len = 0;
  std::memcpy(&header_len, st.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(st.substr(8, header_len));
  const auto* data = reinterpret_cast<const uint8_t*>(st.data()) + 8 + header_len;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const auto shape = info.at("shape").get<std::vector<int64_t>>();
    const auto offsets = info.at("data_offsets").get<std::vector<size_t>>();
    const size_t n = (offsets[1] - offsets[0]) / 2;
    const bool plain_f32 = f32 || shape.size() == 1;  // norms F32, as the converter stores them
    std::vector<uint8_t> bytes = plain_f32 ? widen_bf16(data + offsets[0], n)
                                           : std::vector<uint8_t>(data + offsets[0], data + offsets[1]);
    if (name.find("q_proj") != std::string::npos || name.find("k_proj") != std::string::npos)
      bytes = permute_rows(bytes, shape[0], head_dim);
    std::vector<uint64_t> ne(shape.rbegin(), shape.rend());
    w.tensor(TestTensor(gguf_name(name), plain_f32 ? 0u : 30u, ne, std::move(bytes)));
  }
}

}  // namespace kjv_gguf_detail

inline void write_kjv_tiny_gguf(const std::filesystem::path& dir, const std::filesystem::path& out, bool f32) {
  namespace d = kjv_gguf_detail;
  using namespace gguf::testing;
  const nlohmann::json c = nlohmann::json::parse(d::read_file(dir / "config.json"));
  const int64_t head_dim = c.at("head_dim");
  GgufWriter w;
  w.kv_string("general.architecture", "llama");
  w.kv_string("general.name", "kjv-tiny");
  w.kv<uint32_t>("general.file_type", kTU32, f32 ? 0u : 32u);
  w.kv<uint32_t>("llama.context_length", kTU32, c.at("max_position_embeddings").get<uint32_t>());
  w.kv<uint32_t>("llama.embedding_length", kTU32, c.at("hidden_size").get<uint32_t>());
  w.kv<uint32_t>("llama.block_count", kTU32, c.at("num_hidden_layers").get<uint32_t>());
  w.kv<uint32_t>("llama.feed_forward_length", kTU32, c.at("intermediate_size").get<uint32_t>());
  w.kv<uint32_t>("llama.attention.head_count", kTU32, c.at("num_attention_heads").get<uint32_t>());
  w.kv<uint32_t>("llama.attention.head_count_kv", kTU32, c.at("num_key_value_heads").get<uint32_t>());
  w.kv<uint32_t>("llama.attention.key_length", kTU32, static_cast<uint32_t>(head_dim));
  w.kv<uint32_t>("llama.attention.value_length", kTU32, static_cast<uint32_t>(head_dim));
  w.kv<float>("llama.attention.layer_norm_rms_epsilon", kTF32, c.at("rms_norm_eps").get<float>());
  w.kv<float>("llama.rope.freq_base", kTF32, c.at("rope_parameters").at("rope_theta").get<float>());
  w.kv<uint32_t>("llama.rope.dimension_count", kTU32, static_cast<uint32_t>(head_dim));

  d::write_tokenizer(w, dir);
  d::write_tensors(w, dir, f32, head_dim);
  w.write(out);
}

}  // namespace spindle::testing
