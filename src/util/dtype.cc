#include "util/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>

namespace spindle {
namespace {

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeEntry, 6> kDTypes = {{
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kF8E4M3, "F8_E4M3", 1},
}};

// Lower-case aliases accepted by parse_dtype in addition to the safetensors names.
constexpr std::array<std::pair<std::string_view, DType>, 13> kAliases = {{
    {"float32", DType::kF32},
    {"fp32", DType::kF32},
    {"float16", DType::kF16},
    {"half", DType::kF16},
    {"fp16", DType::kF16},
    {"bfloat16", DType::kBF16},
    {"bf16", DType::kBF16},
    {"int8", DType::kI8},
    {"uint8", DType::kU8},
    {"float8_e4m3fn", DType::kF8E4M3},
    {"fp8", DType::kF8E4M3},
    {"fp8_e4m3", DType::kF8E4M3},
    {"f8_e4m3", DType::kF8E4M3},
}};

const DTypeEntry& entry(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  return kDTypes[0];  // unreachable for valid enum values
}

}  // namespace

std::string_view dtype_name(DType dtype) { return entry(dtype).name; }

size_t dtype_size(DType dtype) { return entry(dtype).size; }

std::string_view kv_cache_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
    case DType::kF32: return "f32";
    case DType::kF8E4M3: return "fp8_e4m3";
    default: return dtype_name(dtype);
  }
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  for (const auto& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  return std::nullopt;
}

std::optional<DType> parse_dtype(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& e : kDTypes) {
    std::string e_lower(e.name);
    std::transform(e_lower.begin(), e_lower.end(), e_lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (e_lower == lower) return e.dtype;
  }
  for (const auto& [alias, dtype] : kAliases) {
    if (alias == lower) return dtype;
  }
  return std::nullopt;
}

}  // namespace spindle
