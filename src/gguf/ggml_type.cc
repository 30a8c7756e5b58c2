#include "gguf/ggml_type.h"

#include <array>

#include "util/error.h"

namespace spindle::gguf {
namespace {

struct TypeTraits {
  GgmlType type;
  std::string_view name;
  uint32_t block_elements;
  uint32_t block_bytes;
};

// Block sizes from the block structs of ggml (ggml-common.h): e.g. Q4_K is 256 elements in
// d, dmin (fp16), 12 bytes of 6-bit scales and mins, 128 bytes of nibbles = 144 bytes.
constexpr std::array<TypeTraits, 35> kTypes{{
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},
    {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},
    {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},
    {GgmlType::kQ8_1, "Q8_1", 32, 36},
    {GgmlType::kQ2_K, "Q2_K", 256, 84},
    {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144},
    {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210},
    {GgmlType::kQ8_K, "Q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 50},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 110},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::kI8, "I8", 1, 1},
    {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},
    {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 56},
    {GgmlType::kBF16, "BF16", 1, 2},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 54},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66},
    {GgmlType::kMXFP4, "MXFP4", 32, 17},
    {GgmlType::kNVFP4, "NVFP4", 64, 36},
    {GgmlType::kQ1_0, "Q1_0", 128, 18},
    {GgmlType::kQ2_0, "Q2_0", 64, 18},
}};

const TypeTraits& traits(GgmlType type) {
  for (const TypeTraits& t : kTypes) {
    if (t.type == type) return t;
  }
  SPINDLE_FAIL("ggml type id {} has no traits", static_cast<uint32_t>(type));
}

}  // namespace

std::optional<GgmlType> ggml_type_from_id(uint32_t id) {
  for (const TypeTraits& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return t.type;
  }
  return std::nullopt;
}

std::string_view ggml_type_name(GgmlType type) { return traits(type).name; }
uint32_t ggml_block_elements(GgmlType type) { return traits(type).block_elements; }
uint32_t ggml_block_bytes(GgmlType type) { return traits(type).block_bytes; }

}  // namespace spindle::gguf
