// Q8_0 quantization of f32 / bf16 values into GGUF Q8_0 blocks (ggml_blocks.h's BlockQ8_0, 34
// bytes: d fp16 | qs int8[32]), for `--quantization q8_0` on a bf16/f32 safetensors checkpoint.
//
// Per block of 32 consecutive values x[0..31], from the format's definition:
//   amax = max |x[j]|,  d = amax / 127 (f32),  id = 1 / d (0 when d = 0),
//   qs[j] = round-half-away-from-zero(x[j] * id) (f32 product; |qs| <= 127),  stored d = fp16(d)
// (round to nearest even). This is the arithmetic of ggml's reference quantizer, so the blocks
// equal what llama-quantize writes for the same values (the quants use the f32 d, not the fp16
// one). Dequantized (gguf::dequantize_row), each value is d16 * qs[j]: within d / 2 plus
// 127 * |d16 - d| of x[j] (tests/gguf/quantize_q8_0_test.cc).
//
// A [n, k] tensor with k a multiple of 32 is quantized by one call over its n * k values (blocks
// never straddle rows); the output is then the GGUF tensor's bytes, n * k / 32 * 34.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "util/half.h"

namespace spindle::gguf {

inline constexpr int64_t kQ8_0BlockBytes = 34;

// Bytes of Q8_0 blocks for `count` values (count must be a multiple of 32).
int64_t q8_0_bytes(int64_t count);

// dst.size() must be q8_0_bytes(src.size()). Throws spindle::Error when the sizes do not fit or a
// block holds a non-finite value or one whose d overflows fp16 (|x| > 65504 * 127), naming the
// block and the value.
void quantize_row_q8_0(std::span<const float> src, std::span<std::byte> dst);
void quantize_row_q8_0(std::span<const bf16> src, std::span<std::byte> dst);

}  // namespace spindle::gguf
