// The block pipelines of launch_gemv_fp8_mma (gemv_fp8.h: Fp8MmaLoad::kBlockStages, kBlockPairs):
// 128 outputs per block share one cp.async pipeline and one copy of x in shared memory.
//
// ---- Why kLanePieces / kRowSpans read W at 33-45% of the copy bandwidth, and what the block
// pipelines change (on paper, 2026-12-08: no GPU on the dev VM, so these are predictions) ---------
// H200: 132 SMs, copy bandwidth 4.26 TB/s measured = ~16 B/clk per SM at 1.98 GHz; Little's law at
// ~0.7-1 us loaded latency wants ~23-32 KB in flight per SM. One 8B layer in FP8: 218 MB (q/k/v
// joined 6144 x 4096 25 MB, o 17 MB, gate/up joined 28672 x 4096 117 MB, down 4096 x 14336 59 MB)
// = 51 us at the copy bandwidth. Measured (bench/results/2026-12-07-h100-fp8-moe, H200 run): 113.6
// us at 1 row (45%), 117-118 at 4-8, 128 at 16, 152 at 32 (34%); bf16 135-155.
//  1. Bytes in flight are not short: 100-128 registers (ptxas -v) under __launch_bounds__(128, 4)
//     and 32 KiB (kLanePieces) / 48 KiB (kRowSpans) of shared memory give 4 blocks = 16 warps per
//     SM, each with 3 units x 2 KiB or 2 stages x 4 KiB of cp.async in flight: 96-128 KiB per SM,
//     3-4x what Little's law asks.
//  2. Grid: 528 resident blocks (132 x 4) of 64 outputs. q/k/v 96 groups x 5 splits (6-7 units per
//     warp: mostly the ring's 3-unit prologue), o 64 x 8 (4 units), gate/up 448 x 1 (32 units, one
//     wave, 3.4 blocks per SM), down 64 x 8 (14 units). The small shapes pay launch, first-byte
//     latency and the split fixup (~3-5 us each) against 4-6 us of streaming.
//  3. x, the cause at 16-32 rows: each warp loads its own x fragments through L1 (rows x 256 bytes
//     per unit against the warp's 2 KiB of weights: rows / 8 bytes per weight byte), the block's 4
//     warps drift apart (no barrier), the 4 blocks of an SM sit at other columns, and x (32 x 4096
//     bf16 = 256 KiB) exceeds what the shared-memory carve-out leaves of L1. So x costs 1x (perfect
//     L1 reuse) to 4x (none) the weight bytes in L2 -> SM traffic at 32 rows; with L2 delivering
//     ~5.5-7 TB/s, the weight stream is capped at L2 / (1 + that): 26-82% of the copy bandwidth.
//     The measured 34% fits ~3x re-reads. At 1-8 rows x is <= 1/4-1 bytes per weight byte.
//  4. DRAM pattern (a suspicion): a kLanePieces copy covers 8 rows x 64 bytes, a row's next 128
//     bytes come one unit later, and ~30k rows are being read at 128-384 bytes each at any time,
//     so most ~1 KiB HBM page openings deliver 128 bytes; perhaps why even 1 row stays at 45% where
//     gemv_fp8 (512 contiguous bytes per load instruction) reaches 65-82%.
//  5. Issue (PTX counted; cuobjdump / nvdisasm are not installed on the dev VM): per unit and warp
//     32 conversions of 2 weights (prmt, and/shift/or, mul.bf16x2: ~4 SASS each), 8 kTiles mma,
//     4 kTiles x loads, ~40 others: 0.1-0.15 instructions per weight byte = 40-60% of the issue
//     slots at 16 B/clk per SM; mma.sync (~0.5 m16n8k16 per clock per SM on Hopper's legacy path)
//     at 32 rows needs 1/64 per byte = ~50% of it. Busy, not bound, while latency is hidden.
//  6. L1 / shared-memory bandwidth (128 B/clk per SM) at 32 rows: the weights pass shared memory
//     twice (2 B per weight byte) and every warp loads rows / 8 bytes of x per weight byte (4 at 32
//     rows): ~6 B per weight byte = ~100 B/clk at 16 B/clk of weights, ~80% of it.
// The block pipelines (kBlockStages, kBlockPairs): 128 outputs per block share one cp.async
// pipeline and one copy of x in shared memory, so x from L2 drops to rows / 64 bytes per weight
// byte (0.5 at 32 rows: remedy for 3); copies of whole 128-byte lines, 4 rows per instruction,
// with cp.async's L2::256B prefetch (256 contiguous bytes per row reach DRAM at
// once: for 4); 3 stages x 16 KiB in flight per block and 2 blocks per SM = 96 KiB (1); the first
// weight stages issued before the PDL wait (launch overlap in a graph; for 2). kBlockPairs gives
// each warp 2 m-tiles so every x fragment loaded from shared memory serves 2 mma: x loads 2 B per
// weight byte at 32 rows, ~4.5 B per weight byte in all (remedy for 6); 187-190 registers, 4 warps.
// Splits: 128-output groups, 264 resident blocks: q/k/v 48 x 5, o 32 x 8, gate/up 224 x 1, down
// 32 x 8. Predicted (H200, bench_gemv_fp8 --reps 10, per-channel scales, the faster block load):
//   4-16 rows: q/k/v ~11 us (54%), o ~9 (46%), gate/up ~35 (78%), down ~20 (68%): layer ~75 us (68%)
//   32 rows: q/k/v ~11.5, o ~9, gate/up ~37.5 (74%), down ~21: layer ~79 us (65%)
// against bf16's 150-155 us: ~2.0x at 4-16 rows, ~1.95x at 32. Were suspicion 4 wrong and the
// stream stayed near the 1-row 45-50%: ~100-110 us (1.4-1.5x).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gemv_fp8.h"
#include "kernels/cuda/gemv_fp8_mma.cuh"
#include "kernels/cuda/mma_utils.cuh"
#include "kernels/cuda/pdl.cuh"

namespace spindle::kernels::cuda::detail::fp8_mma {
namespace {

// ---- kBlockStages / kBlockPairs: one pipeline per block, x staged beside the weights ------------
// Block = kBOuts (128) outputs: kBlockStages 8 warps of one m-tile (16 outputs), kBlockPairs 4
// warps of kM = 2 m-tiles (32 outputs: each x fragment loaded from shared memory serves 2 mma);
// warp w owns o0 = 128 b + 16 kM w (m-tile m: o0 + 16 m; the fragment math of chunk_mma_core).
// Stage = one 128-column unit: the block's 128 weight rows x 128 bytes (16 KiB; copy i of thread t:
// row (threads / 8) i + t / 8, 16-byte slot t % 8, so one copy instruction covers threads / 8 rows
// x 128 contiguous bytes = whole L2 lines) and x's 8 kTiles rows x 128 columns (bf16, 2 kTiles
// KiB; zero-filled past `rows`), copied once per block and read by every warp from shared memory.
// kBStages stages, kBStages - 1 in flight while one is multiplied; one __syncthreads per unit.
// Layout in a stage, conflict-free for the fragment reads (8-lane phases read rows 2p and 2p + 1)
// and the copies: weight row r, slot c at r * 128 + 16 (c ^ 4 (r % 2)); x row r, slot c (8
// columns) at r * 256 + 16 (c ^ (r % 2)). The weight copies of the first kBStages - 1 stages are
// issued before pdl_begin (the weights are written by no kernel of a step), x's after.
constexpr int kBStages = 4;
constexpr int kBWeightBytes = static_cast<int>(kBOuts * kUnit);  // 16384 per stage
constexpr int kBXRowBytes = static_cast<int>(kUnit) * 2;         // 256
template <int kM>
constexpr int kBThreadsOf = 32 * static_cast<int>(kBOuts) / (16 * kM);  // 256 (kM = 1), 128 (kM = 2)
template <int kTiles>
constexpr int kBStageBytes = kBWeightBytes + 8 * kTiles * kBXRowBytes;
template <int kTiles>
constexpr int kBBlockBytes = kBStages * kBStageBytes<kTiles>;  // 72..96 KiB, dynamic

// cp.async of 16 bytes asking L2 to fetch the whole 256-byte pair of lines (the next unit's 128
// bytes of the row arrive with this unit's: DRAM sees 256 contiguous bytes per row).
__device__ __forceinline__ void cp_async_16_l2_256(uint32_t shared_dst, const void* global_src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(shared_dst), "l"(global_src),
               "r"(valid ? 16 : 0)
               : "memory");
}

// The block's weight rows of unit u into `stage` (zero-filled past u_end or `in`). No commit.
template <int kThr>
__device__ __forceinline__ void issue_block_weights(const Args& a, uint8_t* stage, int64_t block_o, int64_t u,
                                                    int64_t u_end) {
  const int slot = threadIdx.x & 7;
  const int64_t k = u * kUnit + 16 * slot;
  const bool valid = u < u_end && k < a.in;
#pragma unroll
  for (int i = 0; i < static_cast<int>(kBOuts) / (kThr / 8); ++i) {
    const int row = (kThr / 8) * i + static_cast<int>(threadIdx.x >> 3);
    const uint8_t* src = a.w + min(block_o + row, a.out - 1) * a.in;
    cp_async_16_l2_256(mma::shared_address(stage + row * kUnit + ((slot ^ ((row & 1) << 2)) << 4)),
                       valid ? src + k : src, valid);
  }
}

// x's rows 0 .. 8 kTiles - 1, columns of unit u, into the stage's x part (zero-filled past `rows`,
// u_end or `in`; in % 16 == 0, so an 8-column piece is all in or all out). No commit.
template <int kTiles, int kThr>
__device__ __forceinline__ void issue_block_x(const Args& a, uint8_t* xs, int64_t u, int64_t u_end) {
  constexpr int kPieces = 8 * kTiles * 16;
#pragma unroll
  for (int i = 0; i < (kPieces + kThr - 1) / kThr; ++i) {
    const int p = i * kThr + static_cast<int>(threadIdx.x);
    if (p >= kPieces) break;
    const int row = p >> 4, slot = p & 15;
    const int64_t k = u * kUnit + 8 * slot;
    const bool valid = u < u_end && row < a.rows && k < a.in;
    mma::cp_async_16(mma::shared_address(xs + row * kBXRowBytes + ((slot ^ (row & 1)) << 4)),
                     valid ? a.x + row * a.in + k : a.x, valid);
  }
}

// d[m] += the warp's product of one stage (unit u) for m-tile m: rows wrow + 16 m .. + 15 of the
// stage's weights against its x, times the unit's block scale in kBlock128.
template <int kTiles, Fp8Scale kMode, int kM>
__device__ __forceinline__ void stage_mma(const uint8_t* stage, int wrow, int64_t u, const float* block_scales,
                                          float (&d)[kM][kTiles][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const uint8_t* xs = stage + kBWeightBytes;
  const auto wpiece = [&](int row, int slot) {
    return *reinterpret_cast<const uint4*>(stage + row * kUnit + ((slot ^ ((row & 1) << 2)) << 4));
  };
  const auto xpiece = [&](int row, int slot) {
    return *reinterpret_cast<const uint4*>(xs + row * kBXRowBytes + ((slot ^ (row & 1)) << 4));
  };
  float part[kM][kTiles][4];
  float(&acc)[kM][kTiles][4] = kMode == Fp8Scale::kBlock128 ? part : d;
  if constexpr (kMode == Fp8Scale::kBlock128) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int t = 0; t < kTiles; ++t) part[m][t][0] = part[m][t][1] = part[m][t][2] = part[m][t][3] = 0.0f;
    }
  }
#pragma unroll
  for (int c = 0; c < 2; ++c) {  // chunk c: columns 64 c .. 64 c + 63; the lane's 16 at 64 c + 16 q
    uint4 xv[kTiles][2];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      xv[t][0] = xpiece(8 * t + g, 8 * c + 2 * q);
      xv[t][1] = xpiece(8 * t + g, 8 * c + 2 * q + 1);
    }
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const int row = wrow + 16 * m + g;
      chunk_mma_core<kTiles>(wpiece(row, 4 * c + q), wpiece(row + 8, 4 * c + q), xv, acc[m]);
    }
  }
  if constexpr (kMode == Fp8Scale::kBlock128) {
    const float s = __ldg(block_scales + u);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
#pragma unroll
        for (int j = 0; j < 4; ++j) d[m][t][j] = fmaf(part[m][t][j], s, d[m][t][j]);
      }
    }
  }
}

template <int kTiles, Fp8Scale kMode, int kM>
__global__ void __launch_bounds__(kBThreadsOf<kM>, 2) gemv_fp8_mma_block_kernel(Args a) {
  constexpr int kThr = kBThreadsOf<kM>;
  constexpr int kStage = kBStageBytes<kTiles>;
  extern __shared__ uint4 block_stages[];
  uint8_t* stages = reinterpret_cast<uint8_t*>(block_stages);
  const int warp = threadIdx.x / 32;
  const int64_t block_o = static_cast<int64_t>(blockIdx.x) * kBOuts;
  const int64_t units = (a.in + kUnit - 1) / kUnit;
  const int64_t split = blockIdx.y;
  const int64_t u_begin = units * split / a.splits, u_end = units * (split + 1) / a.splits;
  // Commit groups: W0 .. W(kBStages - 2), X0 .. X(kBStages - 2), then one per later stage; stage
  // i's weights and x have landed when at most kBStages - 2 newer groups are pending.
#pragma unroll
  for (int i = 0; i < kBStages - 1; ++i) {
    issue_block_weights<kThr>(a, stages + i * kStage, block_o, u_begin + i, u_end);
    mma::cp_async_commit();
  }
  pdl_begin();
#pragma unroll
  for (int i = 0; i < kBStages - 1; ++i) {
    issue_block_x<kTiles, kThr>(a, stages + i * kStage + kBWeightBytes, u_begin + i, u_end);
    mma::cp_async_commit();
  }
  // Block scales of the block row (block_o .. block_o + 127 lie in one 128-row block).
  const float* block_scales = kMode == Fp8Scale::kBlock128 ? a.scale + (block_o / kUnit) * units : nullptr;
  float d[kM][kTiles][4];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t) d[m][t][0] = d[m][t][1] = d[m][t][2] = d[m][t][3] = 0.0f;
  }
  for (int64_t i = 0; u_begin + i < u_end; ++i) {
    mma::cp_async_wait<kBStages - 2>();  // this thread's copies of stage i have landed
    __syncthreads();                     // everyone's, and every warp is done with stage i - 1
    uint8_t* next = stages + static_cast<int>((i + kBStages - 1) % kBStages) * kStage;
    issue_block_weights<kThr>(a, next, block_o, u_begin + i + kBStages - 1, u_end);
    issue_block_x<kTiles, kThr>(a, next + kBWeightBytes, u_begin + i + kBStages - 1, u_end);
    mma::cp_async_commit();
    stage_mma<kTiles, kMode, kM>(stages + static_cast<int>(i % kBStages) * kStage, 16 * kM * warp, u_begin + i,
                                 block_scales, d);
  }
  mma::cp_async_wait<0>();  // the zero-filled stages past the range too, before the block ends
  // (Rows past `out` were clamped copies of row out - 1: their m-tiles store nothing.)
  write_result<kTiles, kMode, kBOuts, kThr, kM>(a, block_o + 16 * kM * warp, d);
}

template <int kTiles, int kM>
Kernel kernel_of(Fp8Scale mode) {
  switch (mode) {
    case Fp8Scale::kPerTensor: return gemv_fp8_mma_block_kernel<kTiles, Fp8Scale::kPerTensor, kM>;
    case Fp8Scale::kPerChannel: return gemv_fp8_mma_block_kernel<kTiles, Fp8Scale::kPerChannel, kM>;
    case Fp8Scale::kBlock128: return gemv_fp8_mma_block_kernel<kTiles, Fp8Scale::kBlock128, kM>;
  }
  return nullptr;
}

template <int kM>
Kernel kernel_of(int tiles, Fp8Scale mode) {
  switch (tiles) {
    case 1: return kernel_of<1, kM>(mode);
    case 2: return kernel_of<2, kM>(mode);
    case 3: return kernel_of<3, kM>(mode);
    default: return kernel_of<4, kM>(mode);
  }
}

}  // namespace

Kernel block_kernel_of(int tiles, Fp8Scale mode, int m_tiles) {
  return m_tiles == 2 ? kernel_of<2>(tiles, mode) : kernel_of<1>(tiles, mode);
}

int block_threads(int m_tiles) { return m_tiles == 2 ? kBThreadsOf<2> : kBThreadsOf<1>; }

size_t block_dynamic_bytes(int tiles) {
  switch (tiles) {
    case 1: return kBBlockBytes<1>;
    case 2: return kBBlockBytes<2>;
    case 3: return kBBlockBytes<3>;
    default: return kBBlockBytes<4>;
  }
}

}  // namespace spindle::kernels::cuda::detail::fp8_mma
