// The tensor element types a GGUF file may name (ggml's type ids) and their block layouts.
//
// A GGUF tensor of type T stores its innermost dimension (ne0) in blocks of
// ggml_block_elements(T) elements, each ggml_block_bytes(T) bytes; ne0 must be a multiple of the
// block size. Plain types (F32, F16, BF16, I8..F64) are blocks of one element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace spindle::gguf {

// The numeric ids are the file format's (ids 4, 5, 31-33 and 36-38 were removed from ggml and
// are rejected as unknown).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
  kQ2_0 = 42,
};

// nullopt for ids no ggml type has (or had and removed).
std::optional<GgmlType> ggml_type_from_id(uint32_t id);
// "F32", "Q4_K", ... (ggml's spelling).
std::string_view ggml_type_name(GgmlType type);
// Elements per block (1 for plain types).
uint32_t ggml_block_elements(GgmlType type);
// Bytes per block.
uint32_t ggml_block_bytes(GgmlType type);

}  // namespace spindle::gguf
