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
  kSlidingWindow,
  kExpertCount,
  kExpertUsedCount,
  kExpertFeedForwardLength,
  kExpertSharedFeedForwardLength,
  kExpertWeightsNorm,
  kExpertWeightsScale,
  kExpertGatingFunc,
};

struct KeyName {
  Key key;
  std::string_view suffix;  // the metadata key is "{arch}.{suffix}"
};

// Every architecture spells its keys "{arch}.{suffix}" with these suffixes (llama.cpp's
// LLM_KV_NAMES); a table lists the keys its architecture reads.
constexpr KeyName kKeyNames[] = {
    {Key::kContextLength, "context_length"},
    {Key::kEmbeddingLength, "embedding_length"},
    {Key::kBlockCount, "block_count"},
    {Key::kFeedForwardLength, "feed_forward_length"},
    {Key::kHeadCount, "attention.head_count"},
    {Key::kHeadCountKv, "attention.head_count_kv"},
    {Key::kKeyLength, "attention.key_length"},
    {Key::kValueLength, "attention.value_length"},
    {Key::kRmsNormEps, "attention.layer_norm_rms_epsilon"},
    {Key::kRopeFreqBase, "rope.freq_base"},
    {Key::kRopeDimensionCount, "rope.dimension_count"},
    {Key::kRopeScalingType, "rope.scaling.type"},
    {Key::kRopeScalingFactor, "rope.scaling.factor"},
    {Key::kRopeScaleLinear, "rope.scale_linear"},
    {Key::kRopeScalingAttnFactor, "rope.scaling.attn_factor"},
    {Key::kSlidingWindow, "attention.sliding_window"},
    {Key::kExpertCount, "expert_count"},
    {Key::kExpertUsedCount, "expert_used_count"},
    {Key::kExpertFeedForwardLength, "expert_feed_forward_length"},
    {Key::kExpertSharedFeedForwardLength, "expert_shared_feed_forward_length"},
    {Key::kExpertWeightsNorm, "expert_weights_norm"},
    {Key::kExpertWeightsScale, "expert_weights_scale"},
    {Key::kExpertGatingFunc, "expert_gating_func"},
};

// How an architecture treats mixture-of-experts keys.
enum class Experts {
  kNone,      // dense only: a nonzero expert_count is an error naming the key
  kOptional,  // llama: expert_count > 0 makes it Mixtral (experts of width feed_forward_length)
  kRequired,  // qwen2moe, qwen3moe: expert_count > 0 required, width expert_feed_forward_length
};

struct ArchitectureTable {
  std::string_view name;  // general.architecture
  RopeLayout rope_layout;
  bool attention_bias;
  bool qk_norm;
  Experts experts;
  bool expert_weights_norm;  // the default of {arch}.expert_weights_norm (llama.cpp's norm_w)
  bool shared_expert;        // qwen2moe: a shared expert with a sigmoid gate
};

// One table per architecture. llama.cpp's converter permutes llama's q/k rows for its
// interleaved RoPE (LlamaModel.permute); the Qwen models are converted without it. llama.cpp
// renormalizes the top-k weights of Mixtral and Qwen3-MoE, not those of Qwen2-MoE.
constexpr ArchitectureTable kArchitectures[] = {
    {"llama", RopeLayout::kInterleaved, false, false, Experts::kOptional, true, false},
    {"qwen2", RopeLayout::kNeox, true, false, Experts::kNone, false, false},
    {"qwen3", RopeLayout::kNeox, false, true, Experts::kNone, false, false},
    {"qwen2moe", RopeLayout::kNeox, true, false, Experts::kRequired, false, true},
    {"qwen3moe", RopeLayout::kNeox, false, true, Experts::kRequired, true, false},
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

  std::string name(Key key) const {
    for (const KeyName& k : kKeyNames) {
      if (k.key == key) return fmt::format("{}.{}", table_.name, k.suffix);
    }
    SPINDLE_FAIL("architecture '{}': no name for key #{}", table_.name, static_cast<int>(key));
  }
  std::optional<bool> find_bool(Key key) const { return metadata_.find_bool(name(key)); }
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
  const ArchitectureTable& table() const { return table_; }

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

// A window smaller than the context is sliding-window attention, which Spindle does not compute.
void check_sliding_window(const KeyReader& keys, const HyperParams& hp) {
  const int64_t window = keys.find_int(Key::kSlidingWindow).value_or(0);
  SPINDLE_CHECK(window <= 0 || window >= hp.context_length,
                "{}: metadata key '{}' is {}, smaller than the context length {}: sliding-window "
                "attention is not supported", keys.source(), keys.name(Key::kSlidingWindow), window,
                hp.context_length);
}

// The routing keys Spindle computes as the architecture does, else an error naming the key:
// softmax gating (expert_gating_func 1), no weight scale (expert_weights_scale 0 or 1), and the
// renormalization of the top-k weights the architecture applies.
void check_routing(const KeyReader& keys, HyperParams& hp) {
  const int64_t gating = keys.find_int(Key::kExpertGatingFunc).value_or(1);
  SPINDLE_CHECK(gating == 1, "{}: metadata key '{}' is {}: Spindle routes with a softmax (1) only",
                keys.source(), keys.name(Key::kExpertGatingFunc), gating);
  const double scale = keys.find_float(Key::kExpertWeightsScale).value_or(0.0);
  SPINDLE_CHECK(scale == 0.0 || scale == 1.0, "{}: metadata key '{}' is {}: Spindle does not scale the "
                "routing weights", keys.source(), keys.name(Key::kExpertWeightsScale), scale);
  hp.expert_weights_norm = keys.find_bool(Key::kExpertWeightsNorm).value_or(keys.table().expert_weights_norm);
  SPINDLE_CHECK(hp.expert_weights_norm || keys.table().experts != Experts::kOptional,
                "{}: metadata key '{}' is false: Mixtral's routing renormalizes its top-k weights",
                keys.source(), keys.name(Key::kExpertWeightsNorm));
}

// The mixture-of-experts keys and which blocks are sparse: a block is sparse when its router
// blk.N.ffn_gate_inp.weight is there (GGUF has no key for Qwen's mlp_only_layers or
// decoder_sparse_step; llama.cpp's converter writes a dense block's ffn_gate/up/down instead).
void read_experts(const TensorSource& file, const KeyReader& keys, HyperParams& hp) {
  const ArchitectureTable& table = keys.table();
  const int64_t experts = keys.find_int(Key::kExpertCount).value_or(0);
  if (table.experts == Experts::kNone || (table.experts == Experts::kOptional && experts == 0)) {
    SPINDLE_CHECK(experts == 0, "{}: metadata key '{}' is {}: architecture '{}' has no mixture-of-experts "
                  "form in Spindle (its MoE forms: llama with expert_count, qwen2moe, qwen3moe)", keys.source(),
                  keys.name(Key::kExpertCount), experts, table.name);
    return;
  }
  hp.expert_count = keys.positive(Key::kExpertCount);
  hp.expert_used_count = keys.positive(Key::kExpertUsedCount);
  SPINDLE_CHECK(hp.expert_used_count <= hp.expert_count, "{}: metadata key '{}' = {} exceeds '{}' = {}",
                keys.source(), keys.name(Key::kExpertUsedCount), hp.expert_used_count,
                keys.name(Key::kExpertCount), hp.expert_count);
  if (table.experts == Experts::kOptional) {
    hp.expert_feed_forward_length = hp.feed_forward_length;  // Mixtral: its experts' width
  } else {  // (llama.cpp's default when the key is absent)
    hp.expert_feed_forward_length =
        keys.positive_or(Key::kExpertFeedForwardLength, hp.feed_forward_length / hp.expert_used_count);
  }
  if (table.shared_expert) {
    hp.expert_shared_feed_forward_length =
        keys.positive_or(Key::kExpertSharedFeedForwardLength, hp.feed_forward_length);
  }
  check_routing(keys, hp);
  for (int64_t block = 0; block < hp.block_count; ++block) {
    if (file.find_tensor(fmt::format("blk.{}.ffn_gate_inp.weight", block)) == nullptr) {
      hp.dense_blocks.push_back(block);
    }
  }
  SPINDLE_CHECK(hp.dense_blocks.size() < static_cast<size_t>(hp.block_count),
                "{}: metadata key '{}' is {}, but no block has a router (tensor 'blk.N.ffn_gate_inp.weight')",
                keys.source(), keys.name(Key::kExpertCount), hp.expert_count);
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
  check_sliding_window(keys, hp);
  read_experts(file, keys, hp);
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
