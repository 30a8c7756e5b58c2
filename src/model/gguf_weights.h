// GgufWeights: a GGUF file's tensors as the transformer's WeightSource (weight_view.h).
//
// Names (llama.cpp's, per layer i) for the Hugging Face names of weight_map.h:
//   token_embd.weight           model.embed_tokens.weight
//   output_norm.weight          model.norm.weight
//   output.weight               lm_head.weight (absent: tied to token_embd.weight)
//   blk.i.attn_norm.weight      model.layers.i.input_layernorm.weight
//   blk.i.attn_{q,k,v}.weight   model.layers.i.self_attn.{q,k,v}_proj.weight (.bias: qwen2)
//   blk.i.attn_output.weight    model.layers.i.self_attn.o_proj.weight
//   blk.i.attn_{q,k}_norm.weight  model.layers.i.self_attn.{q,k}_norm.weight (qwen3)
//   blk.i.ffn_norm.weight       model.layers.i.post_attention_layernorm.weight
//   blk.i.ffn_{gate,up,down}.weight  model.layers.i.mlp.{gate,up,down}_proj.weight
// Sparse (mixture-of-experts) layers, E experts of width F (P = mlp, Mixtral: block_sparse_moe):
//   blk.i.ffn_gate_inp.weight   model.layers.i.P.gate.weight (the router [E, H])
//   blk.i.ffn_gate_exps.weight  [E, F, H]: expert e's slice is model.layers.i.P.experts.e.gate_proj
//                               (Mixtral: w1); ffn_up_exps: up_proj (w3); ffn_down_exps [E, H, F]:
//                               down_proj (w2). The slice is a view (whole rows of any type).
//   blk.i.ffn_{gate,up,down}_shexp.weight  model.layers.i.mlp.shared_expert.{gate,up,down}_proj
//   blk.i.ffn_gate_inp_shexp.weight  model.layers.i.mlp.shared_expert_gate.weight (GGUF {H}: [1, H])
//   rope_freqs.weight           read by read_hyper_params (Llama-3 RoPE factors), not a weight
// Shapes: GGUF ne = {cols, rows} is the HF [rows, cols]. Every tensor the config needs must be
// there with its shape, in a type the engine knows (F32, F16, BF16 or a type gguf::dequantize_row
// reads; whether the device computes it is the device's check), and no other tensor may be:
// the constructor lists every problem in one error naming the file.
//
// RoPE layout: for RopeLayout::kInterleaved (architecture llama) the q/k rows (and biases) were
// permuted by the converter; weight() returns them un-permuted (gguf::interleaved_rope_row, whole
// rows moved, so every type works) in a copy this source owns. qwen2/qwen3 are returned as stored.
//
// Memory: tensors are views into the mapped file. A view's release() (called by a device that
// repacked or widened it) gives its page range back to the OS (madvise MADV_DONTNEED: a file
// mapping re-reads the pages should anything touch them again), so loading a quantized file holds
// the repacked weights plus about one tensor of the file; it frees a permuted copy. With
// FileMemory::kHugePageCopy (anonymous memory, which MADV_DONTNEED would zero) nothing is dropped;
// a file holding block-typed tensors is mapped whatever the memory asked (see open_file).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_hparams.h"
#include "model/model_config.h"
#include "model/weight_map.h"
#include "model/weight_view.h"

namespace spindle {

// The GGUF tensor holding a Hugging Face weight (table above): its name, and for a routed expert's
// projection the expert's index in that 3-D tensor (-1 otherwise).
struct GgufTensorRef {
  std::string name;
  int expert = -1;
};
std::optional<GgufTensorRef> gguf_tensor_ref(std::string_view hf_name);
// The GGUF name of a Hugging Face weight name (table above); nullopt when it has none.
std::optional<std::string> gguf_tensor_name(std::string_view hf_name);

class GgufWeights final : public WeightSource {
 public:
  // Opens, reads the hyper-parameters and checks every tensor; throws spindle::Error naming the
  // file and each tensor at fault.
  explicit GgufWeights(const std::filesystem::path& path, FileMemory memory = FileMemory::kMapped);

  const ModelConfig& config() const { return config_; }
  const gguf::HyperParams& hyper_params() const { return hp_; }
  const gguf::GgufFile& file() const { return file_; }

  std::string name() const override { return file_.path().string(); }
  bool contains(std::string_view hf_name) const override;
  WeightView weight(std::string_view hf_name) override;

 private:
  void check_tensors() const;
  bool is_permuted(std::string_view hf_name) const;
  WeightView view_of(const gguf::TensorInfo& info) const;
  WeightView unpermuted(WeightView stored);
  WeightView expert_slice(WeightView whole, int expert) const;

  FileMemory memory_;  // (before file_: open_file may change it)
  gguf::GgufFile file_;
  gguf::HyperParams hp_;
  ModelConfig config_;
  std::vector<std::unique_ptr<std::vector<std::byte>>> owned_;  // un-permuted copies
};

// The routed experts of a GGUF file (its blk.N.ffn_*_exps tensors, as stored): their bytes and the
// bytes one token reads (top_k of num_experts per sparse layer); zero for a dense model.
ExpertStats gguf_expert_stats(const ModelConfig& config, const gguf::GgufFile& file);

// The bytes [data, data + size) given back to the OS where whole pages lie inside (a file mapping
// re-reads them on the next touch). No-op for empty ranges.
void drop_mapped_range(const std::byte* data, size_t size);

}  // namespace spindle
