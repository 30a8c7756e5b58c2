#include "model/model_config.h"

#include "model/gguf_model_config.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "util/error.h"
#include "util/mapped_file.h"

namespace spindle {
namespace {

using nlohmann::json;

constexpr std::array<std::pair<Architecture, std::string_view>, 7> kArchitectures = {{
    {Architecture::kLlama, "LlamaForCausalLM"},
    {Architecture::kMistral, "MistralForCausalLM"},
    {Architecture::kQwen2, "Qwen2ForCausalLM"},
    {Architecture::kQwen3, "Qwen3ForCausalLM"},
    {Architecture::kQwen3Moe, "Qwen3MoeForCausalLM"},
    {Architecture::kMixtral, "MixtralForCausalLM"},
    {Architecture::kQwen2Moe, "Qwen2MoeForCausalLM"},
}};

bool is_qwen_moe(Architecture a) { return a == Architecture::kQwen3Moe || a == Architecture::kQwen2Moe; }

// A json value for an error message: compact, at most ~80 characters.
std::string describe(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMaxChars = 80;
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

// Typed field access on one json object; every error names the source file and the field.
class FieldReader {
 public:
  // prefix is prepended to field names in messages ("rope_scaling." for a nested object).
  FieldReader(const json& object, std::string_view source, std::string prefix = "")
      : object_(object), source_(source), prefix_(std::move(prefix)) {}

  std::string label(std::string_view name) const { return prefix_ + std::string(name); }

  // nullptr when the field is absent or null.
  const json* find(std::string_view name) const {
    const auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  [[noreturn]] void fail_type(std::string_view name, std::string_view what, const json& got) const {
    SPINDLE_FAIL("{}: field '{}' must be {}, got {}", source_, label(name), what, describe(got));
  }

  int positive_int(std::string_view name, const json& value) const {
    constexpr std::string_view kWhat = "a positive integer";
    if (!value.is_number_integer()) fail_type(name, kWhat, value);
    if (value.is_number_unsigned()) {
      const auto v = value.get<uint64_t>();
      if (v == 0 || v > static_cast<uint64_t>(INT_MAX)) fail_type(name, kWhat, value);
      return static_cast<int>(v);
    }
    const auto v = value.get<int64_t>();
    if (v <= 0 || v > INT_MAX) fail_type(name, kWhat, value);
    return static_cast<int>(v);
  }

  int required_positive_int(std::string_view name) const {
    const json* value = find(name);
    SPINDLE_CHECK(value != nullptr, "{}: field '{}' is missing (must be a positive integer)",
                  source_, label(name));
    return positive_int(name, *value);
  }

  // A non-negative integer (0 allowed), or fallback when absent.
  int non_negative_int(std::string_view name, int fallback) const {
    const json* value = find(name);
    if (value == nullptr) return fallback;
    if (value->is_number_integer() && value->get<int64_t>() == 0) return 0;
    return positive_int(name, *value);
  }

  // A list of integers in [0, limit), or empty when absent.
  std::vector<int> int_list(std::string_view name, int limit) const {
    const json* value = find(name);
    if (value == nullptr) return {};
    if (!value->is_array()) fail_type(name, "a list of integers", *value);
    std::vector<int> out;
    for (const auto& item : *value) {
      SPINDLE_CHECK(item.is_number_integer() && item.get<int64_t>() >= 0 && item.get<int64_t>() < limit,
                    "{}: field '{}' holds {}, which is not a layer index in [0, {})", source_, label(name),
                    describe(item), limit);
      out.push_back(item.get<int>());
    }
    return out;
  }

  std::optional<int> optional_positive_int(std::string_view name) const {
    const json* value = find(name);
    if (value == nullptr) return std::nullopt;
    return positive_int(name, *value);
  }

  double positive_number(std::string_view name, double fallback) const {
    const json* value = find(name);
    if (value == nullptr) return fallback;
    if (!value->is_number()) fail_type(name, "a positive number", *value);
    const double v = value->get<double>();
    if (!std::isfinite(v) || v <= 0) fail_type(name, "a positive number", *value);
    return v;
  }

  bool boolean(std::string_view name, bool fallback) const {
    const json* value = find(name);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) fail_type(name, "true or false", *value);
    return value->get<bool>();
  }

  std::optional<std::string> string(std::string_view name) const {
    const json* value = find(name);
    if (value == nullptr) return std::nullopt;
    if (!value->is_string()) fail_type(name, "a string", *value);
    return value->get<std::string>();
  }

  // An int, a list of ints, or null/absent (empty). Each id must lie in [0, vocab_size).
  std::vector<TokenId> token_ids(std::string_view name, int vocab_size) const {
    const json* value = find(name);
    if (value == nullptr) return {};
    constexpr std::string_view kWhat = "a token id or a list of token ids";
    std::vector<const json*> items;
    if (value->is_array()) {
      for (const auto& item : *value) items.push_back(&item);
    } else {
      items.push_back(value);
    }
    std::vector<TokenId> ids;
    for (const json* item : items) {
      if (!item->is_number_integer()) fail_type(name, kWhat, *value);
      const bool in_range = item->is_number_unsigned()
                                ? item->get<uint64_t>() < static_cast<uint64_t>(vocab_size)
                                : item->get<int64_t>() >= 0 &&
                                      item->get<int64_t>() < static_cast<int64_t>(vocab_size);
      SPINDLE_CHECK(in_range, "{}: field '{}' holds token id {}, outside the vocabulary [0, {})",
                    source_, label(name), describe(*item), vocab_size);
      ids.push_back(item->get<int>());
    }
    return ids;
  }

  std::string_view source() const { return source_; }

 private:
  const json& object_;
  std::string_view source_;
  std::string prefix_;
};

Architecture read_architecture(const FieldReader& fields) {
  const json* list = fields.find("architectures");
  SPINDLE_CHECK(list != nullptr,
                "{}: field 'architectures' is missing (must be a list such as "
                "[\"LlamaForCausalLM\"]); supported: {}",
                fields.source(), supported_architectures());
  if (!list->is_array() || list->empty() || !(*list)[0].is_string()) {
    fields.fail_type("architectures", "a non-empty list of strings", *list);
  }
  const auto name = (*list)[0].get<std::string>();
  const auto architecture = parse_architecture(name);
  SPINDLE_CHECK(architecture.has_value(),
                "{}: architecture '{}' (field 'architectures') is not supported; supported: {}",
                fields.source(), name, supported_architectures());
  return *architecture;
}

// key: "rope_scaling" (transformers 4) or "rope_parameters" (transformers 5, which also holds
// rope_theta).
RopeScaling read_rope_scaling(const FieldReader& fields, const std::string& key) {
  RopeScaling scaling;
  const json* value = fields.find(key);
  if (value == nullptr) return scaling;
  if (!value->is_object()) fields.fail_type(key, "an object or null", *value);
  const FieldReader sub(*value, fields.source(), key + ".");
  auto type = sub.string("rope_type");
  if (!type) type = sub.string("type");
  SPINDLE_CHECK(type.has_value(), "{}: field '{}' has no 'rope_type' (or 'type')",
                fields.source(), key);
  if (*type == "default") return scaling;
  if (*type == "linear") {
    scaling.type = RopeScaling::kLinear;
    scaling.factor = sub.positive_number("factor", 1.0);
    return scaling;
  }
  if (*type == "llama3") {
    scaling.type = RopeScaling::kLlama3;
    for (const char* key : {"factor", "low_freq_factor", "high_freq_factor",
                            "original_max_position_embeddings"}) {
      SPINDLE_CHECK(sub.find(key) != nullptr, "{}: field '{}' is missing (llama3 rope scaling)",
                    fields.source(), sub.label(key));
    }
    scaling.factor = sub.positive_number("factor", 1.0);
    scaling.low_freq_factor = sub.positive_number("low_freq_factor", 1.0);
    scaling.high_freq_factor = sub.positive_number("high_freq_factor", 4.0);
    scaling.original_max_position_embeddings =
        sub.required_positive_int("original_max_position_embeddings");
    SPINDLE_CHECK(scaling.high_freq_factor > scaling.low_freq_factor,
                  "{}: field '{}.high_freq_factor' ({}) must be larger than "
                  "'{}.low_freq_factor' ({})",
                  fields.source(), key, scaling.high_freq_factor, key, scaling.low_freq_factor);
    return scaling;
  }
  SPINDLE_FAIL(
      "{}: field '{}' has type '{}', which is not supported (supported: default, "
      "linear, llama3)",
      fields.source(), key, *type);
}

// Rejects configurations whose attention uses a sliding window (not implemented).
void check_sliding_window(const FieldReader& fields, ModelConfig& config) {
  if (config.architecture == Architecture::kMistral || config.architecture == Architecture::kMixtral) {
    const auto window = fields.optional_positive_int("sliding_window");
    SPINDLE_CHECK(!window || *window >= config.max_position_embeddings,
                  "{}: field 'sliding_window' is {}, smaller than max_position_embeddings {}: "
                  "sliding-window attention is not supported",
                  fields.source(), *window, config.max_position_embeddings);
  } else if (config.architecture == Architecture::kQwen2 || config.architecture == Architecture::kQwen3 ||
             is_qwen_moe(config.architecture)) {
    SPINDLE_CHECK(!fields.boolean("use_sliding_window", false),
                  "{}: field 'use_sliding_window' is true: sliding-window attention is not "
                  "supported",
                  fields.source());
  }
  if (const json* types = fields.find("layer_types"); types != nullptr && types->is_array()) {
    for (size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      SPINDLE_CHECK(t.is_string() && t.get<std::string>() == "full_attention",
                    "{}: field 'layer_types[{}]' is {}: only full_attention layers are supported "
                    "(sliding-window attention is not)",
                    fields.source(), i, t.dump());
    }
  }
  config.sliding_window = std::nullopt;
}

void check_unsupported_features(const FieldReader& fields) {
  const auto act = fields.string("hidden_act");
  SPINDLE_CHECK(!act || *act == "silu",
                "{}: field 'hidden_act' is '{}'; only 'silu' is supported", fields.source(), *act);
  SPINDLE_CHECK(!fields.boolean("mlp_bias", false),
                "{}: field 'mlp_bias' is true; MLP biases are not supported", fields.source());
}

void check_shapes(const FieldReader& fields, const ModelConfig& c) {
  SPINDLE_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
                "{}: field 'num_attention_heads' ({}) must be a multiple of field "
                "'num_key_value_heads' ({})",
                fields.source(), c.num_attention_heads, c.num_key_value_heads);
  SPINDLE_CHECK(c.head_dim % 2 == 0, "{}: field 'head_dim' ({}) must be even (rotary embedding)",
                fields.source(), c.head_dim);
  SPINDLE_CHECK(static_cast<int64_t>(c.num_attention_heads) * c.head_dim <= INT_MAX,
                "{}: fields 'num_attention_heads' ({}) * 'head_dim' ({}) is too large",
                fields.source(), c.num_attention_heads, c.head_dim);
}

// The mixture-of-experts fields of Qwen3-MoE, Mixtral and Qwen2-MoE (model_config.h); needs
// num_hidden_layers and intermediate_size read.
MoeConfig read_moe(const FieldReader& fields, const ModelConfig& c) {
  MoeConfig moe;
  auto experts = fields.optional_positive_int("num_experts");
  if (!experts) experts = fields.optional_positive_int("num_local_experts");
  SPINDLE_CHECK(experts.has_value(), "{}: field 'num_experts' (or 'num_local_experts') is missing ({} is a "
                "mixture of experts)", fields.source(), architecture_name(c.architecture));
  moe.num_experts = *experts;
  moe.num_experts_per_tok = fields.required_positive_int("num_experts_per_tok");
  SPINDLE_CHECK(moe.num_experts_per_tok <= moe.num_experts,
                "{}: field 'num_experts_per_tok' ({}) must not exceed the {} experts", fields.source(),
                moe.num_experts_per_tok, moe.num_experts);
  if (c.architecture == Architecture::kMixtral) {
    moe.moe_intermediate_size = c.intermediate_size;
    moe.norm_topk_prob = true;
    return moe;
  }
  moe.moe_intermediate_size = fields.required_positive_int("moe_intermediate_size");
  moe.norm_topk_prob = fields.boolean("norm_topk_prob", false);
  moe.decoder_sparse_step = fields.optional_positive_int("decoder_sparse_step").value_or(1);
  moe.mlp_only_layers = fields.int_list("mlp_only_layers", c.num_hidden_layers);
  if (c.architecture == Architecture::kQwen2Moe) {
    SPINDLE_CHECK(fields.find("shared_expert_intermediate_size") != nullptr,
                  "{}: field 'shared_expert_intermediate_size' is missing (Qwen2-MoE's shared expert)",
                  fields.source());
    moe.shared_expert_intermediate_size = fields.non_negative_int("shared_expert_intermediate_size", 0);
  }
  return moe;
}

}  // namespace

bool MoeConfig::is_sparse_layer(int layer) const {
  if (num_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

std::string_view architecture_name(Architecture architecture) {
  for (const auto& [a, name] : kArchitectures) {
    if (a == architecture) return name;
  }
  return "unknown";
}

std::optional<Architecture> parse_architecture(std::string_view name) {
  for (const auto& [a, n] : kArchitectures) {
    if (n == name) return a;
  }
  return std::nullopt;
}

std::string supported_architectures() {
  std::string out;
  for (const auto& [a, name] : kArchitectures) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

ModelConfig parse_model_config(const json& json_config, std::string_view source_name) {
  SPINDLE_CHECK(json_config.is_object(), "{}: must hold a JSON object, got {}", source_name,
                describe(json_config));
  const FieldReader fields(json_config, source_name);
  ModelConfig c;
  c.architecture = read_architecture(fields);
  c.model_type = fields.string("model_type").value_or("");
  check_unsupported_features(fields);
  c.fp8 = parse_quantization_config(json_config, source_name);

  c.vocab_size = fields.required_positive_int("vocab_size");
  c.hidden_size = fields.required_positive_int("hidden_size");
  c.intermediate_size = fields.required_positive_int("intermediate_size");
  c.num_hidden_layers = fields.required_positive_int("num_hidden_layers");
  c.num_attention_heads = fields.required_positive_int("num_attention_heads");
  c.num_key_value_heads =
      fields.optional_positive_int("num_key_value_heads").value_or(c.num_attention_heads);
  c.max_position_embeddings = fields.required_positive_int("max_position_embeddings");
  if (const auto head_dim = fields.optional_positive_int("head_dim")) {
    c.head_dim = *head_dim;
  } else {
    SPINDLE_CHECK(c.hidden_size % c.num_attention_heads == 0,
                  "{}: field 'hidden_size' ({}) must be a multiple of field "
                  "'num_attention_heads' ({}) when 'head_dim' is not given",
                  source_name, c.hidden_size, c.num_attention_heads);
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  check_shapes(fields, c);

  c.rms_norm_eps = fields.positive_number("rms_norm_eps", 1e-6);
  c.rope_theta = fields.positive_number("rope_theta", 10000.0);
  if (const json* params = fields.find("rope_parameters"); params != nullptr && params->is_object()) {
    c.rope_scaling = read_rope_scaling(fields, "rope_parameters");
    c.rope_theta = FieldReader(*params, source_name, "rope_parameters.").positive_number("rope_theta", c.rope_theta);
  } else {
    c.rope_scaling = read_rope_scaling(fields, "rope_scaling");
  }
  c.tie_word_embeddings = fields.boolean("tie_word_embeddings", false);
  if (c.architecture == Architecture::kQwen2) {
    c.attention_bias = true;
  } else if (c.architecture == Architecture::kQwen2Moe) {
    c.attention_bias = fields.boolean("qkv_bias", true);
  } else {
    c.attention_bias = fields.boolean("attention_bias", false);
  }
  c.qk_norm = c.architecture == Architecture::kQwen3 || c.architecture == Architecture::kQwen3Moe;
  if (is_qwen_moe(c.architecture) || c.architecture == Architecture::kMixtral) c.moe = read_moe(fields, c);

  auto dtype_field = "torch_dtype";
  auto dtype_text = fields.string(dtype_field);
  if (!dtype_text) {
    dtype_field = "dtype";
    dtype_text = fields.string(dtype_field);
  }
  if (dtype_text) {
    const auto dtype = parse_dtype(*dtype_text);
    SPINDLE_CHECK(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
                  "{}: field '{}' must be one of \"float32\", \"float16\", \"bfloat16\", got "
                  "\"{}\"",
                  source_name, dtype_field, *dtype_text);
    c.torch_dtype = *dtype;
  }

  c.bos_token_ids = fields.token_ids("bos_token_id", c.vocab_size);
  c.eos_token_ids = fields.token_ids("eos_token_id", c.vocab_size);
  check_sliding_window(fields, c);
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  if (is_gguf_path(model_dir)) return load_gguf_model_config(model_dir);
  SPINDLE_CHECK(model_dir.extension() != ".gguf", "{}: no such GGUF file (a model is a Hugging Face folder or a "
                ".gguf file)", model_dir.string());
  const auto path = model_dir / "config.json";
  SPINDLE_CHECK(std::filesystem::is_regular_file(path),
                "{} not found: a model folder must hold the Hugging Face config.json",
                path.string());
  const std::string text = read_text_file(path);
  const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  SPINDLE_CHECK(!parsed.is_discarded(), "{}: not valid JSON", path.string());
  return parse_model_config(parsed, path.string());
}

uint64_t kv_bytes_per_token(const ModelConfig& config, DType kv_dtype, int tp_size) {
  SPINDLE_CHECK(tp_size >= 1, "tensor-parallel size must be at least 1, got {}", tp_size);
  const uint64_t kv_heads_per_rank =
      static_cast<uint64_t>(std::max(1, config.num_key_value_heads / tp_size));
  uint64_t bytes = static_cast<uint64_t>(config.num_hidden_layers) * 2;
  for (const uint64_t factor : {kv_heads_per_rank, static_cast<uint64_t>(config.head_dim),
                                static_cast<uint64_t>(dtype_size(kv_dtype))}) {
    SPINDLE_CHECK(!__builtin_mul_overflow(bytes, factor, &bytes),
                  "KV bytes per token overflow 64 bits ({} layers, head_dim {})",
                  config.num_hidden_layers, config.head_dim);
  }
  return bytes;
}

}  // namespace spindle
