#include "model/fp8_config.h"

#include <nlohmann/json.hpp>
#include <regex>

#include "util/error.h"

namespace spindle {
namespace {

using nlohmann::json;

std::string describe(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 80 ? text.substr(0, 80) + "..." : text;
}

// The list of strings at key (absent / null: empty); each error names source and field.
std::vector<std::string> string_list(const json& q, const char* key, std::string_view source) {
  std::vector<std::string> out;
  const auto it = q.find(key);
  if (it == q.end() || it->is_null()) return out;
  SPINDLE_CHECK(it->is_array(), "{}: field 'quantization_config.{}' must be a list of module names, got {}", source,
                key, describe(*it));
  for (const json& item : *it) {
    SPINDLE_CHECK(item.is_string(), "{}: field 'quantization_config.{}' must hold strings, got {}", source, key,
                  describe(item));
    out.push_back(item.get<std::string>());
  }
  return out;
}

// quant_method "fp8": per-tensor, or 128x128 blocks with weight_scale_inv.
Fp8Quantization parse_fp8(const json& q, std::string_view source) {
  Fp8Quantization f;
  f.method = "fp8";
  if (const auto fmt = q.find("fmt"); fmt != q.end() && !fmt->is_null()) {
    SPINDLE_CHECK(fmt->is_string() && fmt->get<std::string>() == "e4m3",
                  "{}: field 'quantization_config.fmt' is {}; only \"e4m3\" FP8 weights are supported", source,
                  describe(*fmt));
  }
  const std::string scheme = q.contains("activation_scheme") && q["activation_scheme"].is_string()
                                 ? q["activation_scheme"].get<std::string>()
                                 : "dynamic";
  SPINDLE_CHECK(scheme == "dynamic" || scheme == "static",
                "{}: field 'quantization_config.activation_scheme' is \"{}\"; must be \"dynamic\" or \"static\"", source,
                scheme);
  f.static_input_scale = scheme == "static";
  const auto block = q.find("weight_block_size");
  if (block == q.end() || block->is_null()) {
    f.mode = Fp8ScaleMode::kPerTensor;
    f.scale_suffixes = {"weight_scale", "weight_scale_inv"};
  } else {
    SPINDLE_CHECK(*block == json::array({kFp8BlockSize, kFp8BlockSize}),
                  "{}: field 'quantization_config.weight_block_size' is {}; only [128, 128] is supported", source,
                  describe(*block));
    f.mode = Fp8ScaleMode::kBlock128;
    f.scale_suffixes = {"weight_scale_inv"};
  }
  for (const char* key : {"ignored_layers", "modules_to_not_convert"}) {
    for (auto& name : string_list(q, key, source)) f.ignored.push_back(std::move(name));
  }
  return f;
}

// One config group's weights / input_activations of compressed-tensors; returns the weight mode.
Fp8ScaleMode parse_group(const std::string& group, const json& g, std::string_view source, bool& static_input) {
  const std::string where = "quantization_config.config_groups." + group;
  SPINDLE_CHECK(g.is_object() && g.contains("weights") && g["weights"].is_object(),
                "{}: field '{}.weights' is missing or not an object", source, where);
  const json& w = g["weights"];
  const bool fp8 = w.value("type", std::string()) == "float" && w.value("num_bits", 0) == 8 &&
                   w.value("symmetric", true) && !w.value("dynamic", false);
  SPINDLE_CHECK(fp8,
                "{}: field '{}.weights' is {}; only float8 weights (type \"float\", num_bits 8, symmetric, "
                "not dynamic) are supported",
                source, where, describe(w));
  const std::string strategy = w.value("strategy", std::string());
  SPINDLE_CHECK(strategy == "tensor" || strategy == "channel",
                "{}: field '{}.weights.strategy' is \"{}\"; only \"tensor\" and \"channel\" are supported", source,
                where, strategy);
  if (const auto a = g.find("input_activations"); a != g.end() && a->is_object()) {
    SPINDLE_CHECK(a->value("type", std::string("float")) == "float" && a->value("num_bits", 8) == 8,
                  "{}: field '{}.input_activations' is {}; only float8 activations are supported", source, where,
                  describe(*a));
    static_input = static_input || !a->value("dynamic", true);
  }
  return strategy == "tensor" ? Fp8ScaleMode::kPerTensor : Fp8ScaleMode::kPerChannel;
}

// quant_method "compressed-tensors" with float8 weights (per tensor or per channel).
Fp8Quantization parse_compressed_tensors(const json& q, std::string_view source) {
  Fp8Quantization f;
  f.method = "compressed-tensors";
  f.scale_suffixes = {"weight_scale"};
  const std::string format = q.value("format", std::string("float-quantized"));
  SPINDLE_CHECK(format == "float-quantized" || format == "naive-quantized",
                "{}: field 'quantization_config.format' is \"{}\"; only float-quantized (float8) compressed-tensors "
                "checkpoints are supported",
                source, format);
  // kv_cache_scheme: the checkpoint stores FP8 KV-cache scales (model/kv_scale_tensors.h), used
  // when the KV cache is fp8_e4m3 (--kv-cache-dtype), ignored otherwise.
  const auto kv = q.find("kv_cache_scheme");
  if (kv != q.end() && !kv->is_null()) {
    SPINDLE_CHECK(kv->is_object() && kv->value("num_bits", 0) == 8 && kv->value("type", std::string()) == "float",
                  "{}: field 'quantization_config.kv_cache_scheme' is {}; only 8-bit float (E4M3) KV-cache scales "
                  "are supported",
                  source, kv->dump());
    const std::string strategy = kv->value("strategy", std::string("tensor"));
    SPINDLE_CHECK(strategy == "tensor" || strategy == "attn_head",
                  "{}: field 'quantization_config.kv_cache_scheme.strategy' is \"{}\"; tensor or attn_head are "
                  "supported",
                  source, strategy);
  }
  const auto groups = q.find("config_groups");
  SPINDLE_CHECK(groups != q.end() && groups->is_object() && !groups->empty(),
                "{}: field 'quantization_config.config_groups' is missing or empty", source);
  bool first = true;
  for (const auto& [name, group] : groups->items()) {
    const Fp8ScaleMode mode = parse_group(name, group, source, f.static_input_scale);
    SPINDLE_CHECK(first || mode == f.mode,
                  "{}: field 'quantization_config.config_groups' mixes per-tensor and per-channel weights; one "
                  "strategy for every group is supported",
                  source);
    f.mode = mode;
    first = false;
  }
  f.ignored = string_list(q, "ignore", source);
  return f;
}

}  // namespace

std::string_view fp8_scale_mode_name(Fp8ScaleMode mode) {
  switch (mode) {
    case Fp8ScaleMode::kPerTensor: return "per-tensor";
    case Fp8ScaleMode::kPerChannel: return "per-channel";
    case Fp8ScaleMode::kBlock128: return "block 128x128";
  }
  return "?";
}

bool Fp8Quantization::is_ignored(std::string_view module) const {
  for (const std::string& entry : ignored) {
    if (entry.starts_with("re:")) {
      if (std::regex_match(module.begin(), module.end(), std::regex(entry.substr(3)))) return true;
      continue;
    }
    // A listed name matches the module or its last components ("lm_head", "mlp.gate").
    if (module == entry || (module.size() > entry.size() && module.ends_with(entry) &&
                            module[module.size() - entry.size() - 1] == '.')) {
      return true;
    }
  }
  return false;
}

std::optional<Fp8Quantization> parse_quantization_config(const json& config, std::string_view source) {
  const auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return std::nullopt;
  const json& q = *it;
  SPINDLE_CHECK(q.is_object(), "{}: field 'quantization_config' must be an object, got {}", source, describe(q));
  const std::string method = q.contains("quant_method") && q["quant_method"].is_string()
                                 ? q["quant_method"].get<std::string>()
                                 : "?";
  if (method == "fp8") return parse_fp8(q, source);
  if (method == "compressed-tensors") return parse_compressed_tensors(q, source);
  SPINDLE_FAIL(
      "{}: field 'quantization_config' has quant_method '{}', which is not supported; Spindle serves FP8 checkpoints "
      "(quant_method \"fp8\", or \"compressed-tensors\" with float8 weights) and unquantized (bf16/fp16/fp32) ones",
      source, method);
}

std::string weight_module(std::string_view weight_name) {
  const size_t dot = weight_name.rfind('.');
  return std::string(dot == std::string_view::npos ? weight_name : weight_name.substr(0, dot));
}

std::vector<std::vector<int64_t>> fp8_scale_shapes(Fp8ScaleMode mode, int64_t out, int64_t in) {
  switch (mode) {
    case Fp8ScaleMode::kPerTensor: return {{}, {1}};
    case Fp8ScaleMode::kPerChannel: return {{out, 1}, {out}};
    case Fp8ScaleMode::kBlock128:
      return {{(out + kFp8BlockSize - 1) / kFp8BlockSize, (in + kFp8BlockSize - 1) / kFp8BlockSize}};
  }
  return {};
}

}  // namespace spindle
