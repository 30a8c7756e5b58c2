#include "gguf/quantize_q8_0.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gguf/ggml_blocks.h"
#include "util/error.h"

namespace spindle::gguf {
namespace {

// One block from 32 f32 values; `index` names it in errors.
void quantize_block(const float* x, int64_t index, std::byte* out) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    SPINDLE_CHECK(std::isfinite(x[j]), "Q8_0 quantization: block {} (values {}..{}) holds {} at value {}", index,
                  index * kQK, index * kQK + kQK - 1, x[j], index * kQK + j);
    amax = std::fmax(amax, std::fabs(x[j]));
  }
  const float d = amax / 127.0f;
  const uint16_t d16 = float_to_fp16_bits(d);
  SPINDLE_CHECK((d16 & 0x7c00u) != 0x7c00u,
                "Q8_0 quantization: block {} (values {}..{}) has max |x| = {}, whose scale {} overflows fp16", index,
                index * kQK, index * kQK + kQK - 1, amax, d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ8_0 b;
  b.d = d16;
  for (int j = 0; j < kQK; ++j) {
    // x * id is within a few ulps of [-127, 127]; where 1 / d overflows (d below 2^-128, whose
    // fp16 is 0 anyway) x / d keeps the definition without an infinity.
    const float v = std::isfinite(id) ? x[j] * id : x[j] / d;
    b.qs[j] = static_cast<int8_t>(std::clamp(std::round(v), -127.0f, 127.0f));
  }
  std::memcpy(out, &b, sizeof(b));
}

void check_sizes(size_t count, size_t dst_bytes) {
  SPINDLE_CHECK(count % kQK == 0, "Q8_0 quantization: {} values are not a multiple of the block size {}", count, kQK);
  SPINDLE_CHECK(dst_bytes == count / kQK * sizeof(BlockQ8_0),
                "Q8_0 quantization: {} output bytes given, {} values need {}", dst_bytes, count,
                count / kQK * sizeof(BlockQ8_0));
}

}  // namespace

static_assert(sizeof(BlockQ8_0) == kQ8_0BlockBytes);

int64_t q8_0_bytes(int64_t count) {
  SPINDLE_CHECK(count >= 0 && count % kQK == 0, "Q8_0: {} values are not a multiple of the block size {}", count,
                kQK);
  return count / kQK * kQ8_0BlockBytes;
}

void quantize_row_q8_0(std::span<const float> src, std::span<std::byte> dst) {
  check_sizes(src.size(), dst.size());
  for (size_t b = 0; b < src.size() / kQK; ++b) {
    quantize_block(src.data() + b * kQK, static_cast<int64_t>(b), dst.data() + b * sizeof(BlockQ8_0));
  }
}

void quantize_row_q8_0(std::span<const bf16> src, std::span<std::byte> dst) {
  check_sizes(src.size(), dst.size());
  float x[kQK];
  for (size_t b = 0; b < src.size() / kQK; ++b) {
    for (int j = 0; j < kQK; ++j) x[j] = to_float(src[b * kQK + j]);  // exact
    quantize_block(x, static_cast<int64_t>(b), dst.data() + b * sizeof(BlockQ8_0));
  }
}

}  // namespace spindle::gguf
