// Dequantization of ggml-typed rows to f32: the definition every faster kernel is checked against
// (no SIMD here). Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (the
// layouts in ggml_blocks.h). Each output is the exact value of its block formula rounded once to
// f32 (the products of fp16 scales and small integers are exact in f32; Q6_K's d * scale * q
// rounds once).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "gguf/gguf_file.h"

namespace spindle::gguf {

// Whether dequantize_row handles the type.
bool can_dequantize(GgmlType type);

// dst.size() elements (a multiple of the type's block size) from src, which must hold exactly
// dst.size() / block_elements blocks. Throws naming the type when it is not supported or the
// sizes do not match.
void dequantize_row(GgmlType type, std::span<const std::byte> src, std::span<float> dst);

// Row `row` (of num_rows()) of a tensor whose bytes are `data` (GgufFile::tensor_data): ne[0]
// floats into dst (e.g. one embedding row of a quantized table). Throws naming the tensor.
void dequantize_tensor_row(const TensorInfo& info, std::span<const std::byte> data, uint64_t row,
                           std::span<float> dst);

}  // namespace spindle::gguf
