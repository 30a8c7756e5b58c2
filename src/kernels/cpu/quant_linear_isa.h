// Internal: the repacked layout's byte offsets (quant_linear.h describes it) and the per-ISA entry
// points of the quantized linear kernels, called by quant_linear.cc after it has checked CpuInfo.
// Plain data and out-of-line functions only: nothing here may be inline code compiled with ISA flags.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/quant_linear.h"

namespace spindle::kernels::cpu::quant_layout {

inline constexpr int64_t kVectorBytes = 64;  // one "vector": 16 rows x 4 quants
inline constexpr int64_t kScaleBytes = 32;   // fp16[16]: one scale per row
inline constexpr int64_t kNibbleBytes = 4 * kVectorBytes;  // 8 vectors of 4-bit quants
// Q8_0 / Q4_0: one 32-element block per unit.
inline constexpr int64_t kQ8_0Block = kScaleBytes + 8 * kVectorBytes;  // 544
inline constexpr int64_t kQ4_0Block = kScaleBytes + kNibbleBytes;      // 288
// Q5_0 / Q5_1: d (Q5_1: then -m), 8 vectors of nibbles, 64 B of fifth bits.
inline constexpr int64_t kQ5_0Block = kScaleBytes + kNibbleBytes + kVectorBytes;      // 352
inline constexpr int64_t kQ5_1Block = 2 * kScaleBytes + kNibbleBytes + kVectorBytes;  // 384
// Q4_K / Q5_K: one super-block of 256: d, dmin, sc[8][16], m[8][16], then 8 sub-blocks.
inline constexpr int64_t kKHeader = 2 * kScaleBytes + 2 * 8 * 16;       // 320
inline constexpr int64_t kQ4_KSub = kNibbleBytes;                       // 256
inline constexpr int64_t kQ5_KSub = kNibbleBytes + kVectorBytes;        // 320 (nibbles, fifth bits)
inline constexpr int64_t kQ4_KSuper = kKHeader + 8 * kQ4_KSub;          // 2368
inline constexpr int64_t kQ5_KSuper = kKHeader + 8 * kQ5_KSub;          // 2880
// Q6_K: d, sc[16][16] int8, 32 zero bytes, then 8 blocks of 32 (nibbles, two chunks of high bits).
// The padding makes the super-block 53 cache lines: at 288 + 8 * 384 = 3360 (52.5 lines) every
// other super-block's 64-byte loads each straddled two lines. Measured (one thread, the 128256x2048
// LM head streamed from memory, 2026-12-07-devvm-zen4-quant-rows): avx512_vnni 1.02x, avx2 1.15x,
// for 0.95% more bytes.
inline constexpr int64_t kQ6_KScales = kScaleBytes + 16 * 16;           // 288: d, sc
inline constexpr int64_t kQ6_KHeader = kQ6_KScales + 32;                // 320
inline constexpr int64_t kQ6_KSub = kNibbleBytes + 2 * kVectorBytes;    // 384
inline constexpr int64_t kQ6_KSuper = kQ6_KHeader + 8 * kQ6_KSub;       // 3392 = 53 x 64
static_assert(kQ4_KSuper % 64 == 0 && kQ5_KSuper % 64 == 0 && kQ6_KSuper % 64 == 0,
              "K-quant super-blocks are whole cache lines");

// Whether the type's blocks carry a min term (subtracted after the scaled integer dot).
template <QuantType T>
inline constexpr bool kHasMin = T == QuantType::kQ4_K || T == QuantType::kQ5_K || T == QuantType::kQ5_1;

}  // namespace spindle::kernels::cpu::quant_layout

namespace spindle::kernels::cpu {

// Groups [group_begin, group_end) of w (16 output columns each) for every row of x, into y
// ([x.m, w.n], row-major). Each kernel computes a row's outputs alike whatever x.m.
struct QuantGroupsParams {
  const PackedQuantWeight* w = nullptr;
  const QuantizedActivations* x = nullptr;
  float* y = nullptr;
};
// The activation terms of every block's epilogue (quant_linear.h), computed once per row chunk of a
// task instead of once per row, block and weight group: for rows [row_begin, row_end) of x (i counted
// from row_begin) and block b,
//   neg_off[(i nb + b) H + h] = -offset * (activation sum of half h)  (H = 2: halves; H = 1: both halves'
//                                sum in one, h = 0), exact in int32
//   dxs[i nb + b]             = dx_b * float(xsum_b), the min term's activation factor (one f32 rounding,
//                                the same value the per-block formula computes)
struct QuantRowTerms {
  std::vector<int32_t> neg_off;
  std::vector<float> dxs;
};
void quant_row_terms(const QuantizedActivations& x, int32_t offset, bool halves, int64_t row_begin, int64_t row_end,
                     QuantRowTerms& out);
// Every kernel takes the rows of x in chunks of kQuantRowChunk: their int8 quants, k bytes a row,
// stay in L2 while the chunk passes every group of the range.
inline constexpr int64_t kQuantRowChunk = 64;

void quant_linear_groups_avx2(const QuantGroupsParams& p, int64_t group_begin, int64_t group_end);
void quant_linear_groups_avx_vnni(const QuantGroupsParams& p, int64_t group_begin, int64_t group_end);
void quant_linear_groups_avx512_vnni(const QuantGroupsParams& p, int64_t group_begin, int64_t group_end);
void quant_linear_groups_amx(const QuantGroupsParams& p, int64_t group_begin, int64_t group_end);

// f(std::integral_constant<QuantType, t>{}) for the run-time type t: every kernel's one dispatch
// from the weight's type to its code instantiated per type.
template <typename F>
void with_quant_type(QuantType type, F&& f) {
  switch (type) {
    case QuantType::kQ8_0: f(std::integral_constant<QuantType, QuantType::kQ8_0>{}); break;
    case QuantType::kQ4_0: f(std::integral_constant<QuantType, QuantType::kQ4_0>{}); break;
    case QuantType::kQ5_0: f(std::integral_constant<QuantType, QuantType::kQ5_0>{}); break;
    case QuantType::kQ5_1: f(std::integral_constant<QuantType, QuantType::kQ5_1>{}); break;
    case QuantType::kQ4_K: f(std::integral_constant<QuantType, QuantType::kQ4_K>{}); break;
    case QuantType::kQ5_K: f(std::integral_constant<QuantType, QuantType::kQ5_K>{}); break;
    case QuantType::kQ6_K: f(std::integral_constant<QuantType, QuantType::kQ6_K>{}); break;
  }
}

}  // namespace spindle::kernels::cpu
