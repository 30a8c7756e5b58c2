// launch_gemv_fp8_mma (gemv_fp8.h): FP8-weight products of 1..32 rows on the bf16 tensor cores.
//
// Block = kWarps warps = 64 outputs; grid (ceil(out / 64), splits). Warp w of block (b, s) owns the
// outputs o0 .. o0 + 15, o0 = 64 b + 16 w (rows past `out` read row out - 1 and store nothing), over
// the 128-column units [s U / S, (s + 1) U / S) of the input, U = ceil(in / 128).
//
// The k order inside a 64-column chunk is permuted so that every lane reads contiguous bytes (a sum
// over k may take any order as long as A and B agree). With g = lane / 4 and q = lane % 4, lane
// (g, q) loads the 16 weight bytes [16 q, 16 q + 16) of the chunk from rows o0 + g and o0 + g + 8,
// and the 16 bf16 values of the same columns from x row 8 t + g of each n-tile t. mma step s
// (0..3) of the chunk then uses the columns 16 q + 4 s + {0, 1, 2, 3} of lane (g, q) as the logical
// k indices {2q, 2q + 1, 8 + 2q, 9 + 2q} that mma.m16n8k16 gives that lane (mma_utils.cuh):
//   a0 = W[o0 + g][16q + 4s + 0, 1]   a2 = W[o0 + g][16q + 4s + 2, 3]   (a1, a3: row o0 + g + 8)
//   b0 = x[8t + g][16q + 4s + 0, 1]   b1 = x[8t + g][16q + 4s + 2, 3]
// so word s of the lane's weight vector gives a0/a2 (a1/a3), and words 2s, 2s + 1 of its x vectors
// give b0, b1. Every column of the chunk is used exactly once (q, s, and the 4 columns of a step).
// Columns past `in` (in % 128 != 0: the last unit is partial; in % 16 == 0, so a 16-byte piece is
// all in or all out) read nothing and count as 0 in both operands.
//
// e4m3 -> bf16 in registers: the byte b placed as (b & 0x80) << 8 | (b & 0x7F) << 4 is a bf16 with
// the e4m3 exponent field in the low bits of bf16's and the 3 mantissa bits on top of bf16's 7,
// i.e. the e4m3 value times 2^-120 (the e4m3 subnormals land on bf16 subnormals, exactly); one
// bf16x2 multiply by 2^120 (mul.rn.bf16x2: exact, subnormal inputs supported) gives the value.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemv_fp8.h"
#include "kernels/cuda/mma_utils.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/row_dispatch.cuh"
#include "kernels/cuda/stream_load.cuh"

namespace spindle::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int64_t kBlockOuts = 16 * kWarps;  // outputs per block
constexpr int64_t kUnit = 128;               // input columns per unit (= the scale block)
constexpr int kUnitsPerStep = 2;             // units whose weights are loaded before the first is used
constexpr int64_t kMaxSplits = 64;
constexpr size_t kAlign = 256;

using detail::aligned16;
using detail::load_stream;
namespace mma = detail::mma;

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

// One 64-column chunk (columns k .. k + 63 of the lane's pieces start at k + 16 q): the lane's
// weight pieces wg (row o0 + g) and wh (row o0 + g + 8) against the x pieces of each n-tile,
// accumulated into d.
template <int kTiles>
__device__ __forceinline__ void chunk_mma(const uint4& wg, const uint4& wh, const uint16_t* __restrict__ x,
                                          int64_t rows, int64_t in, int64_t k, bool valid, int g,
                                          float (&d)[kTiles][4]) {
  uint4 xv[kTiles][2];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const int64_t r = 8 * t + g;
    if (valid && r < rows) {
      const uint4* p = reinterpret_cast<const uint4*>(x + r * in + k);
      xv[t][0] = __ldg(p);
      xv[t][1] = __ldg(p + 1);
    } else {
      xv[t][0] = make_uint4(0, 0, 0, 0);
      xv[t][1] = make_uint4(0, 0, 0, 0);
    }
  }
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

// The final value of output o of row r from its summed partials v.
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
template <Fp8Scale kMode>
__device__ __forceinline__ void sum_splits(const Args& a) {
  const int64_t block_o = static_cast<int64_t>(blockIdx.x) * kBlockOuts;
  if (a.out % 4 != 0 || reinterpret_cast<uintptr_t>(a.y) % 16 != 0) {
    for (int64_t i = threadIdx.x; i < a.rows * kBlockOuts; i += kThreads) {
      const int64_t r = i / kBlockOuts, o = block_o + i % kBlockOuts;
      if (o >= a.out) continue;
      float v = 0.0f;
      for (int64_t s = 0; s < a.splits; ++s) v += __ldcg(a.partial + (s * a.rows + r) * a.out + o);
      a.y[r * a.out + o] = finish<kMode>(a, o, v);
    }
    return;
  }
  constexpr int kQuads = kBlockOuts / 4;  // 4-output items per row
  constexpr int kItems = (kGemvFp8MmaMaxRows * kQuads + kThreads - 1) / kThreads;
  constexpr int kAhead = 4;
  int64_t at[kItems];  // item j: offset of (row r, outputs o .. o + 3) in one split's [rows, out]; -1: none
  float4 v[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * kThreads;
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
    const int64_t o = block_o + 4 * ((threadIdx.x + static_cast<int64_t>(j) * kThreads) % kQuads);
    const float4 r = make_float4(finish<kMode>(a, o, v[j].x), finish<kMode>(a, o + 1, v[j].y),
                                 finish<kMode>(a, o + 2, v[j].z), finish<kMode>(a, o + 3, v[j].w));
    *reinterpret_cast<float4*>(a.y + at[j]) = r;
  }
}

template <int kTiles, Fp8Scale kMode>
__global__ void __launch_bounds__(kThreads, kTiles >= 3 ? 3 : 4) gemv_fp8_mma_kernel(Args a) {
  pdl_begin();
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kBlockOuts + 16 * warp;
  const int64_t units = (a.in + kUnit - 1) / kUnit;
  const int64_t split = blockIdx.y;
  const int64_t u_begin = units * split / a.splits, u_end = units * (split + 1) / a.splits;
  float d[kTiles][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) d[t][0] = d[t][1] = d[t][2] = d[t][3] = 0.0f;
  if (o0 < a.out) {  // whole warps: the warp's rows exist (its last 15 may be clamped)
    const uint8_t* wg = a.w + min(o0 + g, a.out - 1) * a.in;
    const uint8_t* wh = a.w + min(o0 + g + 8, a.out - 1) * a.in;
    // Block scales of the warp's block row (o0 .. o0 + 15 lie in one 128-row block); units per
    // block row = U.
    const float* block_scales = kMode == Fp8Scale::kBlock128 ? a.scale + (o0 / kUnit) * units : nullptr;
    for (int64_t u = u_begin; u < u_end; u += kUnitsPerStep) {
      uint4 wv[kUnitsPerStep][2][2];  // [unit][chunk][row g, row g + 8]
#pragma unroll
      for (int du = 0; du < kUnitsPerStep; ++du) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int64_t k = (u + du) * kUnit + 64 * c + 16 * q;
          const bool valid = u + du < u_end && k < a.in;
          wv[du][c][0] = valid ? load_stream(reinterpret_cast<const uint4*>(wg + k)) : make_uint4(0, 0, 0, 0);
          wv[du][c][1] = valid ? load_stream(reinterpret_cast<const uint4*>(wh + k)) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int du = 0; du < kUnitsPerStep; ++du) {
        if (u + du >= u_end) break;  // warp-uniform
        if constexpr (kMode == Fp8Scale::kBlock128) {
          float part[kTiles][4];
#pragma unroll
          for (int t = 0; t < kTiles; ++t) part[t][0] = part[t][1] = part[t][2] = part[t][3] = 0.0f;
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int64_t k = (u + du) * kUnit + 64 * c + 16 * q;
            chunk_mma<kTiles>(wv[du][c][0], wv[du][c][1], a.x, a.rows, a.in, k, k < a.in, g, part);
          }
          const float s = __ldg(block_scales + u + du);
#pragma unroll
          for (int t = 0; t < kTiles; ++t) {
#pragma unroll
            for (int j = 0; j < 4; ++j) d[t][j] = fmaf(part[t][j], s, d[t][j]);
          }
        } else {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int64_t k = (u + du) * kUnit + 64 * c + 16 * q;
            chunk_mma<kTiles>(wv[du][c][0], wv[du][c][1], a.x, a.rows, a.in, k, k < a.in, g, d);
          }
        }
      }
    }
  }
  if (a.splits == 1) {
    if (o0 < a.out) store_warp<kTiles, kMode>(a, o0, g, q, d, a.y, true);
    return;
  }
  // Split: this range's partial, then the last block of the output group to arrive sums the
  // ranges in order 0 .. splits - 1 (threadFenceReduction's protocol).
  if (o0 < a.out) store_warp<kTiles, kMode>(a, o0, g, q, d, a.partial + split * a.rows * a.out, false);
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(a.counters + blockIdx.x, 1u) == static_cast<uint32_t>(a.splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  sum_splits<kMode>(a);
  if (threadIdx.x == 0) a.counters[blockIdx.x] = 0;  // ready for the next launch
}

template <int kTiles>
void launch_tiles(const Args& a, Fp8Scale mode, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((a.out + kBlockOuts - 1) / kBlockOuts), static_cast<unsigned>(a.splits));
  switch (mode) {
    case Fp8Scale::kPerTensor:
      launch_pdl(gemv_fp8_mma_kernel<kTiles, Fp8Scale::kPerTensor>, grid, kThreads, 0, stream, a);
      break;
    case Fp8Scale::kPerChannel:
      launch_pdl(gemv_fp8_mma_kernel<kTiles, Fp8Scale::kPerChannel>, grid, kThreads, 0, stream, a);
      break;
    case Fp8Scale::kBlock128:
      launch_pdl(gemv_fp8_mma_kernel<kTiles, Fp8Scale::kBlock128>, grid, kThreads, 0, stream, a);
      break;
  }
}

// The current device's SM count, cached per device (a launch inside a graph capture asks nothing
// of the driver but this attribute, once).
int64_t current_sm_count() {
  static std::atomic<int> cached[64] = {};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= 64) device = 0;
  int n = cached[device].load(std::memory_order_relaxed);
  if (n == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    cached[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

int64_t counter_bytes(int64_t max_out) {
  const int64_t groups = (std::max<int64_t>(max_out, 1) + kBlockOuts - 1) / kBlockOuts;
  return (groups * 4 + kAlign - 1) / kAlign * kAlign;
}

// Floats of partial sums any shape of at most kGemvFp8MmaMaxRows rows needs at the automatic
// splits: S > 1 only where groups < target, and then S * groups < target + groups < 2 target.
int64_t partial_floats_bound(int64_t sm_count) {
  return 2 * kGemvFp8MmaBlocksPerSm * sm_count * kGemvFp8MmaMaxRows * kBlockOuts;
}

}  // namespace

int64_t gemv_fp8_mma_splits(int64_t out, int64_t in, int64_t sm_count) {
  const int64_t groups = (out + kBlockOuts - 1) / kBlockOuts;
  const int64_t units = (in + kUnit - 1) / kUnit;
  const int64_t target = kGemvFp8MmaBlocksPerSm * std::max<int64_t>(sm_count, 1);
  const int64_t s = (target + groups - 1) / groups;
  return std::clamp<int64_t>(s, 1, std::min(units, kMaxSplits));
}

int64_t fp8_mma_workspace_bytes(int64_t max_out) {
  return counter_bytes(max_out) + partial_floats_bound(current_sm_count()) * int64_t{sizeof(float)};
}

Fp8MmaWorkspace fp8_mma_workspace_init(void* base, int64_t bytes, int64_t max_out) {
  const int64_t cb = counter_bytes(max_out);
  if (base == nullptr || reinterpret_cast<uintptr_t>(base) % kAlign != 0 || bytes < cb) {
    throw_cuda_error(cudaErrorInvalidValue, "fp8_mma_workspace_init: buffer null, misaligned or too small", __FILE__,
                     __LINE__);
  }
  fill_zero(base, static_cast<size_t>(cb));
  Fp8MmaWorkspace ws;
  ws.counters = static_cast<uint32_t*>(base);
  ws.counter_count = cb / 4;
  ws.partial = reinterpret_cast<float*>(static_cast<char*>(base) + cb);
  ws.partial_floats = (bytes - cb) / int64_t{sizeof(float)};
  return ws;
}

bool gemv_fp8_mma_supports(int64_t rows, int64_t in, const void* w, const void* x) {
  return rows >= 1 && rows <= kGemvFp8MmaMaxRows && in > 0 && in % 16 == 0 && aligned16(w) && aligned16(x);
}

void launch_gemv_fp8_mma(const uint8_t* w, const float* scale, Fp8Scale mode, const uint16_t* x_bf16, int64_t rows,
                         int64_t in, int64_t out, const float* bias, float* y, const Fp8MmaWorkspace& workspace,
                         cudaStream_t stream, int64_t splits) {
  if (!gemv_fp8_mma_supports(rows, in, w, x_bf16) || out <= 0 || (out + kBlockOuts - 1) / kBlockOuts > 0x7fffffff ||
      scale == nullptr || splits < 0) {
    throw_cuda_error(cudaErrorInvalidValue, "launch_gemv_fp8_mma: unsupported shape, alignment or missing scale",
                     __FILE__, __LINE__);
  }
  const int64_t units = (in + kUnit - 1) / kUnit;
  int64_t s = splits > 0 ? std::min(splits, units) : gemv_fp8_mma_splits(out, in, current_sm_count());
  const int64_t groups = (out + kBlockOuts - 1) / kBlockOuts;
  if (workspace.counters == nullptr || workspace.counter_count < groups) s = 1;
  if (s > 1) s = std::min(s, workspace.partial_floats / (rows * out));
  s = std::clamp<int64_t>(s, 1, std::min<int64_t>(units, 65535));
  const Args a{w, scale, x_bf16, rows, in, out, bias, y, workspace.partial, workspace.counters, s};
  switch ((rows + 7) / 8) {
    case 1: launch_tiles<1>(a, mode, stream); break;
    case 2: launch_tiles<2>(a, mode, stream); break;
    case 3: launch_tiles<3>(a, mode, stream); break;
    default: launch_tiles<4>(a, mode, stream); break;
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda
