// The ggml block layouts Spindle reads, as C++ structs (little-endian, packed as in the file; fp16
// scales kept as their bits). Each block holds block_elements consecutive elements of a row.
//
//   Q8_0  (32):  d fp16 | qs int8[32]                 x[j] = d * qs[j]
//   Q4_0  (32):  d fp16 | qs u8[16]                   x[j] = d * (nib[j] - 8)
//   Q4_1  (32):  d, m fp16 | qs u8[16]                x[j] = d * nib[j] + m
//   Q5_0  (32):  d fp16 | qh u32 | qs u8[16]          x[j] = d * ((nib[j] | bit_j(qh) << 4) - 16)
//   Q5_1  (32):  d, m fp16 | qh u32 | qs u8[16]       x[j] = d * (nib[j] | bit_j(qh) << 4) + m
//     where nib[j] = qs[j] & 15 for j < 16 and qs[j - 16] >> 4 for j >= 16.
//   Q4_K (256):  d, dmin fp16 | scales u8[12] | qs u8[128]
//     8 sub-blocks of 32; sub-block s has a 6-bit scale sc_s and min m_s packed in `scales`
//     (s < 4: sc = scales[s] & 63, m = scales[s + 4] & 63; s >= 4: sc = scales[s + 4] & 15 |
//     (scales[s - 4] >> 6) << 4, m = scales[s + 4] >> 4 | (scales[s] >> 6) << 4). Element
//     32 s + l takes the low nibble of qs[32 (s / 2) + l] for even s, the high one for odd s.
//     x = d * sc_s * q - dmin * m_s.
//   Q5_K (256):  d, dmin fp16 | scales u8[12] | qh u8[32] | qs u8[128]
//     as Q4_K, plus bit s of qh[l] as the fifth bit (16) of element 32 s + l.
//   Q6_K (256):  ql u8[128] | qh u8[64] | scales int8[16] | d fp16
//     two halves of 128; in half h, element 32 k + l (k < 4, l < 32) has low 4 bits from
//     ql[64 h + l + 32 (k & 1)] (low nibble for k < 2, high for k >= 2), high 2 bits
//     (qh[32 h + l] >> 2k) & 3, q = that 6-bit value - 32, and scale scales[8 h + 2k + l / 16].
//     x = d * scale * q.
#pragma once

#include <cstdint>

namespace spindle::gguf {

inline constexpr int kQK = 32;    // elements per block of the _0 / _1 types
inline constexpr int kQK_K = 256;  // elements per super-block of the _K types

struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 &&
              sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210,
              "ggml block structs must have the file's sizes");

}  // namespace spindle::gguf
