#include "gguf/dequantize.h"

#include <cstring>

#include "gguf/ggml_blocks.h"
#include "util/error.h"
#include "util/half.h"

namespace spindle::gguf {
namespace {

float half(uint16_t bits) { return fp16_bits_to_float(bits); }

// Block i of a row, copied out (file data need not be aligned for the struct).
template <typename Block>
Block block_at(std::span<const std::byte> src, size_t i) {
  Block b;
  std::memcpy(&b, src.data() + i * sizeof(Block), sizeof(Block));
  return b;
}

void q8_0(const BlockQ8_0& b, float* y) {
  const float d = half(b.d);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(b.qs[j]);
}

void q4_0(const BlockQ4_0& b, float* y) {
  const float d = half(b.d);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>((b.qs[j] & 15) - 8);
    y[j + kQK / 2] = d * static_cast<float>((b.qs[j] >> 4) - 8);
  }
}

void q4_1(const BlockQ4_1& b, float* y) {
  const float d = half(b.d);
  const float m = half(b.m);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>(b.qs[j] & 15) + m;
    y[j + kQK / 2] = d * static_cast<float>(b.qs[j] >> 4) + m;
  }
}

// The 5-bit values of a Q5_0 / Q5_1 block: nibbles plus bit j of qh as bit 4 of element j.
void q5_values(const uint8_t* qh_bytes, const uint8_t* qs, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = (qs[j] & 15) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + kQK / 2] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + kQK / 2)) & 1u) << 4);
  }
}

void q5_0(const BlockQ5_0& b, float* y) {
  int q[kQK];
  q5_values(b.qh, b.qs, q);
  const float d = half(b.d);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(q[j] - 16);
}

void q5_1(const BlockQ5_1& b, float* y) {
  int q[kQK];
  q5_values(b.qh, b.qs, q);
  const float d = half(b.d);
  const float m = half(b.m);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(q[j]) + m;
}

// Scale and min of sub-block s (0..7) from the 12 packed bytes of a Q4_K / Q5_K block.
void k_scale_min(const uint8_t* scales, int s, int* sc, int* m) {
  if (s < 4) {
    *sc = scales[s] & 63;
    *m = scales[s + 4] & 63;
  } else {
    *sc = (scales[s + 4] & 15) | ((scales[s - 4] >> 6) << 4);
    *m = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
  }
}

// Q4_K (qh == nullptr) and Q5_K: 8 sub-blocks of 32 elements.
void q45_k(uint16_t d_bits, uint16_t dmin_bits, const uint8_t* scales, const uint8_t* qh,
           const uint8_t* qs, float* y) {
  const float d = half(d_bits);
  const float dmin = half(dmin_bits);
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    k_scale_min(scales, s, &sc, &m);
    const float scale = d * static_cast<float>(sc);
    const float min = dmin * static_cast<float>(m);
    const uint8_t* q = qs + 32 * (s / 2);
    const int shift = (s & 1) * 4;
    for (int l = 0; l < 32; ++l) {
      int value = (q[l] >> shift) & 15;
      if (qh != nullptr) value |= ((qh[l] >> s) & 1) << 4;
      y[32 * s + l] = scale * static_cast<float>(value) - min;
    }
  }
}

void q6_k(const BlockQ6_K& b, float* y) {
  const float d = half(b.d);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    const int8_t* sc = b.scales + 8 * h;
    for (int l = 0; l < 32; ++l) {
      const int q0 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q1 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      const int is = l / 16;
      float* out = y + 128 * h + l;
      out[0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q0);
      out[32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q1);
      out[64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q2);
      out[96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q3);
    }
  }
}

template <typename Block, typename F>
void each_block(std::span<const std::byte> src, std::span<float> dst, int elements, F&& f) {
  const size_t blocks = dst.size() / elements;
  for (size_t i = 0; i < blocks; ++i) f(block_at<Block>(src, i), dst.data() + i * elements);
}

void plain(GgmlType type, std::span<const std::byte> src, std::span<float> dst) {
  for (size_t i = 0; i < dst.size(); ++i) {
    if (type == GgmlType::kF32) {
      std::memcpy(&dst[i], src.data() + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, src.data() + 2 * i, 2);
      dst[i] = type == GgmlType::kF16 ? fp16_bits_to_float(bits) : bf16_bits_to_float(bits);
    }
  }
}

}  // namespace

bool can_dequantize(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ8_0:
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1:
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void dequantize_row(GgmlType type, std::span<const std::byte> src, std::span<float> dst) {
  SPINDLE_CHECK(can_dequantize(type), "dequantize: ggml type {} is not supported (supported: F32, "
                "F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)", ggml_type_name(type));
  const size_t block = ggml_block_elements(type);
  SPINDLE_CHECK(dst.size() % block == 0 && src.size() == dst.size() / block * ggml_block_bytes(type),
                "dequantize: {} elements of {} need {} bytes in whole blocks of {}, got {} bytes",
                dst.size(), ggml_type_name(type), dst.size() / block * ggml_block_bytes(type),
                block, src.size());
  switch (type) {
    case GgmlType::kQ8_0: return each_block<BlockQ8_0>(src, dst, kQK, q8_0);
    case GgmlType::kQ4_0: return each_block<BlockQ4_0>(src, dst, kQK, q4_0);
    case GgmlType::kQ4_1: return each_block<BlockQ4_1>(src, dst, kQK, q4_1);
    case GgmlType::kQ5_0: return each_block<BlockQ5_0>(src, dst, kQK, q5_0);
    case GgmlType::kQ5_1: return each_block<BlockQ5_1>(src, dst, kQK, q5_1);
    case GgmlType::kQ4_K:
      return each_block<BlockQ4_K>(src, dst, kQK_K, [](const BlockQ4_K& b, float* y) {
        q45_k(b.d, b.dmin, b.scales, nullptr, b.qs, y);
      });
    case GgmlType::kQ5_K:
      return each_block<BlockQ5_K>(src, dst, kQK_K, [](const BlockQ5_K& b, float* y) {
        q45_k(b.d, b.dmin, b.scales, b.qh, b.qs, y);
      });
    case GgmlType::kQ6_K: return each_block<BlockQ6_K>(src, dst, kQK_K, q6_k);
    default: return plain(type, src, dst);
  }
}

void dequantize_tensor_row(const TensorInfo& info, std::span<const std::byte> data, uint64_t row,
                           std::span<float> dst) {
  SPINDLE_CHECK(row < info.num_rows() && dst.size() == info.ne[0] && data.size() == info.size,
                "tensor '{}': row {} of {} into {} floats (ne[0] = {}, {} of {} bytes)", info.name,
                row, info.num_rows(), dst.size(), info.ne[0], data.size(), info.size);
  SPINDLE_CHECK(can_dequantize(info.type), "tensor '{}': ggml type {} cannot be dequantized",
                info.name, ggml_type_name(info.type));
  const uint64_t row_bytes = info.row_bytes();
  dequantize_row(info.type, data.subspan(row * row_bytes, row_bytes), dst);
}

}  // namespace spindle::gguf
