// Pieces shared by gemv_fp8_mma.cu (the per-warp loads kLanePieces, kRowSpans, and the host side)
// and gemv_fp8_mma_block.cu (the block pipelines kBlockStages, kBlockPairs): the kernel arguments,
// the e4m3 -> bf16 conversion, one 64-column chunk's mma steps (fragment layout: gemv_fp8_mma.cu's
// file comment), the stores and the ordered split sum. CUDA only (included by those two .cu files).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/gemv_fp8.h"
#include "kernels/cuda/mma_utils.cuh"

namespace spindle::kernels::cuda::detail::fp8_mma {

namespace mma = detail::mma;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int64_t kBlockOuts = 16 * kWarps;  // outputs per block
constexpr int64_t kUnit = 128;               // input columns per unit (= the scale block)

// Bytes 2p and 2p + 1 of `word` (e4m3) as bf16x2 (byte 2p in the low half); see the file comment.
template <int kPair>
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t word) {
  // Each byte at the top of its 16-bit half: [0, b(2p), 0, b(2p+1)] from the low byte up.
  const uint32_t t = __byte_perm(word, 0u, kPair == 0 ? 0x1404u : 0x3424u);
  const uint32_t bits = (t & 0x80008000u) | ((t >> 4) & 0x07f007f0u);
  const __nv_bfloat162 v = __hmul2_rn(*reinterpret_cast<const __nv_bfloat162*>(&bits),
                                   __nv_bfloat162(__ushort_as_bfloat16(0x7B80), __ushort_as_bfloat16(0x7B80)));
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

struct Args {
  const uint8_t* w;
  const float* scale;
  const uint16_t* x;
  int64_t rows, in, out;
  const float* bias;
  float* y;
  float* partial;      // [splits, rows, out] (splits > 1)
  uint32_t* counters;  // [ceil(out / 64)] (splits > 1)
  int64_t splits;
};

// One 64-column chunk's 4 mma steps per n-tile: the lane's weight pieces wg (row o0 + g) and wh
// (row o0 + g + 8) against its x pieces xv[t] (row 8t + g of the same 16 columns), into d.
template <int kTiles>
__device__ __forceinline__ void chunk_mma_core(const uint4& wg, const uint4& wh, const uint4 (&xv)[kTiles][2],
                                               float (&d)[kTiles][4]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t a[4] = {e4m3x2_to_bf16x2<0>(word_of(wg, s)), e4m3x2_to_bf16x2<0>(word_of(wh, s)),
                           e4m3x2_to_bf16x2<1>(word_of(wg, s)), e4m3x2_to_bf16x2<1>(word_of(wh, s))};
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      // x words 2s, 2s + 1 of the lane's 16 columns: vector (2s) / 4, words (2s) % 4 and + 1.
      const uint4& xs = xv[t][s / 2];
      mma::mma_16816<true>(d[t], a, word_of(xs, (2 * s) % 4), word_of(xs, (2 * s) % 4 + 1));
    }
  }
}

// The final value of output o from its summed partials v (scale, bias).
template <Fp8Scale kMode>
__device__ __forceinline__ float finish(const Args& a, int64_t o, float v) {
  if constexpr (kMode == Fp8Scale::kPerTensor) v *= a.scale[0];
  if constexpr (kMode == Fp8Scale::kPerChannel) v *= a.scale[o];
  return a.bias != nullptr ? v + a.bias[o] : v;
}

// y (or the split's partial) of the warp's 16 outputs from its accumulators (C layout: d[t][0, 1]
// = output o0 + g, batch rows 8t + 2q, + 1; d[t][2, 3] = output o0 + g + 8, the same rows).
template <int kTiles, Fp8Scale kMode>
__device__ __forceinline__ void store_warp(const Args& a, int64_t o0, int g, int q, const float (&d)[kTiles][4],
                                           float* dst, bool final_sum) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = 8 * t + 2 * q + (j & 1);
      const int64_t o = o0 + g + (j >= 2 ? 8 : 0);
      if (r >= a.rows || o >= a.out) continue;
      dst[r * a.out + o] = final_sum ? finish<kMode>(a, o, d[t][j]) : d[t][j];
    }
  }
}

// The last block of an output group: y[r, block_o .. block_o + 63] = sum over s = 0, 1, ...,
// splits - 1 (in that order) of partial[s, r, ...], then finish(). Latency-bound (every load an L2
// hit), so each thread keeps its (up to) kItems 4-output items and kAhead splits of loads in
// flight: ceil(splits / kAhead) round trips. Where out % 4 != 0 or y is not 16-byte aligned (no
// float4 access) one output at a time.
template <Fp8Scale kMode, int64_t kOuts = kBlockOuts, int kThr = kThreads>
__device__ __forceinline__ void sum_splits(const Args& a) {
  const int64_t block_o = static_cast<int64_t>(blockIdx.x) * kOuts;
  if (a.out % 4 != 0 || reinterpret_cast<uintptr_t>(a.y) % 16 != 0) {
    for (int64_t i = threadIdx.x; i < a.rows * kOuts; i += kThr) {
      const int64_t r = i / kOuts, o = block_o + i % kOuts;
      if (o >= a.out) continue;
      float v = 0.0f;
      for (int64_t s = 0; s < a.splits; ++s) v += __ldcg(a.partial + (s * a.rows + r) * a.out + o);
      a.y[r * a.out + o] = finish<kMode>(a, o, v);
    }
    return;
  }
  constexpr int kQuads = kOuts / 4;  // 4-output items per row
  constexpr int kItems = (kGemvFp8MmaMaxRows * kQuads + kThr - 1) / kThr;
  constexpr int kAhead = 4;
  int64_t at[kItems];  // item j: offset of (row r, outputs o .. o + 3) in one split's [rows, out]; -1: none
  float4 v[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * kThr;
    const int64_t r = i / kQuads, o = block_o + 4 * (i % kQuads);
    at[j] = r < a.rows && o < a.out ? r * a.out + o : -1;
    v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  const int64_t stride = a.rows * a.out;  // floats per split
  for (int64_t s0 = 0; s0 < a.splits; s0 += kAhead) {
    float4 p[kAhead][kItems];
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        p[k][j] = s0 + k < a.splits && at[j] >= 0
                      ? __ldcg(reinterpret_cast<const float4*>(a.partial + (s0 + k) * stride + at[j]))
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {  // in split order (a split past the last adds +0: same bits)
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        v[j].x += p[k][j].x, v[j].y += p[k][j].y, v[j].z += p[k][j].z, v[j].w += p[k][j].w;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (at[j] < 0) continue;
    const int64_t o = block_o + 4 * ((threadIdx.x + static_cast<int64_t>(j) * kThr) % kQuads);
    const float4 r = make_float4(finish<kMode>(a, o, v[j].x), finish<kMode>(a, o + 1, v[j].y),
                                 finish<kMode>(a, o + 2, v[j].z), finish<kMode>(a, o + 3, v[j].w));
    *reinterpret_cast<float4*>(a.y + at[j]) = r;
  }
}

// The block's results from each warp's sums d (m-tile m: outputs o0 + 16 m .. + 15): y where splits == 1; else
// this range's partial, then the last block of the output group (kOuts outputs) to arrive sums the
// ranges in order 0 .. splits - 1 (threadFenceReduction's protocol). Every thread of the block
// calls it.
template <int kTiles, Fp8Scale kMode, int64_t kOuts, int kThr, int kM>
__device__ __forceinline__ void write_result(const Args& a, int64_t o0, const float (&d)[kM][kTiles][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  float* const dst = a.splits == 1 ? a.y : a.partial + static_cast<int64_t>(blockIdx.y) * a.rows * a.out;
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    if (o0 + 16 * m < a.out) store_warp<kTiles, kMode>(a, o0 + 16 * m, g, q, d[m], dst, a.splits == 1);
  }
  if (a.splits == 1) return;
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(a.counters + blockIdx.x, 1u) == static_cast<uint32_t>(a.splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  sum_splits<kMode, kOuts, kThr>(a);
  if (threadIdx.x == 0) a.counters[blockIdx.x] = 0;  // ready for the next launch
}


using Kernel = void (*)(Args);

// gemv_fp8_mma_block.cu: outputs per block of the block pipelines, the kernel of m_tiles (1:
// kBlockStages, 2: kBlockPairs) m-tiles per warp for ceil(rows / 8) = tiles, its threads per block
// and dynamic shared memory.
inline constexpr int64_t kBOuts = 128;
Kernel block_kernel_of(int tiles, Fp8Scale mode, int m_tiles);
int block_threads(int m_tiles);
size_t block_dynamic_bytes(int tiles);

}  // namespace spindle::kernels::cuda::detail::fp8_mma
