#include "gguf/gguf_hparams.h"

#include <cstring>
#include <span>

#include <fmt/format.h>

#include "util/error.h"

namespace spindle::gguf {
namespace {

// The hyper-parameters an architecture table names.
enum class Key {
  kContextLength,
  kEmbeddingLength,
  kBlockCount,
  kFeedForwardLength,
  kHeadCount,
  kHeadCountKv,
  kKeyLength,
  kValueLength,
  kRmsNormEps,
  kRopeFreqBase,
  kRopeDimensionCount,
  kRopeScalingType,
  kRopeScalingFactor,
  kRopeScaleLinear,
  kRopeScalingAttnFactor,
  kExpertCount,
};

struct KeyName {
  Key key;
  std::string_view name;
};

struct ArchitectureTable {
  std::string_view name;  // general.architecture
  RopeLayout rope_layout;
  bool attention_bias;
  bool qk_norm;
  std::span<const KeyName> keys;
};

constexpr KeyName kLlamaKeys[] = {
    {Key::kContextLength, "llama.context_length"},
    {Key::kEmbeddingLength, "llama.embedding_length"},
    {Key::kBlockCount, "llama.block_count"},
    {Key::kFeedForwardLength, "llama.feed_forward_length"},
    {Key::kHeadCount, "llama.attention.head_count"},
    {Key::kHeadCountKv, "llama.attention.head_count_kv"},
    {Key::kKeyLength, "llama.attention.key_length"},
    {Key::kValueLength, "llama.attention.value_length"},
    {Key::kRmsNormEps, "llama.attention.layer_norm_rms_epsilon"},
    {Key::kRopeFreqBase, "llama.rope.freq_base"},
    {Key::kRopeDimensionCount, "llama.rope.dimension_count"},
    {Key::kRopeScalingType, "llama.rope.scaling.type"},
    {Key::kRopeScalingFactor, "llama.rope.scaling.factor"},
    {Key::kRopeScaleLinear, "llama.rope.scale_linear"},
    {Key::kRopeScalingAttnFactor, "llama.rope.scaling.attn_factor"},
    {Key::kExpertCount, "llama.expert_count"},
};

constexpr KeyName kQwen2Keys[] = {
    {Key::kContextLength, "qwen2.context_length"},
    {Key::kEmbeddingLength, "qwen2.embedding_length"},
    {Key::kBlockCount, "qwen2.block_count"},
    {Key::kFeedForwardLength, "qwen2.feed_forward_length"},
    {Key::kHeadCount, "qwen2.attention.head_count"},
    {Key::kHeadCountKv, "qwen2.attention.head_count_kv"},
    {Key::kKeyLength, "qwen2.attention.key_length"},
    {Key::kValueLength, "qwen2.attention.value_length"},
    {Key::kRmsNormEps, "qwen2.attention.layer_norm_rms_epsilon"},
    {Key::kRopeFreqBase, "qwen2.rope.freq_base"},
    {Key::kRopeDimensionCount, "qwen2.rope.dimension_count"},
    {Key::kRopeScalingType, "qwen2.rope.scaling.type"},
    {Key::kRopeScalingFactor, "qwen2.rope.scaling.factor"},
    {Key::kRopeScaleLinear, "qwen2.rope.scale_linear"},
    {Key::kRopeScalingAttnFactor, "qwen2.rope.scaling.attn_factor"},
    {Key::kExpertCount, "qwen2.expert_count"},
};

constexpr KeyName kQwen3Keys[] = {
    {Key::kContextLength, "qwen3.context_length"},
    {Key::kEmbeddingLength, "qwen3.embedding_length"},
    {Key::kBlockCount, "qwen3.block_count"},
    {Key::kFeedForwardLength, "qwen3.feed_forward_length"},
    {Key::kHeadCount, "qwen3.attention.head_count"},
    {Key::kHeadCountKv, "qwen3.attention.head_count_kv"},
    {Key::kKeyLength, "qwen3.attention.key_length"},
    {Key::kValueLength, "qwen3.attention.value_length"},
    {Key::kRmsNormEps, "qwen3.attention.layer_norm_rms_epsilon"},
    {Key::kRopeFreqBase, "qwen3.rope.freq_base"},
    {Key::kRopeDimensionCount, "qwen3.rope.dimension_count"},
    {Key::kRopeScalingType, "qwen3.rope.scaling.type"},
    {Key::kRopeScalingFactor, "qwen3.rope.scaling.factor"},
    {Key::kRopeScaleLinear, "qwen3.rope.scale_linear"},
    {Key::kRopeScalingAttnFactor, "qwen3.rope.scaling.attn_factor"},
    {Key::kExpertCount, "qwen3.expert_count"},
};

// One table per architecture. llama.cpp's converter permutes llama's q/k rows for its
// interleaved RoPE (LlamaModel.permute); Qwen2/Qwen3 are converted without it.
constexpr ArchitectureTable kArchitectures[] = {
    {"llama", RopeLayout::kInterleaved, false, false, kLlamaKeys},
    {"qwen2", RopeLayout::kNeox, true, false, kQwen2Keys},
    {"qwen3", RopeLayout::kNeox, false, true, kQwen3Keys},
};

const ArchitectureTable& find_architecture(const Metadata& metadata) {
  const std::string_view name = metadata.get_string("general.architecture");
  for (const ArchitectureTable& table : kArchitectures) {
    if (table.name == name) return table;
  }
  SPINDLE_FAIL("{}: metadata key 'general.architecture' is '{}', which Spindle does not support "
               "(supported: {})", metadata.source_name(), name, supported_gguf_architectures());
}

// Reads the table's keys from the metadata, with the file's name in every error.
class KeyReader {
 public:
  KeyReader(const Metadata& metadata, const ArchitectureTable& table)
      : metadata_(metadata), table_(table) {}

  std::string_view name(Key key) const {
    for (const KeyName& k : table_.keys) {
      if (k.key == key) return k.name;
    }
    SPINDLE_FAIL("architecture '{}' has no key #{} in its table", table_.name,
                 static_cast<int>(key));
  }
  std::optional<int64_t> find_int(Key key) const { return metadata_.find_int(name(key)); }
  std::optional<double> find_float(Key key) const { return metadata_.find_float(name(key)); }
  std::optional<std::string_view> find_string(Key key) const {
    return metadata_.find_string(name(key));
  }
  // A required positive integer (at most 2^31 - 1).
  int64_t positive(Key key) const { return check_positive(key, metadata_.get_int(name(key))); }
  int64_t positive_or(Key key, int64_t fallback) const {
    return check_positive(key, find_int(key).value_or(fallback));
  }
  const std::string& source() const { return metadata_.source_name(); }

 private:
  int64_t check_positive(Key key, int64_t value) const {
    SPINDLE_CHECK(value > 0 && value <= INT32_MAX, "{}: metadata key '{}' is {} (must be 1 to {})",
                  metadata_.source_name(), name(key), value, INT32_MAX);
    return value;
  }

  const Metadata& metadata_;
  const ArchitectureTable& table_;
};

void read_shape(const KeyReader& keys, HyperParams& hp) {
  const int64_t experts = keys.find_int(Key::kExpertCount).value_or(0);
  SPINDLE_CHECK(experts == 0, "{}: metadata key '{}' is {}: mixture-of-experts models are not "
                "supported yet", keys.source(), keys.name(Key::kExpertCount), experts);
  hp.context_length = keys.positive(Key::kContextLength);
  hp.embedding_length = keys.positive(Key::kEmbeddingLength);
  hp.block_count = keys.positive(Key::kBlockCount);
  hp.feed_forward_length = keys.positive(Key::kFeedForwardLength);
  hp.head_count = keys.positive(Key::kHeadCount);
  hp.head_count_kv = keys.positive_or(Key::kHeadCountKv, hp.head_count);
  SPINDLE_CHECK(hp.head_count % hp.head_count_kv == 0,
                "{}: metadata key '{}' = {} does not divide '{}' = {}", keys.source(),
                keys.name(Key::kHeadCountKv), hp.head_count_kv, keys.name(Key::kHeadCount),
                hp.head_count);
  const auto key_length = keys.find_int(Key::kKeyLength);
  SPINDLE_CHECK(key_length.has_value() || hp.embedding_length % hp.head_count == 0,
                "{}: metadata key '{}' is absent and '{}' = {} is not a multiple of '{}' = {}",
                keys.source(), keys.name(Key::kKeyLength), keys.name(Key::kEmbeddingLength),
                hp.embedding_length, keys.name(Key::kHeadCount), hp.head_count);
  hp.key_length = keys.positive_or(Key::kKeyLength, hp.embedding_length / hp.head_count);
  hp.value_length = keys.positive_or(Key::kValueLength, hp.key_length);
  SPINDLE_CHECK(hp.value_length == hp.key_length,
                "{}: metadata key '{}' = {} differs from '{}' = {}; Spindle needs equal key and "
                "value head sizes", keys.source(), keys.name(Key::kValueLength), hp.value_length,
                keys.name(Key::kKeyLength), hp.key_length);
  const auto eps = keys.find_float(Key::kRmsNormEps);
  SPINDLE_CHECK(eps.has_value(), "{}: missing metadata key '{}'", keys.source(),
                keys.name(Key::kRmsNormEps));
  hp.rms_norm_eps = *eps;
  SPINDLE_CHECK(hp.rms_norm_eps > 0 && hp.rms_norm_eps < 1, "{}: metadata key '{}' is {}",
                keys.source(), keys.name(Key::kRmsNormEps), hp.rms_norm_eps);
}

void read_rope_scaling(const KeyReader& keys, HyperParams& hp) {
  const auto type = keys.find_string(Key::kRopeScalingType);
  auto factor = keys.find_float(Key::kRopeScalingFactor);
  if (!factor) factor = keys.find_float(Key::kRopeScaleLinear);
  if (type && *type != "none" && *type != "linear") {
    SPINDLE_FAIL("{}: metadata key '{}' is '{}': Spindle implements only 'none' and 'linear' RoPE "
                 "scaling in GGUF files (Llama-3 scaling through rope_freqs.weight)",
                 keys.source(), keys.name(Key::kRopeScalingType), *type);
  }
  if ((!type || *type == "linear") && factor && *factor != 0.0 && *factor != 1.0) {
    SPINDLE_CHECK(*factor > 0, "{}: metadata key '{}' is {} (must be positive)", keys.source(),
                  keys.name(Key::kRopeScalingFactor), *factor);
    hp.rope_scaling = RopeScalingType::kLinear;
    hp.rope_scaling_factor = *factor;
  }
  const auto attn_factor = keys.find_float(Key::kRopeScalingAttnFactor);
  SPINDLE_CHECK(!attn_factor || *attn_factor == 1.0,
                "{}: metadata key '{}' is {}; Spindle does not scale attention for RoPE scaling",
                keys.source(), keys.name(Key::kRopeScalingAttnFactor), *attn_factor);
}

void read_rope(const TensorSource& file, const KeyReader& keys, HyperParams& hp) {
  hp.rope_freq_base = keys.find_float(Key::kRopeFreqBase).value_or(10000.0);
  SPINDLE_CHECK(hp.rope_freq_base > 1, "{}: metadata key '{}' is {}", keys.source(),
                keys.name(Key::kRopeFreqBase), hp.rope_freq_base);
  hp.rope_dimension_count = keys.positive_or(Key::kRopeDimensionCount, hp.key_length);
  SPINDLE_CHECK(hp.rope_dimension_count == hp.key_length && hp.key_length % 2 == 0,
                "{}: metadata key '{}' = {} with head size {}: Spindle rotates whole heads of even "
                "size (no partial RoPE)", keys.source(), keys.name(Key::kRopeDimensionCount),
                hp.rope_dimension_count, hp.key_length);
  read_rope_scaling(keys, hp);
  const TensorInfo* freqs = file.find_tensor("rope_freqs.weight");
  if (freqs == nullptr) return;
  SPINDLE_CHECK(freqs->type == GgmlType::kF32 && freqs->n_dims == 1 &&
                    freqs->ne[0] == static_cast<uint64_t>(hp.rope_dimension_count / 2),
                "{}: tensor 'rope_freqs.weight' is {} with {} elements, expected F32 [{}] (half of "
                "the RoPE dimensions)", file.metadata.source_name(), ggml_type_name(freqs->type),
                freqs->num_elements(), hp.rope_dimension_count / 2);
  const auto bytes = file.tensor_data(*freqs);
  hp.rope_freq_factors.resize(freqs->ne[0]);
  std::memcpy(hp.rope_freq_factors.data(), bytes.data(), bytes.size());
  for (size_t i = 0; i < hp.rope_freq_factors.size(); ++i) {
    const float f = hp.rope_freq_factors[i];
    SPINDLE_CHECK(f >= 1.0f && f < 1e6f, "{}: tensor 'rope_freqs.weight': factor {} is {} (Llama-3 "
                  "factors lie in [1, 1e6))", file.metadata.source_name(), i, f);
  }
}

void read_vocab(const TensorSource& file, HyperParams& hp) {
  const Metadata& metadata = file.metadata;
  const TensorInfo* embedding = file.find_tensor("token_embd.weight");
  if (const auto tokens = metadata.find_string_array("tokenizer.ggml.tokens")) {
    hp.vocab_size = static_cast<int64_t>(tokens->size());
  } else {
    SPINDLE_CHECK(embedding != nullptr, "{}: neither 'tokenizer.ggml.tokens' nor tensor "
                  "'token_embd.weight' gives the vocabulary size", file.metadata.source_name());
    hp.vocab_size = static_cast<int64_t>(embedding->ne[1]);
  }
  SPINDLE_CHECK(hp.vocab_size > 0 && hp.vocab_size <= INT32_MAX, "{}: vocabulary size {}",
                file.metadata.source_name(), hp.vocab_size);
  if (embedding != nullptr) {
    SPINDLE_CHECK(embedding->ne[0] == static_cast<uint64_t>(hp.embedding_length),
                  "{}: tensor 'token_embd.weight' has ne[0] = {}, but embedding_length is {}",
                  file.metadata.source_name(), embedding->ne[0], hp.embedding_length);
  }
  hp.tied_embeddings = embedding != nullptr && file.find_tensor("output.weight") == nullptr;
  hp.bos_token_id = metadata.find_int("tokenizer.ggml.bos_token_id");
  hp.eos_token_id = metadata.find_int("tokenizer.ggml.eos_token_id");
  hp.file_type = metadata.find_int("general.file_type");
}

}  // namespace

std::string_view rope_layout_name(RopeLayout layout) {
  return layout == RopeLayout::kInterleaved ? "interleaved" : "neox";
}

int64_t interleaved_rope_row(int64_t hf_row, int64_t head_dim) {
  SPINDLE_CHECK(head_dim > 0 && head_dim % 2 == 0 && hf_row >= 0,
                "interleaved_rope_row: row {} with head_dim {}", hf_row, head_dim);
  const int64_t head = hf_row / head_dim;
  const int64_t within = hf_row % head_dim;
  const int64_t half = head_dim / 2;
  return head * head_dim + 2 * (within % half) + within / half;
}

std::string supported_gguf_architectures() {
  std::string out;
  for (const ArchitectureTable& table : kArchitectures) {
    if (!out.empty()) out += ", ";
    out += table.name;
  }
  return out;
}

HyperParams read_hyper_params(const TensorSource& file) {
  const ArchitectureTable& table = find_architecture(file.metadata);
  const KeyReader keys(file.metadata, table);
  HyperParams hp;
  hp.architecture = std::string(table.name);
  hp.rope_layout = table.rope_layout;
  hp.attention_bias = table.attention_bias;
  hp.qk_norm = table.qk_norm;
  read_shape(keys, hp);
  read_rope(file, keys, hp);
  read_vocab(file, hp);
  return hp;
}

HyperParams read_hyper_params(const GgufFile& file) {
  return read_hyper_params(TensorSource{
      file.metadata(), [&](std::string_view name) { return file.find_tensor(name); },
      [&](const TensorInfo& info) { return file.tensor_data(info); }});
}

HyperParams read_hyper_params(const Header& header, std::span<const std::byte> file_bytes) {
  auto find = [&](std::string_view name) -> const TensorInfo* {
    for (const TensorInfo& t : header.tensors) {
      if (t.name == name) return &t;
    }
    return nullptr;
  };
  auto data = [&](const TensorInfo& info) { return file_bytes.subspan(info.offset, info.size); };
  return read_hyper_params(TensorSource{header.metadata, find, data});
}

}  // namespace spindle::gguf
