#include "model/gguf_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fmt/format.h>

#include "gguf/dequantize.h"
#include "model/gguf_model_config.h"
#include "model/weight_map.h"
#include "util/error.h"

namespace spindle {
namespace {

constexpr std::string_view kLayerPrefix = "model.layers.";

// Hugging Face suffix after "model.layers.{i}." -> GGUF suffix after "blk.{i}.".
const std::unordered_map<std::string_view, std::string_view>& layer_names() {
  static const std::unordered_map<std::string_view, std::string_view> names = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
  };
  return names;
}

// A routed expert's projection ("gate_proj" or Mixtral's "w1", ...) -> its 3-D GGUF tensor.
std::optional<std::string_view> expert_tensor(std::string_view projection) {
  if (projection == "gate_proj" || projection == "w1") return "ffn_gate_exps.weight";
  if (projection == "up_proj" || projection == "w3") return "ffn_up_exps.weight";
  if (projection == "down_proj" || projection == "w2") return "ffn_down_exps.weight";
  return std::nullopt;
}

// "{mlp|block_sparse_moe}.experts.{e}.{projection}.weight" (after the layer prefix) as
// (GGUF suffix, e); nullopt for any other name.
std::optional<std::pair<std::string_view, int>> expert_ref(std::string_view suffix) {
  for (std::string_view block : {"mlp.experts.", "block_sparse_moe.experts."}) {
    if (!suffix.starts_with(block)) continue;
    std::string_view rest = suffix.substr(block.size());
    const size_t dot = rest.find('.');
    const std::string_view index = rest.substr(0, dot);
    if (dot == std::string_view::npos || index.empty() || index.size() > 6 ||
        index.find_first_not_of("0123456789") != std::string_view::npos) {
      return std::nullopt;
    }
    rest = rest.substr(dot + 1);
    if (!rest.ends_with(".weight")) return std::nullopt;
    const auto tensor = expert_tensor(rest.substr(0, rest.size() - std::string_view(".weight").size()));
    if (!tensor) return std::nullopt;
    return std::pair{*tensor, std::stoi(std::string(index))};
  }
  return std::nullopt;
}

// Shapes equal but for leading 1s (qwen2moe's shared expert gate: HF [1, H], GGUF ne {H}).
bool same_shape(std::vector<int64_t> a, std::vector<int64_t> b) {
  while (a.size() > 1 && a.front() == 1) a.erase(a.begin());
  while (b.size() > 1 && b.front() == 1) b.erase(b.begin());
  return a == b;
}

// The HF shape of a GGUF tensor: ne reversed over its dimensions.
std::vector<int64_t> hf_shape(const gguf::TensorInfo& info) {
  std::vector<int64_t> shape;
  for (int d = info.n_dims - 1; d >= 0; --d) shape.push_back(static_cast<int64_t>(info.ne[static_cast<size_t>(d)]));
  return shape;
}

bool engine_reads(gguf::GgmlType type) {
  return type == gguf::GgmlType::kF32 || type == gguf::GgmlType::kF16 || type == gguf::GgmlType::kBF16 ||
         gguf::can_dequantize(type);
}

}  // namespace

std::optional<GgufTensorRef> gguf_tensor_ref(std::string_view hf) {
  if (hf == "model.embed_tokens.weight") return GgufTensorRef{"token_embd.weight"};
  if (hf == "model.norm.weight") return GgufTensorRef{"output_norm.weight"};
  if (hf == "lm_head.weight") return GgufTensorRef{"output.weight"};
  if (!hf.starts_with(kLayerPrefix)) return std::nullopt;
  const std::string_view rest = hf.substr(kLayerPrefix.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  const std::string_view layer = rest.substr(0, dot);
  if (layer.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  const std::string_view suffix = rest.substr(dot + 1);
  if (const auto expert = expert_ref(suffix)) {
    return GgufTensorRef{fmt::format("blk.{}.{}", layer, expert->first), expert->second};
  }
  const auto it = layer_names().find(suffix);
  if (it == layer_names().end()) return std::nullopt;
  return GgufTensorRef{fmt::format("blk.{}.{}", layer, it->second)};
}

std::optional<std::string> gguf_tensor_name(std::string_view hf) {
  auto ref = gguf_tensor_ref(hf);
  if (!ref) return std::nullopt;
  return std::move(ref->name);
}

ExpertStats gguf_expert_stats(const ModelConfig& config, const gguf::GgufFile& file) {
  ExpertStats stats;
  if (!config.moe.enabled()) return stats;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name.ends_with("_exps.weight")) stats.bytes += t.size;
  }
  stats.active_bytes = stats.bytes / static_cast<uint64_t>(config.moe.num_experts) *
                       static_cast<uint64_t>(config.moe.num_experts_per_tok);
  return stats;
}

void drop_mapped_range(const std::byte* data, size_t size) {
  if (size == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

namespace {

// A file of plain tensors in the memory asked for; a file with block-typed tensors mapped (its
// repacked weights are the copies the kernels read, its pages dropped as they are repacked: a huge
// page copy of it would double the resident bytes).
gguf::GgufFile open_file(const std::filesystem::path& path, FileMemory& memory) {
  gguf::GgufFile mapped(path, FileMemory::kMapped);
  if (memory == FileMemory::kMapped) return mapped;
  for (const gguf::TensorInfo& t : mapped.tensors()) {
    if (t.type != gguf::GgmlType::kF32 && t.type != gguf::GgmlType::kF16 && t.type != gguf::GgmlType::kBF16) {
      memory = FileMemory::kMapped;
      return mapped;
    }
  }
  return gguf::GgufFile(path, memory);
}

}  // namespace

GgufWeights::GgufWeights(const std::filesystem::path& path, FileMemory memory)
    : memory_(memory), file_(open_file(path, memory_)), hp_(gguf::read_hyper_params(file_)),
      config_(model_config_from_gguf(hp_, path.string())) {
  check_tensors();
}

namespace {

// The GGUF tensors the config needs with their shapes in HF order: expected_tensors' names mapped,
// a routed expert's [F, H] / [H, F] becoming the 3-D tensor [E, F, H] / [E, H, F] of its layer.
struct ExpectedGgufTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool optional = false;
  std::string hf_name;  // (an expert's tensor: expert 0's name)
};

std::vector<ExpectedGgufTensor> expected_gguf_tensors(const ModelConfig& config) {
  std::vector<ExpectedGgufTensor> out;
  for (ExpectedTensor& e : expected_tensors(config)) {
    const GgufTensorRef ref = *gguf_tensor_ref(e.name);
    if (ref.expert > 0) continue;  // (expert 0 stands for the 3-D tensor)
    if (ref.expert == 0) e.shape.insert(e.shape.begin(), config.moe.num_experts);
    out.push_back({ref.name, std::move(e.shape), e.optional, std::move(e.name)});
  }
  return out;
}

}  // namespace

// Missing, misshaped, unreadable and unexpected tensors, all listed in one error.
void GgufWeights::check_tensors() const {
  WeightCheck check;
  std::unordered_map<std::string, bool> expected;  // GGUF name -> seen
  for (const ExpectedGgufTensor& e : expected_gguf_tensors(config_)) {
    const std::string& name = e.name;
    expected[name] = true;
    const gguf::TensorInfo* info = file_.find_tensor(name);
    if (info == nullptr) {
      if (!e.optional) check.missing.push_back(fmt::format("{} {} (Hugging Face {})", name, format_shape(e.shape), e.hf_name));
      continue;
    }
    const std::vector<int64_t> shape = hf_shape(*info);
    if (!same_shape(shape, e.shape)) {
      check.shape_mismatches.push_back(fmt::format("{}: expected {} (ne reversed), found {}", name,
                                                   format_shape(e.shape), format_shape(shape)));
    }
    if (!engine_reads(info->type)) {
      check.wrong_dtypes.push_back(fmt::format("{}: {} (Spindle reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                                               "Q5_1, Q4_K, Q5_K, Q6_K)", name, gguf::ggml_type_name(info->type)));
    }
  }
  for (const gguf::TensorInfo& t : file_.tensors()) {
    if (t.name == "rope_freqs.weight" || expected.contains(t.name)) continue;
    check.unexpected.push_back(fmt::format("{} {} {}", t.name, format_shape(hf_shape(t)), gguf::ggml_type_name(t.type)));
  }
  SPINDLE_CHECK(check.ok(), "{}: the tensors do not match the {} model its metadata describes ({} layers, hidden "
                "size {}{}):{}", name(), hp_.architecture, config_.num_hidden_layers, config_.hidden_size,
                config_.moe.enabled() ? fmt::format(", {} experts of width {}", config_.moe.num_experts,
                                                    config_.moe.moe_intermediate_size)
                                      : std::string(),
                check.report());
}

bool GgufWeights::contains(std::string_view hf_name) const {
  const auto ref = gguf_tensor_ref(hf_name);
  if (!ref) return false;
  const gguf::TensorInfo* info = file_.find_tensor(ref->name);
  return info != nullptr && (ref->expert < 0 || (info->n_dims == 3 && static_cast<uint64_t>(ref->expert) < info->ne[2]));
}

bool GgufWeights::is_permuted(std::string_view hf) const {
  if (hp_.rope_layout != gguf::RopeLayout::kInterleaved) return false;
  for (std::string_view suffix : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.q_proj.bias",
                                  "self_attn.k_proj.bias"}) {
    if (hf.ends_with(suffix)) return true;
  }
  return false;
}

WeightView GgufWeights::view_of(const gguf::TensorInfo& info) const {
  WeightView w;
  w.name = info.name;
  w.source = name();
  switch (info.type) {
    case gguf::GgmlType::kF32: w.dtype = DType::kF32; break;
    case gguf::GgmlType::kF16: w.dtype = DType::kF16; break;
    case gguf::GgmlType::kBF16: w.dtype = DType::kBF16; break;
    default: w.block = info.type;
  }
  w.shape = hf_shape(info);
  w.bytes = file_.tensor_data(info);
  if (memory_ == FileMemory::kMapped) {
    const std::span<const std::byte> bytes = w.bytes;
    w.release = [bytes] { drop_mapped_range(bytes.data(), bytes.size()); };
  }
  return w;
}

// Row r of the result is row interleaved_rope_row(r, head_dim) of the stored tensor (a bias: its
// elements); the copy is owned here, the stored range dropped.
WeightView GgufWeights::unpermuted(WeightView stored) {
  const int64_t d = config_.head_dim;
  const bool vector = stored.shape.size() == 1;
  const int64_t rows = vector ? stored.shape.front() : stored.rows();
  const size_t row_bytes = vector ? static_cast<size_t>(stored.block_bytes()) : static_cast<size_t>(stored.row_bytes());
  SPINDLE_CHECK(rows % d == 0 && (!vector || !stored.quantized()),
                "{}: {} rows are not whole heads of {} (or a quantized bias)", stored.where(), rows, d);
  auto copy = std::make_unique<std::vector<std::byte>>(stored.bytes.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t from = gguf::interleaved_rope_row(r, d);
    std::memcpy(copy->data() + static_cast<size_t>(r) * row_bytes,
                stored.bytes.data() + static_cast<size_t>(from) * row_bytes, row_bytes);
  }
  if (stored.release) stored.release();
  std::vector<std::byte>* owned = copy.get();
  stored.bytes = {owned->data(), owned->size()};
  stored.release = [owned] { std::vector<std::byte>().swap(*owned); };
  owned_.push_back(std::move(copy));
  return stored;
}

// Expert e of a 3-D tensor [E, rows, cols] (any type: the experts' rows lie back to back) as a
// [rows, cols] view named "<tensor>[e]"; its release gives back only its own pages.
WeightView GgufWeights::expert_slice(WeightView whole, int e) const {
  SPINDLE_CHECK(whole.shape.size() == 3 && e >= 0 && e < whole.shape[0], "{}: expert {} of a tensor of shape {}",
                whole.where(), e, format_shape(whole.shape));
  const size_t bytes = whole.bytes.size() / static_cast<size_t>(whole.shape[0]);
  whole.name = fmt::format("{}[{}]", whole.name, e);
  whole.shape = {whole.shape[1], whole.shape[2]};
  whole.bytes = whole.bytes.subspan(bytes * static_cast<size_t>(e), bytes);
  if (whole.release) {
    const std::span<const std::byte> slice = whole.bytes;
    whole.release = [slice] { drop_mapped_range(slice.data(), slice.size()); };
  }
  return whole;
}

WeightView GgufWeights::weight(std::string_view hf_name) {
  const auto ref = gguf_tensor_ref(hf_name);
  SPINDLE_CHECK(ref.has_value(), "{}: no GGUF tensor corresponds to {}", name(), hf_name);
  const gguf::TensorInfo& info = file_.tensor(ref->name);
  WeightView w = view_of(info);
  if (ref->expert >= 0) return expert_slice(std::move(w), ref->expert);
  if (hf_name.ends_with("shared_expert_gate.weight") && w.shape.size() == 1) {
    w.shape.insert(w.shape.begin(), 1);  // GGUF's {H}: the [1, H] linear weight of the HF name
  }
  return is_permuted(hf_name) ? unpermuted(std::move(w)) : w;
}

}  // namespace spindle
