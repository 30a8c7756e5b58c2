#include "model/fp8_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_map>

#include "util/error.h"
#include "util/half.h"

namespace spindle {
namespace {

constexpr std::string_view kWeightSuffix = ".weight";
constexpr std::string_view kInputScale = "input_scale";
constexpr std::string_view kScaleSuffixes[] = {"weight_scale_inv", "weight_scale", kInputScale};

bool is_linear_weight_name(std::string_view name) {
  return name == "lm_head.weight" || name.ends_with("_proj.weight");
}

bool is_scale_dtype(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

// "model.layers.0.mlp.up_proj.weight_scale_inv" -> {"model.layers.0.mlp.up_proj.weight", "weight_scale_inv"};
// empty when `name` is no scale name.
std::pair<std::string, std::string_view> split_aux(std::string_view name) {
  for (std::string_view suffix : kScaleSuffixes) {
    if (name.size() > suffix.size() && name.ends_with(suffix) && name[name.size() - suffix.size() - 1] == '.') {
      return {std::string(name.substr(0, name.size() - suffix.size())) + "weight", suffix};
    }
  }
  return {};
}

bool is_fp8_weight(const ModelConfig& config, const TensorInfo& t) {
  return t.dtype == DType::kF8E4M3 && fp8_weight_problem(config, t).empty();
}

// The scale tensor of FP8 weight `weight` in `by_name` (the config's suffixes in order), or null.
const TensorInfo* find_scale(const Fp8Quantization& fp8, std::string_view weight,
                             const std::function<const TensorInfo*(const std::string&)>& find) {
  const std::string module(weight.substr(0, weight.size() - kWeightSuffix.size()));
  for (const std::string& suffix : fp8.scale_suffixes) {
    if (const TensorInfo* t = find(module + "." + suffix)) return t;
  }
  return nullptr;
}

// "" when `scale` fits FP8 weight `weight` in `mode`, else the problem.
std::string scale_problem(Fp8ScaleMode mode, const TensorInfo& weight, const TensorInfo& scale) {
  const int64_t out = weight.shape.size() == 2 ? weight.shape[0] : 0, in = weight.shape.size() == 2 ? weight.shape[1] : 0;
  const auto shapes = fp8_scale_shapes(mode, out, in);
  if (std::find(shapes.begin(), shapes.end(), scale.shape) == shapes.end()) {
    return fmt::format("{}: expected {} ({} scale of {} {}), found {}", scale.name, format_shape(shapes.front()),
                       fp8_scale_mode_name(mode), weight.name, format_shape(weight.shape), format_shape(scale.shape));
  }
  if (!is_scale_dtype(scale.dtype)) {
    return fmt::format("{}: {} (FP8 scales must be F32, BF16 or F16)", scale.name, dtype_name(scale.dtype));
  }
  return "";
}

// The one value of an X.input_scale tensor; throws naming it when it is not one F32, BF16 or F16 element.
float input_scale_value(const Checkpoint& checkpoint, const TensorInfo& t, const std::string& where) {
  SPINDLE_CHECK(t.num_elements() == 1 && is_scale_dtype(t.dtype), "{}: its input scale {} is {} {}; one F32, BF16 or "
                "F16 value expected", where, t.name, dtype_name(t.dtype), format_shape(t.shape));
  const std::span<const std::byte> b = checkpoint.tensor(t.name).bytes;
  float v = 0;
  uint16_t h = 0;
  if (t.dtype == DType::kF32) {
    std::memcpy(&v, b.data(), 4);
    return v;
  }
  std::memcpy(&h, b.data(), 2);
  return t.dtype == DType::kBF16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h);
}

}  // namespace

std::string fp8_weight_problem(const ModelConfig& config, const TensorInfo& t) {
  const std::string plain = fmt::format("{}: {} (weights must be F32, F16 or BF16", t.name, dtype_name(t.dtype));
  if (t.dtype != DType::kF8E4M3) return plain + ")";
  if (!config.fp8) return plain + "; an F8_E4M3 weight needs an FP8 quantization_config in config.json)";
  if (!is_linear_weight_name(t.name) || t.shape.size() != 2) return plain + "; only linear weights may be FP8)";
  if (config.fp8->is_ignored(weight_module(t.name))) {
    return plain + "; its module is listed as not converted in quantization_config)";
  }
  return "";
}

bool is_fp8_aux_name(const ModelConfig& config, std::string_view name) {
  return config.fp8.has_value() && !split_aux(name).first.empty();
}

void compare_fp8_scales(const ModelConfig& config, const std::vector<TensorInfo>& tensors, WeightCheck& check) {
  if (!config.fp8) return;
  std::unordered_map<std::string_view, const TensorInfo*> by_name;
  for (const auto& t : tensors) by_name.emplace(t.name, &t);
  auto find = [&](const std::string& name) -> const TensorInfo* {
    const auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  };
  for (const TensorInfo& t : tensors) {
    if (is_fp8_weight(config, t)) {
      const TensorInfo* scale = find_scale(*config.fp8, t.name, find);
      if (scale == nullptr) {
        check.missing.push_back(fmt::format("{}.{} {} (the {} scale of FP8 weight {})", weight_module(t.name),
                                            config.fp8->scale_suffixes.front(),
                                            format_shape(fp8_scale_shapes(config.fp8->mode, t.shape[0], t.shape[1]).front()),
                                            fp8_scale_mode_name(config.fp8->mode), t.name));
        continue;
      }
      const std::string problem = scale_problem(config.fp8->mode, t, *scale);
      if (problem.empty()) continue;
      (is_scale_dtype(scale->dtype) ? check.shape_mismatches : check.wrong_dtypes).push_back(problem);
      continue;
    }
    const auto [weight, suffix] = split_aux(t.name);
    if (weight.empty()) continue;
    const TensorInfo* w = find(weight);
    const bool belongs = w != nullptr && is_fp8_weight(config, *w) &&
                         (suffix == kInputScale ? t.num_elements() == 1
                                                : find_scale(*config.fp8, weight, find) == &t);
    if (!belongs) {
      check.unexpected.push_back(fmt::format("{} {} {} (no FP8 weight {} uses it)", t.name, format_shape(t.shape),
                                             dtype_name(t.dtype), weight));
    }
  }
}

WeightScale fp8_weight_scale(const Checkpoint& checkpoint, const std::optional<Fp8Quantization>& fp8,
                             const TensorInfo& weight) {
  const std::string where = checkpoint.dir().string() + ": tensor " + weight.name;
  SPINDLE_CHECK(fp8.has_value(), "{} is F8_E4M3, but config.json has no FP8 quantization_config", where);
  const TensorInfo* scale =
      find_scale(*fp8, weight.name, [&](const std::string& name) { return checkpoint.find(name); });
  SPINDLE_CHECK(scale != nullptr, "{} is FP8 without its scale {}.{}: an FP8 weight is never loaded unscaled", where,
                weight_module(weight.name), fp8->scale_suffixes.front());
  const std::string problem = scale_problem(fp8->mode, weight, *scale);
  SPINDLE_CHECK(problem.empty(), "{}: its scale does not fit: {}", where, problem);
  WeightScale s;
  s.name = scale->name;
  s.mode = fp8->mode;
  s.dtype = scale->dtype;
  s.shape = scale->shape;
  s.bytes = checkpoint.tensor(scale->name).bytes;
  const std::string input_name = weight_module(weight.name) + "." + std::string(kInputScale);
  if (const TensorInfo* input = checkpoint.find(input_name)) s.input_scale = input_scale_value(checkpoint, *input, where);
  return s;
}

}  // namespace spindle
