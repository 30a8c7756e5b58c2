// Element types of weights, activations and the KV cache.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace spindle {

enum class DType { kF32, kF16, kBF16, kI8, kU8, kF8E4M3 };

// The safetensors spelling: "F32", "F16", "BF16", "I8", "U8", "F8_E4M3".
std::string_view dtype_name(DType dtype);
// Bytes per element.
size_t dtype_size(DType dtype);
// Exactly the safetensors spelling (see dtype_name); nullopt for anything else.
std::optional<DType> parse_safetensors_dtype(std::string_view name);
// Lenient, for flags and config files: the safetensors names in any case, the torch names
// ("float32", "float16", "bfloat16", "int8", "uint8", "float8_e4m3fn") and the short names
// ("fp32", "fp16", "bf16", "fp8", "fp8_e4m3"). nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view name);
// The --kv-cache-dtype spelling of a KV dtype: "bf16", "fp16", "f32", "fp8_e4m3" (others: dtype_name).
std::string_view kv_cache_dtype_name(DType dtype);

}  // namespace spindle
