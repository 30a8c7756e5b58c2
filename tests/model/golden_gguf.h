// Test support: a Hugging Face golden checkpoint (tests/golden/<model>, F32 or BF16 safetensors)
// written as a GGUF file the way llama.cpp's convert_hf_to_gguf.py lays one out, written here from
// the format's definition (tests/gguf/gguf_test_writer.h), and the float64 weights that file holds.
//
//   general.architecture   llama (LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM), qwen2,
//                          qwen3, qwen2moe (Qwen2MoeForCausalLM), qwen3moe (Qwen3MoeForCausalLM)
//   {arch}.*               context_length, embedding_length, block_count, feed_forward_length,
//                          attention.head_count / head_count_kv / key_length / value_length /
//                          layer_norm_rms_epsilon, rope.freq_base, rope.dimension_count
//   tensors                token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v (+ .bias),
//                          attn_output, attn_q_norm, attn_k_norm, ffn_norm, ffn_gate, ffn_up,
//                          ffn_down}, output_norm, output (absent when tied); ne = {cols, rows}
//   mixtures of experts    {arch}.expert_count, expert_used_count, expert_feed_forward_length
//                          (qwen*), expert_shared_feed_forward_length (qwen2moe),
//                          expert_weights_norm (qwen*: norm_topk_prob); per sparse layer
//                          blk.N.ffn_gate_inp (the router, kept in the checkpoint's type as
//                          llama-quantize keeps it), ffn_{gate,up,down}_exps: the experts' 2-D
//                          weights stacked in expert order (ne {H, F, E} / {F, H, E}), and
//                          qwen2moe's ffn_{gate,up,down}_shexp and ffn_gate_inp_shexp (F32 {H});
//                          dense layers (mlp_only_layers) keep ffn_gate/up/down
//   BF16 checkpoints       2-D tensors stay BF16 bit for bit (file_type 32); 1-D ones become F32
//   llama q/k rows         permuted per head as the converter's permute() defines it: the rows
//                          of each head reshaped to [2, D/2] and transposed to [D/2, 2], so GGUF
//                          row h*D + 2i + j holds HF row h*D + j*D/2 + i (permute_qk = false
//                          writes them unpermuted: the negative control).
// Quantized files: every 2-D tensor in `type` where its rows are a whole number of blocks, else
// Q8_0 (the golden models' hidden size 128 is not a multiple of the K types' 256, as llama-quantize
// falls back for such rows); the blocks come from tests/model/gguf_quantize.h. The dequantized
// weights (tests/gguf/ggml_reference.h, float64) are returned in the HF layout for a reference
// forward.
#pragma once

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gguf/ggml_reference.h"
#include "gguf/gguf_test_writer.h"
#include "model/gguf_quantize.h"
#include "model/golden_fixtures.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weight_map.h"

namespace spindle::testing {

struct GoldenGgufOptions {
  std::optional<gguf::GgmlType> type;  // none: F32 throughout
  bool permute_qk = true;
  // false: the embedding table stays F32 while the other 2-D tensors take `type` (what
  // --quantization q8_0 makes of a checkpoint: linear weights only).
  bool quantize_embedding = true;
  // true: only the routed experts (ffn_*_exps) take `type`; the other tensors keep the checkpoint's.
  bool experts_only = false;
  // Called with each tensor before it is written (bad files for the error tests); false drops it.
  std::function<bool(gguf::testing::TestTensor&)> edit;
};

// The weights a converted file holds, as float64 in the Hugging Face layout (name -> row-major).
using Float64Weights = std::map<std::string, std::vector<double>>;

namespace golden_gguf_detail {

inline std::string gguf_name(const std::string& hf) {
  static const std::map<std::string, std::string> outer = {
      {"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  static const std::vector<std::pair<std::string, std::string>> layer = {
      {"input_layernorm.weight", "attn_norm.weight"},   {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},     {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},         {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},         {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"}, {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"}, {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},          {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},        {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"}};
  if (auto it = outer.find(hf); it != outer.end()) return it->second;
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  const std::string n = hf.substr(prefix.size(), dot - prefix.size()), suffix = hf.substr(dot + 1);
  for (const auto& [from, to] : layer)
    if (from == suffix) return "blk." + n + "." + to;
  ADD_FAILURE() << "no GGUF name for " << hf;
  return hf;
}

// convert_hf_to_gguf.py's permute(): reshape(heads, 2, D/2, cols).swapaxes(1, 2).
inline std::vector<uint8_t> permute_rows(const std::vector<uint8_t>& rows_bytes, int64_t rows, int64_t head_dim) {
  const size_t row_bytes = rows_bytes.size() / static_cast<size_t>(rows);
  std::vector<uint8_t> out(rows_bytes.size());
  for (int64_t h = 0; h < rows / head_dim; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < head_dim / 2; ++i) {
        const int64_t from = h * head_dim + j * head_dim / 2 + i, to = h * head_dim + 2 * i + j;
        std::memcpy(out.data() + to * row_bytes, rows_bytes.data() + from * row_bytes, row_bytes);
      }
  return out;
}

}  // namespace golden_gguf_detail

namespace golden_gguf_detail {

struct HfConfig {
  nlohmann::json json;
  std::string arch;  // llama, qwen2, qwen3, qwen2moe, qwen3moe
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double theta = 10000.0;
  bool tied = false;
};

inline HfConfig read_config(const std::string& model) {
  std::ifstream in(model_dir(model) / "config.json");
  HfConfig h;
  h.json = nlohmann::json::parse(in);
  const nlohmann::json& c = h.json;
  const std::string hf_arch = c.at("architectures")[0].get<std::string>();
  h.arch = hf_arch == "Qwen2ForCausalLM"      ? "qwen2"
           : hf_arch == "Qwen3ForCausalLM"    ? "qwen3"
           : hf_arch == "Qwen2MoeForCausalLM" ? "qwen2moe"
           : hf_arch == "Qwen3MoeForCausalLM" ? "qwen3moe"
                                              : "llama";
  h.hidden = c.at("hidden_size");
  h.heads = c.at("num_attention_heads");
  h.kv_heads = c.value("num_key_value_heads", h.heads);
  h.head_dim = c.contains("head_dim") && !c.at("head_dim").is_null() ? c.at("head_dim").get<int64_t>() : h.hidden / h.heads;
  h.theta = c.contains("rope_theta") && !c.at("rope_theta").is_null() ? c.at("rope_theta").get<double>()
            : c.contains("rope_parameters")                           ? c.at("rope_parameters").value("rope_theta", 10000.0)
                                                                      : 10000.0;
  h.tied = c.value("tie_word_embeddings", false);
  return h;
}

// The mixture-of-experts keys (none for a dense config).
inline void write_expert_keys(gguf::testing::GgufWriter& w, const HfConfig& h) {
  using namespace gguf::testing;
  const nlohmann::json& c = h.json;
  const std::string& a = h.arch;
  const uint32_t experts = c.value("num_experts", c.value("num_local_experts", 0u));
  if (experts == 0) return;
  w.kv<uint32_t>(a + ".expert_count", kTU32, experts);
  w.kv<uint32_t>(a + ".expert_used_count", kTU32, c.at("num_experts_per_tok").get<uint32_t>());
  if (a == "llama") return;  // Mixtral: experts of width feed_forward_length, weights renormalized
  w.kv<uint32_t>(a + ".expert_feed_forward_length", kTU32, c.at("moe_intermediate_size").get<uint32_t>());
  if (a == "qwen2moe") {
    w.kv<uint32_t>(a + ".expert_shared_feed_forward_length", kTU32,
                   c.at("shared_expert_intermediate_size").get<uint32_t>());
  }
  w.kv<uint8_t>(a + ".expert_weights_norm", kTBool, c.value("norm_topk_prob", false) ? 1 : 0);
}

// file_type: 7 (mostly Q8_0) quantized, 32 (mostly BF16) for a BF16 checkpoint, else 0 (F32).
inline void write_hyper_params(gguf::testing::GgufWriter& w, const HfConfig& h, bool quantized, bool bf16 = false) {
  using namespace gguf::testing;
  const std::string& a = h.arch;
  w.kv_string("general.architecture", a);
  w.kv<uint32_t>("general.file_type", kTU32, quantized ? 7u : bf16 ? 32u : 0u);
  write_expert_keys(w, h);
  w.kv<uint32_t>(a + ".context_length", kTU32, h.json.at("max_position_embeddings").get<uint32_t>());
  w.kv<uint32_t>(a + ".embedding_length", kTU32, static_cast<uint32_t>(h.hidden));
  w.kv<uint32_t>(a + ".block_count", kTU32, h.json.at("num_hidden_layers").get<uint32_t>());
  w.kv<uint32_t>(a + ".feed_forward_length", kTU32, h.json.at("intermediate_size").get<uint32_t>());
  w.kv<uint32_t>(a + ".attention.head_count", kTU32, static_cast<uint32_t>(h.heads));
  w.kv<uint32_t>(a + ".attention.head_count_kv", kTU32, static_cast<uint32_t>(h.kv_heads));
  w.kv<uint32_t>(a + ".attention.key_length", kTU32, static_cast<uint32_t>(h.head_dim));
  w.kv<uint32_t>(a + ".attention.value_length", kTU32, static_cast<uint32_t>(h.head_dim));
  w.kv<float>(a + ".attention.layer_norm_rms_epsilon", kTF32, h.json.at("rms_norm_eps").get<float>());
  w.kv<float>(a + ".rope.freq_base", kTF32, static_cast<float>(h.theta));
  w.kv<uint32_t>(a + ".rope.dimension_count", kTU32, static_cast<uint32_t>(h.head_dim));
}

// Llama-3 RoPE scaling: the converter's rope_freqs.weight, one divisor per frequency i < D/2
// (transformers' _compute_llama3_parameters: 1 for wavelengths below L / high_freq_factor, factor
// above L / low_freq_factor, 1 / ((1 - s) / factor + s) with s = (L / wavelength - low) / (high -
// low) between). The reference forward reads them as weights["rope_freqs"].
inline void write_llama3_factors(gguf::testing::GgufWriter& w, const HfConfig& h, Float64Weights& weights) {
  const nlohmann::json& c = h.json;
  if (!c.contains("rope_parameters") || c.at("rope_parameters").value("rope_type", "default") != "llama3") return;
  const nlohmann::json& r = c.at("rope_parameters");
  const double factor = r.at("factor"), low = r.at("low_freq_factor"), high = r.at("high_freq_factor");
  const double old_len = r.at("original_max_position_embeddings");
  std::vector<double>& f = weights["rope_freqs"];
  std::vector<uint8_t> bytes;
  for (int64_t i = 0; i < h.head_dim / 2; ++i) {
    const double wavelen = 2 * M_PI * std::pow(h.theta, 2.0 * static_cast<double>(i) / static_cast<double>(h.head_dim));
    const double s = (old_len / wavelen - low) / (high - low);
    const double v = wavelen < old_len / high ? 1.0 : wavelen > old_len / low ? factor : 1.0 / ((1 - s) / factor + s);
    const float v32 = static_cast<float>(v);
    f.push_back(v32);
    bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(&v32), reinterpret_cast<const uint8_t*>(&v32) + 4);
  }
  w.tensor(gguf::testing::TestTensor("rope_freqs.weight", 0, {static_cast<uint64_t>(h.head_dim / 2)}, std::move(bytes)));
}

// One F32 tensor [rows, cols] in `type` (HF row order), its float64 values as the blocks decode
// appended to `values`.
inline std::vector<uint8_t> encode_rows(gguf::GgmlType type, const float* f, int64_t rows, int64_t cols,
                                        std::vector<double>& values) {
  std::vector<uint8_t> bytes;
  const size_t be = gguf::ggml_block_elements(type), bb = gguf::ggml_block_bytes(type);
  for (int64_t r = 0; r < rows; ++r) {
    const std::span<const float> row(f + r * cols, static_cast<size_t>(cols));
    std::vector<uint8_t> row_bytes(reinterpret_cast<const uint8_t*>(row.data()),
                                   reinterpret_cast<const uint8_t*>(row.data() + cols));
    if (type != gguf::GgmlType::kF32) row_bytes = quantize_row(type, row);
    for (int64_t e = 0; e < cols; ++e)
      values.push_back(gguf::reference::element(type, row_bytes.data() + (e / be) * bb, static_cast<int>(e % be)));
    bytes.insert(bytes.end(), row_bytes.begin(), row_bytes.end());
  }
  return bytes;
}

}  // namespace golden_gguf_detail

namespace golden_gguf_detail {

// A checkpoint tensor as f32 (F32 or BF16 stored).
inline std::vector<float> f32_values(const Checkpoint& checkpoint, const TensorInfo& info) {
  const TensorView view = checkpoint.tensor(info.name);
  std::vector<float> out(info.num_elements());
  EXPECT_TRUE(info.dtype == DType::kF32 || info.dtype == DType::kBF16) << info.name;
  for (size_t i = 0; i < out.size(); ++i) {
    if (info.dtype == DType::kF32) {
      std::memcpy(&out[i], view.bytes.data() + 4 * i, 4);
    } else {
      uint32_t bits = 0;
      std::memcpy(&bits, view.bytes.data() + 2 * i, 2);
      bits <<= 16;
      std::memcpy(&out[i], &bits, 4);
    }
  }
  return out;
}

// The bytes of tensor `name` [rows, cols] in `type` (kBF16: the stored bf16 bits), its float64
// values appended to `values`.
inline std::vector<uint8_t> tensor_bytes(const Checkpoint& checkpoint, const std::string& name, gguf::GgmlType type,
                                         std::vector<double>& values) {
  const TensorInfo& info = *checkpoint.find(name);
  const std::vector<float> f = f32_values(checkpoint, info);
  const int64_t cols = info.shape.back(), rows = static_cast<int64_t>(info.num_elements()) / cols;
  if (type != gguf::GgmlType::kBF16) return encode_rows(type, f.data(), rows, cols, values);
  EXPECT_EQ(info.dtype, DType::kBF16) << name;
  const TensorView view = checkpoint.tensor(name);
  values.insert(values.end(), f.begin(), f.end());
  return {reinterpret_cast<const uint8_t*>(view.bytes.data()),
          reinterpret_cast<const uint8_t*>(view.bytes.data()) + view.bytes.size()};
}

// The GGUF type of a 2-D (or expert) weight with rows of `cols`: `type` where its rows are whole
// blocks (else Q8_0), or the checkpoint's own type unquantized.
inline gguf::GgmlType weight_type(const GoldenGgufOptions& options, DType stored, int64_t cols) {
  if (!options.type) return stored == DType::kBF16 ? gguf::GgmlType::kBF16 : gguf::GgmlType::kF32;
  return cols % gguf::ggml_block_elements(*options.type) == 0 ? *options.type : gguf::GgmlType::kQ8_0;
}

}  // namespace golden_gguf_detail

// Writes tests/golden/<model> as a GGUF file at `path`; returns the float64 weights it holds (a
// sparse layer's experts under their per-expert Hugging Face names).
inline Float64Weights write_golden_gguf(const std::string& model, const std::filesystem::path& path,
                                        const GoldenGgufOptions& options = {}) {
  namespace d = golden_gguf_detail;
  using namespace gguf::testing;
  const d::HfConfig h = d::read_config(model);
  const Checkpoint checkpoint(model_dir(model));
  const ModelConfig config = load_model_config(model_dir(model));
  const bool bf16 = checkpoint.find("model.embed_tokens.weight")->dtype == DType::kBF16;
  GgufWriter w;
  d::write_hyper_params(w, h, options.type.has_value(), bf16);
  Float64Weights weights;
  d::write_llama3_factors(w, h, weights);
  auto emit = [&](TestTensor tensor) {
    if (!options.edit || options.edit(tensor)) w.tensor(std::move(tensor));
  };
  for (int layer = 0; layer < config.num_hidden_layers; ++layer) {
    if (!config.is_moe_layer(layer)) continue;
    const MoeLayerNames n = moe_layer_names(config, ExpertLayout::kPerExpert, layer);
    const std::string blk = "blk." + std::to_string(layer) + ".";
    const struct {
      const char* gguf;
      std::function<std::string(int)> hf;
    } stacks[] = {{"ffn_gate_exps.weight", [&](int e) { return n.expert_gate(e); }},
                  {"ffn_up_exps.weight", [&](int e) { return n.expert_up(e); }},
                  {"ffn_down_exps.weight", [&](int e) { return n.expert_down(e); }}};
    for (const auto& stack : stacks) {
      const TensorInfo& first = *checkpoint.find(stack.hf(0));
      const gguf::GgmlType type = d::weight_type(options, first.dtype, first.shape[1]);
      std::vector<uint8_t> bytes;
      for (int e = 0; e < config.moe.num_experts; ++e) {
        const auto part = d::tensor_bytes(checkpoint, stack.hf(e), type, weights[stack.hf(e)]);
        bytes.insert(bytes.end(), part.begin(), part.end());
      }
      emit(TestTensor(blk + stack.gguf, static_cast<uint32_t>(type),
                      {static_cast<uint64_t>(first.shape[1]), static_cast<uint64_t>(first.shape[0]),
                       static_cast<uint64_t>(config.moe.num_experts)},
                      std::move(bytes)));
    }
  }
  for (const TensorInfo& info : checkpoint.tensors()) {
    if (info.name == "lm_head.weight" && h.tied) continue;
    if (info.name.find(".experts.") != std::string::npos) continue;  // (stacked above)
    const int64_t cols = info.shape.back(), rows = static_cast<int64_t>(info.num_elements()) / cols;
    const bool router = info.name.ends_with(".gate.weight");
    const bool shared_gate = info.name.ends_with("shared_expert_gate.weight");
    gguf::GgmlType type = gguf::GgmlType::kF32;
    if (router) {
      type = info.dtype == DType::kBF16 ? gguf::GgmlType::kBF16 : gguf::GgmlType::kF32;
    } else if (info.shape.size() == 2 && !shared_gate &&
               (options.quantize_embedding || !options.type || info.name != "model.embed_tokens.weight")) {
      type = d::weight_type(options.experts_only ? GoldenGgufOptions{} : options, info.dtype, cols);
    }
    std::vector<uint8_t> bytes = d::tensor_bytes(checkpoint, info.name, type, weights[info.name]);
    const bool qk = info.name.find("q_proj") != std::string::npos || info.name.find("k_proj") != std::string::npos;
    if (h.arch == "llama" && qk && options.permute_qk) {
      bytes = d::permute_rows(bytes, info.shape.size() == 1 ? cols : rows, h.head_dim);  // (a bias: rows of 1)
    }
    std::vector<uint64_t> ne = {static_cast<uint64_t>(cols)};
    if (info.shape.size() == 2 && !shared_gate) ne.push_back(static_cast<uint64_t>(rows));
    emit(TestTensor(d::gguf_name(info.name), static_cast<uint32_t>(type), ne, std::move(bytes)));
  }
  w.write(path);
  return weights;
}

}  // namespace spindle::testing
