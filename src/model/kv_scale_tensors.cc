#include "model/kv_scale_tensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cmath>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/half.h"

namespace spindle {
namespace {

// Suffixes after "model.layers.N.self_attn.", the K scale's and the V scale's, in the order looked for.
struct NamePair {
  std::string_view k, v;
};
constexpr std::array<NamePair, 5> kNamePairs = {{
    {"k_scale", "v_scale"},
    {"attn.k_scale", "attn.v_scale"},
    {"k_proj.k_scale", "v_proj.v_scale"},
    {"k_proj.output_scale", "v_proj.output_scale"},
    {"kv_scale", "kv_scale"},
}};

std::string layer_prefix(int layer) { return fmt::format("model.layers.{}.self_attn.", layer); }

float scalar_at(const TensorView& view, size_t i) {
  switch (view.info->dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, view.bytes.data() + i * 4, 4);
      return f;
    }
    case DType::kBF16:
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, view.bytes.data() + i * 2, 2);
      return view.info->dtype == DType::kBF16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h);
    }
    default:
      return 0.0f;  // refused before
  }
}

// The scale tensor `name` as num_kv_heads values (a scalar repeated), checked.
std::vector<float> read_scale(const Checkpoint& checkpoint, const std::string& name, int num_kv_heads) {
  const TensorInfo* t = checkpoint.find(name);
  const std::string where = fmt::format("{}: tensor {}", checkpoint.dir().string(), name);
  SPINDLE_CHECK(t->dtype == DType::kF32 || t->dtype == DType::kBF16 || t->dtype == DType::kF16,
                "{} is {}; KV-cache scales must be F32, BF16 or F16", where, dtype_name(t->dtype));
  const bool scalar = t->shape.empty() || (t->shape.size() == 1 && t->shape[0] == 1);
  const bool per_head = t->shape.size() == 1 && t->shape[0] == num_kv_heads;
  SPINDLE_CHECK(scalar || per_head, "{} has shape [{}]; a KV-cache scale is [] or [1] (per layer) or [{}] (per KV head)",
                where, fmt::join(t->shape, ", "), num_kv_heads);
  const TensorView view = checkpoint.tensor(name);
  std::vector<float> values(static_cast<size_t>(num_kv_heads));
  for (int h = 0; h < num_kv_heads; ++h) {
    const float x = scalar_at(view, scalar ? 0 : static_cast<size_t>(h));
    SPINDLE_CHECK(std::isfinite(x) && x > 0.0f, "{}: KV-cache scale {} (head {}) must be positive and finite", where, x, h);
    values[static_cast<size_t>(h)] = x;
  }
  return values;
}

}  // namespace

bool is_kv_scale_name(std::string_view name) {
  static const std::regex pattern(
      R"(model\.layers\.[0-9]+\.self_attn\.(k_scale|v_scale|kv_scale|attn\.k_scale|attn\.v_scale|k_proj\.k_scale|v_proj\.v_scale|k_proj\.output_scale|v_proj\.output_scale))");
  return std::regex_match(name.begin(), name.end(), pattern);
}

std::optional<KvScales> read_checkpoint_kv_scales(const Checkpoint& checkpoint, const ModelConfig& config) {
  const int num_layers = config.num_hidden_layers;
  const int num_kv_heads = config.num_key_value_heads;
  bool any = false;
  for (const auto& t : checkpoint.tensors()) any = any || is_kv_scale_name(t.name);
  if (!any) return std::nullopt;
  KvScales scales = KvScales::uniform(num_layers, num_kv_heads, 1.0f, "checkpoint");
  for (int layer = 0; layer < num_layers; ++layer) {
    const std::string prefix = layer_prefix(layer);
    const NamePair* found = nullptr;
    for (const auto& pair : kNamePairs) {
      if (checkpoint.find(prefix + std::string(pair.k)) != nullptr && checkpoint.find(prefix + std::string(pair.v)) != nullptr) {
        found = &pair;
        break;
      }
    }
    SPINDLE_CHECK(found != nullptr,
                  "{}: the checkpoint stores FP8 KV-cache scales, but layer {} has no K and V scale pair (looked for "
                  "{}k_scale and {}v_scale, or the attn., k_proj./v_proj. and kv_scale variants)",
                  checkpoint.dir().string(), layer, prefix, prefix);
    const auto k = read_scale(checkpoint, prefix + std::string(found->k), num_kv_heads);
    const auto v = read_scale(checkpoint, prefix + std::string(found->v), num_kv_heads);
    std::copy(k.begin(), k.end(), scales.k.begin() + static_cast<std::ptrdiff_t>(layer) * num_kv_heads);
    std::copy(v.begin(), v.end(), scales.v.begin() + static_cast<std::ptrdiff_t>(layer) * num_kv_heads);
  }
  return scales;
}

}  // namespace spindle
