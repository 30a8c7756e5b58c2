// Kernels of gemv16.h. Block = kWarps warps, warp w of block b computes kOuts output rows
// o = (b * kWarps + w) * kOuts + j for every batch row (the fused kernels: one row, or one pair):
// lane l reads the 16-byte vectors l, l + 32, ... of W's rows (several of them issued before the
// first is used) and the same vectors of each x row, accumulates per (batch row, output row) in
// f32, and the warp sums its lanes at the end.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemv16.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/row_dispatch.cuh"
#include "kernels/cuda/qkv_rope.cuh"
#include "kernels/cuda/round16.cuh"
#include "kernels/cuda/stream_load.cuh"

namespace spindle::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;  // 16-byte loads of W in flight per lane (one output row per warp, the fused kernels)

using detail::aligned16;
using detail::load_stream;
using detail::with_rows;

template <bool kBf16>
__device__ __forceinline__ float dot8(float acc, uint4 w, uint4 x) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = unpack2<kBf16>(ws[i]);
    const float2 b = unpack2<kBf16>(xs[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
  return acc;
}

// One group of gemv16_kernel's loop: the vectors v, v + 32, ..., v + 32 (kU - 1) of kOuts rows
// of W (all kU * kOuts loads issued before the first use, load_group) against the same vectors of
// kRows x rows (fma_group).
template <int kOuts, int kU>
__device__ __forceinline__ void load_group(const uint4* const (&wr)[kOuts], int64_t v, uint4 (&wv)[kU][kOuts]) {
#pragma unroll
  for (int u = 0; u < kU; ++u) {
#pragma unroll
    for (int j = 0; j < kOuts; ++j) wv[u][j] = load_stream(wr[j] + v + 32 * u);
  }
}

template <int kRows, int kOuts, int kU, bool kBf16>
__device__ __forceinline__ void fma_group(const uint4 (&wv)[kU][kOuts], const uint4* __restrict__ xr, int64_t vecs,
                                          int64_t v, float (&acc)[kRows][kOuts]) {
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    float wf[kOuts][8];
#pragma unroll
    for (int j = 0; j < kOuts; ++j) unpack8<kBf16>(wv[u][j], wf[j]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float xf[8];
      unpack8<kBf16>(__ldg(xr + r * vecs + v + 32 * u), xf);
#pragma unroll
      for (int j = 0; j < kOuts; ++j) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r][j] = fmaf(wf[j][e], xf[e], acc[r][j]);
      }
    }
  }
}

template <int kRows, int kOuts, int kU, bool kBf16>
__device__ __forceinline__ void gemv_group(const uint4* const (&wr)[kOuts], const uint4* __restrict__ xr, int64_t vecs,
                                           int64_t v, float (&acc)[kRows][kOuts]) {
  uint4 wv[kU][kOuts];
  load_group<kOuts, kU>(wr, v, wv);
  fma_group<kRows, kOuts, kU, kBf16>(wv, xr, vecs, v, acc);
}

// Warp w of block b owns the kOuts output rows o0 = (b * kWarps + w) * kOuts ... o0 + kOuts - 1
// (rows past `out` read row out - 1 again and store nothing) for every batch row. Each 16-byte x
// vector is loaded once per kOuts weight vectors (fewer x loads per weight byte from 3 rows on;
// at 5-8 rows it is still latency-bound, ncu: bench/results/2026-12-04-h200-verify-attn). Every (batch row, output row) sum is dot8's sum over v = lane, lane + 32, ...
// in that order, then the same 5 shuffles: the bits do not depend on kOuts, kUnroll or kRows.
template <int kRows, int kOuts, int kUnroll, bool kBf16>
__device__ __forceinline__ void gemv16_block(const uint16_t* __restrict__ w, const uint16_t* __restrict__ x, int64_t in,
                                             int64_t out, const float* __restrict__ bias, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t o0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kOuts;
  if (o0 >= out) {  // whole warps leave together
    pdl_begin();
    return;
  }
  const uint4* wr[kOuts];
#pragma unroll
  for (int j = 0; j < kOuts; ++j) wr[j] = reinterpret_cast<const uint4*>(w + min(o0 + j, out - 1) * in);
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  const int64_t vecs = in / 8;  // 16-byte vectors per row
  float acc[kRows][kOuts];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int j = 0; j < kOuts; ++j) acc[r][j] = 0.0f;
  }
  int64_t v = lane;
  {  // the first group's W before the wait (early weights, see launch_shape)
    uint4 wv[kUnroll][kOuts];
    const bool full = v + 32 * (kUnroll - 1) < vecs;
    if (full) load_group<kOuts, kUnroll>(wr, v, wv);
    pdl_begin();
    if (full) {
      fma_group<kRows, kOuts, kUnroll, kBf16>(wv, xr, vecs, v, acc);
      v += 32 * kUnroll;
    }
  }
  for (; v + 32 * (kUnroll - 1) < vecs; v += 32 * kUnroll)
    gemv_group<kRows, kOuts, kUnroll, kBf16>(wr, xr, vecs, v, acc);
  for (; v < vecs; v += 32) gemv_group<kRows, kOuts, 1, kBf16>(wr, xr, vecs, v, acc);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int j = 0; j < kOuts; ++j) {
      float s = acc[r][j];
      for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
      acc[r][j] = s;
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < kOuts; ++j) {
      const int64_t o = o0 + j;
      if (o < out) {
        const float b = bias != nullptr ? bias[o] : 0.0f;
#pragma unroll
        for (int r = 0; r < kRows; ++r) y[r * out + o] = acc[r][j] + b;
      }
    }
  }
}

template <int kRows, int kOuts, int kUnroll, bool kBf16>
__global__ void __launch_bounds__(kThreads)
    gemv16_kernel(const uint16_t* __restrict__ w, const uint16_t* __restrict__ x, int64_t in, int64_t out,
                  const float* __restrict__ bias, float* __restrict__ y) {
  gemv16_block<kRows, kOuts, kUnroll, kBf16>(w, x, in, out, bias, y);  // waits (pdl_begin) inside
}

// The two-row kernels' (gate/up, a RoPE pair) group of W loads: vectors v, v + 32, ... of rows wa and wb.
template <int kU>
__device__ __forceinline__ void load_pair(const uint4* wa, const uint4* wb, int64_t v, uint4 (&av)[kU],
                                          uint4 (&bv)[kU]) {
#pragma unroll
  for (int k = 0; k < kU; ++k) {
    av[k] = load_stream(wa + v + 32 * k);
    bv[k] = load_stream(wb + v + 32 * k);
  }
}

// Early weights (see launch_shape): the first group's loads, then pdl_begin; true when av and bv
// hold the group at v.
template <int kU>
__device__ __forceinline__ bool begin_pair(const uint4* wa, const uint4* wb, int64_t v, int64_t vecs, uint4 (&av)[kU],
                                           uint4 (&bv)[kU]) {
  const bool full = v + 32 * (kU - 1) < vecs;
  if (full) load_pair<kU>(wa, wb, v, av, bv);
  pdl_begin();
  return full;
}

// gemv16_kernel over rows o (gate) and im + o (up) of a joined [gate; up] weight at once, each
// accumulated exactly as gemv16_kernel accumulates it, then SwiGLU of the two (silu_mul_kernel's
// arithmetic) written as f32 and, when act16 is not null, rounded to 16 bits.
template <int kRows, bool kBf16>
__global__ void __launch_bounds__(kThreads)
    gemv16_swiglu_kernel(const uint16_t* __restrict__ w, const uint16_t* __restrict__ x, int64_t in, int64_t im,
                         float* __restrict__ act, uint16_t* __restrict__ act16, bool act16_bf16) {
  const int lane = threadIdx.x & 31;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (o >= im) {  // whole warps leave together
    pdl_begin();
    return;
  }
  const uint4* wg = reinterpret_cast<const uint4*>(w + o * in);
  const uint4* wu = reinterpret_cast<const uint4*>(w + (o + im) * in);
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  const int64_t vecs = in / 8;
  float g[kRows], u[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) g[r] = u[r] = 0.0f;
  int64_t v = lane;
  uint4 gv[kUnroll], uv[kUnroll];
  bool loaded = begin_pair<kUnroll>(wg, wu, v, vecs, gv, uv);
  for (; v + 32 * (kUnroll - 1) < vecs; v += 32 * kUnroll) {
    if (!loaded) load_pair<kUnroll>(wg, wu, v, gv, uv);
    loaded = false;
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint4 xv = __ldg(xr + r * vecs + v + 32 * k);
        g[r] = dot8<kBf16>(g[r], gv[k], xv);
        u[r] = dot8<kBf16>(u[r], uv[k], xv);
      }
    }
  }
  for (; v < vecs; v += 32) {
    const uint4 gv = load_stream(wg + v), uv = load_stream(wu + v);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint4 xv = __ldg(xr + r * vecs + v);
      g[r] = dot8<kBf16>(g[r], gv, xv);
      u[r] = dot8<kBf16>(u[r], uv, xv);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    for (int offset = 16; offset > 0; offset /= 2) {
      g[r] += __shfl_xor_sync(0xffffffffu, g[r], offset);
      u[r] += __shfl_xor_sync(0xffffffffu, u[r], offset);
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float y = swiglu(g[r] + 0.0f, u[r] + 0.0f);  // + 0: gemv16_kernel's store of a product without bias
      act[r * im + o] = y;
      if (act16 != nullptr) {
        float unused;
        act16[r * im + o] = round_16bit(y, act16_bf16, &unused);
      }
    }
  }
}

// The joined q/k/v product and what launch_split_qkv_norm_rope (no q/k norm) does after it, in
// one launch: warp w owns the RoPE pair (i, i + D/2) of one head (q, k or v), i = w % (D/2),
// computes both output rows as gemv16_kernel computes a row (+ bias), rotates q and k rows as the
// split kernel rotates them (qkv_rope.cuh), writes q, k, v and, when kv.k_pages is not null, the
// token's k and v into its page slot.
template <int kRows, bool kBf16>
__global__ void __launch_bounds__(kThreads)
    gemv16_qkv_rope_kernel(const uint16_t* __restrict__ w, const uint16_t* __restrict__ x, int64_t in,
                           const float* __restrict__ bias, QkvRopeParams p) {
  const int lane = threadIdx.x & 31;
  const int half = p.head_dim / 2;
  const int heads = p.num_heads + 2 * p.num_kv_heads;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (pair >= int64_t{heads} * half) {  // whole warps leave together
    pdl_begin();
    return;
  }
  const int head = static_cast<int>(pair / half);
  const int i = static_cast<int>(pair % half);
  const int64_t o = int64_t{head} * p.head_dim + i;  // rows o and o + half of W
  const uint4* wa = reinterpret_cast<const uint4*>(w + o * in);
  const uint4* wb = reinterpret_cast<const uint4*>(w + (o + half) * in);
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  const int64_t vecs = in / 8;
  float a[kRows], b[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) a[r] = b[r] = 0.0f;
  int64_t v = lane;
  uint4 av[kUnroll], bv[kUnroll];
  bool loaded = begin_pair<kUnroll>(wa, wb, v, vecs, av, bv);
  for (; v + 32 * (kUnroll - 1) < vecs; v += 32 * kUnroll) {
    if (!loaded) load_pair<kUnroll>(wa, wb, v, av, bv);
    loaded = false;
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint4 xv = __ldg(xr + r * vecs + v + 32 * k);
        a[r] = dot8<kBf16>(a[r], av[k], xv);
        b[r] = dot8<kBf16>(b[r], bv[k], xv);
      }
    }
  }
  for (; v < vecs; v += 32) {
    const uint4 av = load_stream(wa + v), bv = load_stream(wb + v);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint4 xv = __ldg(xr + r * vecs + v);
      a[r] = dot8<kBf16>(a[r], av, xv);
      b[r] = dot8<kBf16>(b[r], bv, xv);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    for (int offset = 16; offset > 0; offset /= 2) {
      a[r] += __shfl_xor_sync(0xffffffffu, a[r], offset);
      b[r] += __shfl_xor_sync(0xffffffffu, b[r], offset);
    }
  }
  if (lane >= kRows) return;
  // Lane r writes token r (a[] and b[] are the same in every lane after the reduction).
  float ya = 0.0f, yb = 0.0f;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r == lane) {
      ya = a[r];
      yb = b[r];
    }
  }
  const int64_t token = lane;
  ya += bias != nullptr ? bias[o] : 0.0f;  // gemv16_kernel's store: the sum + bias (or + 0)
  yb += bias != nullptr ? bias[o + half] : 0.0f;
  const int64_t slot = p.kv.k_pages != nullptr ? p.kv.slots[token] : -1;
  if (head >= p.num_heads + p.num_kv_heads) {  // a v head: copied
    const int kv_head = head - p.num_heads - p.num_kv_heads;
    const int64_t at = (token * p.num_kv_heads + kv_head) * p.head_dim + i;
    p.v[at] = ya;
    p.v[at + half] = yb;
    if (slot >= 0) {
      const int64_t page_at = (slot * p.num_kv_heads + kv_head) * p.head_dim + i;
      store_kv_value(p.kv.v_pages, p.kv.kv_type, page_at, ya);
      store_kv_value(p.kv.v_pages, p.kv.kv_type, page_at + half, yb);
    }
    return;
  }
  float c, s;
  rope_cos_sin(p.positions[token], i, half, p.head_dim, p.table, p.table_positions, p.inv_freq, &c, &s);
  float ra, rb;
  rope_rotate(ya, yb, c, s, &ra, &rb);
  if (head < p.num_heads) {
    const int64_t at = (token * p.num_heads + head) * p.head_dim + i;
    p.q[at] = ra;
    p.q[at + half] = rb;
  } else {
    const int kv_head = head - p.num_heads;
    const int64_t at = (token * p.num_kv_heads + kv_head) * p.head_dim + i;
    p.k[at] = ra;
    p.k[at + half] = rb;
    if (slot >= 0) {
      const int64_t page_at = (slot * p.num_kv_heads + kv_head) * p.head_dim + i;
      store_kv_value(p.kv.k_pages, p.kv.kv_type, page_at, ra);
      store_kv_value(p.kv.k_pages, p.kv.kv_type, page_at + half, rb);
    }
  }
}

// Early weights: a product's blocks may be resident before the kernel ahead of it on the stream
// ends (pdl.cuh). With early weights each warp issues its first group of W loads (W: no kernel of
// the step writes it) before pdl_begin waits, so the weight stream starts during the other
// kernel's tail instead of after it: 2 KiB per warp (kUnroll 16-byte loads per lane and weight
// row), not the whole weight, so the latency-bound kernels before a product (norm, attention
// merge) do not queue behind it as an L2 prefetch of the weights did (pdl.cuh). On the H200, 8B
// shape, 512 keys: the batch-1 decode step 4.27 -> 4.16 ms, 8 rows 5.04 -> 5.01 ms
// (bench/results/2026-12-03-h200-early-weights). Every product does it, the plain ones and the
// fused gate/up + SwiGLU and q/k/v + RoPE ones (the former A/B switch SPINDLE_CUDA_GEMV16_EARLY_W,
// util/switches.cc).
template <int kRows, int kOuts, bool kBf16>
void launch_shape(const void* w, const void* x, int64_t in, int64_t out, const float* bias, float* y,
                  cudaStream_t stream) {
  constexpr int kLoads = kOuts == 1 ? kUnroll : 8 / kOuts;  // groups in flight: 16-byte W loads per lane 4, 8, 8
  const int64_t per_block = int64_t{kWarps} * kOuts;
  const auto blocks = static_cast<unsigned>((out + per_block - 1) / per_block);
  const auto* w16 = static_cast<const uint16_t*>(w);
  const auto* x16 = static_cast<const uint16_t*>(x);
  launch_pdl(gemv16_kernel<kRows, kOuts, kLoads, kBf16>, blocks, kThreads, 0, stream, w16, x16, in, out, bias, y);
}

template <int kRows, int kOuts>
void launch_outs(const void* w, const void* x, int64_t in, int64_t out, bool bf16, const float* bias, float* y,
                 cudaStream_t stream) {
  if (bf16) {
    launch_shape<kRows, kOuts, true>(w, x, in, out, bias, y, stream);
  } else {
    launch_shape<kRows, kOuts, false>(w, x, in, out, bias, y, stream);
  }
}

template <int kRows>
void launch_rows(const void* w, const void* x, int64_t in, int64_t out, bool bf16, const float* bias, float* y,
                 int outs_per_warp, cudaStream_t stream) {
  switch (outs_per_warp) {
    case 1:
      launch_outs<kRows, 1>(w, x, in, out, bf16, bias, y, stream);
      break;
    case 2:
      launch_outs<kRows, 2>(w, x, in, out, bf16, bias, y, stream);
      break;
    default:
      launch_outs<kRows, 4>(w, x, in, out, bf16, bias, y, stream);
      break;
  }
}


}  // namespace

bool gemv16_supports(int64_t rows, int64_t in, const void* w, const void* x) {
  return rows >= 1 && rows <= kGemv16MaxRows && in > 0 && in % 8 == 0 && aligned16(w) && aligned16(x);
}

int64_t gemv16_fused_use_max_rows() { return kGemv16FusedMaxRows; }

int gemv16_outs_per_warp(int64_t rows, int64_t out, int64_t in) {
  if (rows <= 2) return 1;
  if (rows <= 4) return out > in ? 2 : 1;
  return 4;
}

void launch_gemv16(const void* w, const void* x, int64_t rows, int64_t in, int64_t out, bool bf16, const float* bias,
                   float* y, cudaStream_t stream, int outs_per_warp) {
  if (outs_per_warp == 0) outs_per_warp = gemv16_outs_per_warp(rows, out, in);
  if (!gemv16_supports(rows, in, w, x) || out <= 0 || out > int64_t{kWarps} * 0x7fffffff ||
      (outs_per_warp != 1 && outs_per_warp != 2 && outs_per_warp != 4)) {
    throw_cuda_error(cudaErrorInvalidValue, "launch_gemv16: unsupported shape, alignment or outputs per warp", __FILE__,
                     __LINE__);
  }
  with_rows<kGemv16MaxRows>(
      rows, [&](auto r) { launch_rows<decltype(r)::value>(w, x, in, out, bf16, bias, y, outs_per_warp, stream); });
  CUDA_CHECK_LAUNCH();
}

bool gemv16_qkv_rope_supports(int64_t rows, int64_t in, const void* w, const void* x, int head_dim) {
  return rows >= 1 && rows <= kGemv16QkvRopeMaxRows && head_dim >= 2 && head_dim % 2 == 0 &&
         gemv16_supports(rows, in, w, x);
}

void launch_gemv16_qkv_rope(const void* w, const void* x, int64_t rows, int64_t in, bool bf16, const float* bias,
                            const QkvRopeParams& p, cudaStream_t stream) {
  const int64_t pairs = int64_t{p.num_heads + 2 * p.num_kv_heads} * (p.head_dim / 2);
  if (!gemv16_qkv_rope_supports(rows, in, w, x, p.head_dim) || p.num_heads <= 0 || p.num_kv_heads <= 0 ||
      pairs > int64_t{kWarps} * 0x7fffffff) {
    throw_cuda_error(cudaErrorInvalidValue, "launch_gemv16_qkv_rope: unsupported shape or alignment", __FILE__,
                     __LINE__);
  }
  const auto blocks = static_cast<unsigned>((pairs + kWarps - 1) / kWarps);
  const auto* w16 = static_cast<const uint16_t*>(w);
  const auto* x16 = static_cast<const uint16_t*>(x);
  with_rows<kGemv16QkvRopeMaxRows>(rows, [&](auto r) {
    constexpr int kRows = decltype(r)::value;
    launch_pdl(bf16 ? gemv16_qkv_rope_kernel<kRows, true> : gemv16_qkv_rope_kernel<kRows, false>, blocks, kThreads, 0,
               stream, w16, x16, in, bias, p);
  });
  CUDA_CHECK_LAUNCH();
}

bool gemv16_swiglu_supports(int64_t rows, int64_t in, const void* w, const void* x) {
  return rows <= kGemv16SwigluMaxRows && gemv16_supports(rows, in, w, x);
}

void launch_gemv16_swiglu(const void* w, const void* x, int64_t rows, int64_t in, int64_t im, bool bf16, float* act,
                          void* act16, bool act16_bf16, cudaStream_t stream) {
  if (!gemv16_swiglu_supports(rows, in, w, x) || im <= 0 || im > int64_t{kWarps} * 0x7fffffff) {
    throw_cuda_error(cudaErrorInvalidValue, "launch_gemv16_swiglu: unsupported shape or alignment", __FILE__, __LINE__);
  }
  const auto blocks = static_cast<unsigned>((im + kWarps - 1) / kWarps);
  const auto* w16 = static_cast<const uint16_t*>(w);
  const auto* x16 = static_cast<const uint16_t*>(x);
  auto* a16 = static_cast<uint16_t*>(act16);
  with_rows<kGemv16SwigluMaxRows>(rows, [&](auto r) {
    constexpr int kRows = decltype(r)::value;
    launch_pdl(bf16 ? gemv16_swiglu_kernel<kRows, true> : gemv16_swiglu_kernel<kRows, false>, blocks, kThreads, 0,
               stream, w16, x16, in, im, act, a16, act16_bf16);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda
