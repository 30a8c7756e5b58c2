// Kernels of moe_kernels.h.
//
// Route: one block per row; its warps compute the row's E logits into shared memory (or copy the
// given ones), then warp 0 picks the top k in k rounds (each lane the best of its strided experts
// not yet taken, then a butterfly over the lanes with a total order, so every lane agrees) and
// computes the softmax weights; lane j keeps choice j.
// Group: one block; each warp counts one expert's choices at a time (ballot + popc over the flat
// choices), thread 0 scans the counts, then each warp writes its expert's choices in ascending
// order: a stable counting sort without atomics (the same order every run).
// Grouped products on f32 FMA units (f32 experts, and 16-bit ones whose widths are not a multiple
// of 8; other 16-bit experts run on tensor cores, moe_mma.cu): blockIdx.y = the y-th selected
// expert (blocks past the count return), blockIdx.x = a tile of output features; each warp owns
// kFeat features (gate/up: a gate row and an up row each) and runs over the expert's rows kRows at
// a time, every lane reading 8 weights (one 16-byte vector) and the same 8 columns of each row, f32
// accumulation, a warp sum at the end.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_kernels.h"
#include "kernels/cuda/moe_device.cuh"
#include "kernels/cuda/moe_kernels_launch.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/round16.cuh"

namespace spindle::kernels::cuda {
namespace {

using namespace detail::moe;
constexpr int kRouteThreads = 256;
constexpr int kGroupThreads = 1024;
constexpr int kGroupedWarps = 8;
constexpr int kCombineThreads = 256;

// sum_c x[c] * w[c] over one warp: lane-strided partial sums (8 columns a step when kVec), then
// the butterfly. Every lane returns the sum.
template <typename T, bool kVec>
__device__ float warp_dot(const float* x, const T* w, int64_t n, int lane) {
  float acc = 0.0f;
  if constexpr (kVec) {
    for (int64_t c = int64_t{lane} * 8; c < n; c += 256) {
      float xv[8], wv[8];
      load8(x + c, xv);
      load8(w + c, wv);
#pragma unroll
      for (int t = 0; t < 8; ++t) acc = fmaf(wv[t], xv[t], acc);
    }
  } else {
    for (int64_t c = lane; c < n; c += 32) acc = fmaf(to_f32(w[c]), x[c], acc);
  }
  return warp_sum(acc);
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(MoeRouteParams p) {
  pdl_begin();  // first: the inputs are the previous kernels' outputs (pdl.cuh)
  extern __shared__ float shared_logits[];  // [E] then E taken flags
  const int e_count = p.num_experts;
  unsigned char* taken = reinterpret_cast<unsigned char*>(shared_logits + e_count);
  const int64_t r = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (p.logits != nullptr) {
    for (int e = threadIdx.x; e < e_count; e += kRouteThreads) shared_logits[e] = p.logits[r * e_count + e];
  } else {
    const float* x = p.x + r * p.hidden;
    for (int e = warp; e < e_count; e += kRouteThreads / 32) {
      const float l = warp_dot<T, kVec>(x, static_cast<const T*>(p.router) + int64_t{e} * p.hidden, p.hidden, lane);
      if (lane == 0) shared_logits[e] = l;
    }
  }
  for (int e = threadIdx.x; e < e_count; e += kRouteThreads) taken[e] = 0;
  __syncthreads();
  if (warp == 0) {
    top_k_warp(shared_logits, taken, e_count, p.top_k, p.norm_topk_prob, p.experts + r * p.top_k,
               p.weights + r * p.top_k);
  }
}

// The router product alone: warp w of block (x, r) computes logit (r, x * kRouteThreads / 32 + w)
// with moe_route_kernel's warp_dot (the same bits).
template <typename T, bool kVec>
__global__ void __launch_bounds__(kRouteThreads) moe_router_logits_kernel(MoeRouteParams p) {
  pdl_begin();  // first: the inputs are the previous kernels' outputs (pdl.cuh)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int e = static_cast<int>(blockIdx.x) * (kRouteThreads / 32) + warp;
  if (e >= p.num_experts) return;  // whole warps leave; no block-wide barrier follows
  const int64_t r = blockIdx.y;
  const float l = warp_dot<T, kVec>(p.x + r * p.hidden, static_cast<const T*>(p.router) + int64_t{e} * p.hidden,
                                    p.hidden, lane);
  if (lane == 0) p.logits_scratch[r * p.num_experts + e] = l;
}

__global__ void __launch_bounds__(kGroupThreads) moe_group_kernel(MoeGroupParams p) {
  pdl_begin();  // first: the inputs are the previous kernels' outputs (pdl.cuh)
  extern __shared__ int32_t group_shared[];  // counts [E], then starts [E]
  int32_t* counts = group_shared;
  int32_t* starts = group_shared + p.num_experts;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int kWarps = kGroupThreads / 32;
  const int64_t n = p.num_choices;
  for (int e = warp; e < p.num_experts; e += kWarps) {
    int count = 0;
    for (int64_t base = 0; base < n; base += 32) {
      const int64_t c = base + lane;
      count += __popc(__ballot_sync(kFullMask, c < n && p.experts[c] == e));
    }
    if (lane == 0) counts[e] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t at = 0, num_active = 0;
    for (int e = 0; e < p.num_experts; ++e) {
      starts[e] = at;
      p.offsets[e] = at;
      if (counts[e] > 0) p.active[num_active++] = e;
      at += counts[e];
    }
    p.offsets[p.num_experts] = at;
    p.active[p.num_experts] = num_active;
  }
  __syncthreads();
  const unsigned below = (1u << lane) - 1u;
  for (int e = warp; e < p.num_experts; e += kWarps) {
    if (counts[e] == 0) continue;
    int32_t at = starts[e];
    for (int64_t base = 0; base < n; base += 32) {
      const int64_t c = base + lane;
      const bool mine = c < n && p.experts[c] == e;
      const unsigned ballot = __ballot_sync(kFullMask, mine);
      if (mine) p.order[at + __popc(ballot & below)] = static_cast<int32_t>(c);
      at += __popc(ballot);
    }
  }
}

// The rows of positions i0 .. i0 + kRows (clamped to end - 1; the extra rows are computed and
// dropped) against kW weight rows: acc[j][r] = warp sum of x_r . w_j.
template <typename T, int kW, int kRows, bool kVec>
__device__ __forceinline__ void grouped_dots(const T* const (&w)[kW], const float* const (&x)[kRows], int64_t n,
                                             int lane, float (&acc)[kW][kRows]) {
#pragma unroll
  for (int j = 0; j < kW; ++j) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[j][r] = 0.0f;
  }
  if constexpr (kVec) {
    for (int64_t c = int64_t{lane} * 8; c < n; c += 256) {
      float xv[kRows][8];
#pragma unroll
      for (int r = 0; r < kRows; ++r) load8(x[r] + c, xv[r]);
#pragma unroll
      for (int j = 0; j < kW; ++j) {
        float wv[8];
        load8(w[j] + c, wv);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int t = 0; t < 8; ++t) acc[j][r] = fmaf(wv[t], xv[r][t], acc[j][r]);
        }
      }
    }
  } else {
    for (int64_t c = lane; c < n; c += 32) {
      float xv[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) xv[r] = x[r][c];
#pragma unroll
      for (int j = 0; j < kW; ++j) {
        const float wv = to_f32(w[j][c]);
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[j][r] = fmaf(wv, xv[r], acc[j][r]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kW; ++j) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[j][r] = warp_sum(acc[j][r]);
  }
}

// Output features per warp: gate/up 2 (a gate row and an up row each), down 4.
template <bool kGateUp>
inline constexpr int kFeaturesPerWarp = kGateUp ? 2 : 4;

template <typename T, bool kGateUp, int kRows, bool kVec>
__global__ void __launch_bounds__(kGroupedWarps * 32) moe_grouped_kernel(MoeGroupedParams p) {
  pdl_begin();  // first: the inputs are the previous kernels' outputs (pdl.cuh)
  constexpr int kFeat = kFeaturesPerWarp<kGateUp>;
  constexpr int kW = kGateUp ? 2 * kFeat : kFeat;
  if (static_cast<int>(blockIdx.y) >= p.active[p.num_experts]) return;
  const int e = p.active[blockIdx.y];
  const int begin = p.offsets[e], end = p.offsets[e + 1];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t f0 = (int64_t{blockIdx.x} * kGroupedWarps + warp) * kFeat;
  if (f0 >= p.out_features) return;
  const int64_t in = p.in_features, out = p.out_features;
  const T* w[kW];
#pragma unroll
  for (int j = 0; j < kFeat; ++j) {
    const int64_t f = f0 + j < out ? f0 + j : out - 1;  // past the end: computed, not written
    w[j] = static_cast<const T*>(p.first[e]) + f * in;
    if constexpr (kGateUp) w[kFeat + j] = static_cast<const T*>(p.second[e]) + f * in;
  }
  for (int i0 = begin; i0 < end; i0 += kRows) {
    const float* x[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int i = min(i0 + r, end - 1);
      x[r] = p.x + (kGateUp ? int64_t{p.order[i] / p.top_k} : int64_t{i}) * in;
    }
    float acc[kW][kRows];
    grouped_dots<T, kW, kRows, kVec>(w, x, in, lane, acc);
    if (lane != 0) continue;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (i0 + r >= end) break;
      const int64_t row = kGateUp ? int64_t{i0 + r} : int64_t{p.order[i0 + r]};
#pragma unroll
      for (int j = 0; j < kFeat; ++j) {
        if (f0 + j >= out) break;
        if constexpr (kGateUp) {
          p.y[row * out + f0 + j] = swiglu(acc[j][r], acc[kFeat + j][r]);
        } else {
          p.y[row * out + f0 + j] = acc[j][r];
        }
      }
    }
  }
}

__global__ void __launch_bounds__(kCombineThreads) moe_combine_kernel(MoeCombineParams p) {
  pdl_begin();  // first: the inputs are the previous kernels' outputs (pdl.cuh)
  const int64_t r = blockIdx.x;
  const int k = p.top_k;
  float g = 0.0f;
  if (p.shared_out != nullptr) g = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-p.shared_gate[r])));
  for (int64_t c = threadIdx.x; c < p.hidden; c += kCombineThreads) {
    float v = 0.0f;
    for (int j = 0; j < k; ++j) {
      v = __fadd_rn(v, __fmul_rn(p.weights[r * k + j], p.expert_out[(r * k + j) * p.hidden + c]));
    }
    if (p.shared_out != nullptr) v = __fadd_rn(v, __fmul_rn(g, p.shared_out[r * p.hidden + c]));
    p.y[r * p.hidden + c] = v;
  }
}

template <typename T>
void route_typed(const MoeRouteParams& p, bool vec, size_t shared, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.rows));
  if (vec) {
    launch_pdl(moe_route_kernel<T, true>, grid, kRouteThreads, shared, stream, p);
  } else {
    launch_pdl(moe_route_kernel<T, false>, grid, kRouteThreads, shared, stream, p);
  }
}

template <typename T, bool kGateUp, int kRows>
void grouped_rows(const MoeGroupedParams& p, bool vec, cudaStream_t stream) {
  constexpr int64_t kTile = int64_t{kGroupedWarps} * kFeaturesPerWarp<kGateUp>;
  const dim3 grid(static_cast<unsigned>((p.out_features + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>(p.num_experts, p.num_choices)));
  if (vec) {
    launch_pdl(moe_grouped_kernel<T, kGateUp, kRows, true>, grid, kGroupedWarps * 32, 0, stream, p);
  } else {
    launch_pdl(moe_grouped_kernel<T, kGateUp, kRows, false>, grid, kGroupedWarps * 32, 0, stream, p);
  }
}

template <bool kGateUp>
void grouped_typed(const MoeGroupedParams& p, bool vec, cudaStream_t stream) {
  const bool one_row = p.max_rows_per_expert <= 1;
  auto typed = [&](auto tag) {
    using T = decltype(tag);
    if (one_row) {
      grouped_rows<T, kGateUp, 1>(p, vec, stream);
    } else {
      grouped_rows<T, kGateUp, 4>(p, vec, stream);
    }
  };
  switch (p.type) {
    case WeightType::kBF16: typed(__nv_bfloat16{}); break;
    case WeightType::kF16: typed(__half{}); break;
    case WeightType::kF32: typed(float{}); break;
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

namespace detail {

void queue_moe_route(const MoeRouteParams& p, bool vec, cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(p.num_experts) * (sizeof(float) + 1);
  switch (p.router_type) {
    case WeightType::kBF16: route_typed<__nv_bfloat16>(p, vec, shared, stream); break;
    case WeightType::kF16: route_typed<__half>(p, vec, shared, stream); break;
    case WeightType::kF32: route_typed<float>(p, vec, shared, stream); break;
  }
  CUDA_CHECK_LAUNCH();
}

void queue_moe_router_logits(const MoeRouteParams& p, bool vec, cudaStream_t stream) {
  constexpr int kWarps = kRouteThreads / 32;
  const dim3 grid(static_cast<unsigned>((p.num_experts + kWarps - 1) / kWarps), static_cast<unsigned>(p.rows));
  auto typed = [&](auto tag) {
    using T = decltype(tag);
    if (vec) {
      launch_pdl(moe_router_logits_kernel<T, true>, grid, kRouteThreads, 0, stream, p);
    } else {
      launch_pdl(moe_router_logits_kernel<T, false>, grid, kRouteThreads, 0, stream, p);
    }
  };
  switch (p.router_type) {
    case WeightType::kBF16: typed(__nv_bfloat16{}); break;
    case WeightType::kF16: typed(__half{}); break;
    case WeightType::kF32: typed(float{}); break;
  }
  CUDA_CHECK_LAUNCH();
}

void queue_moe_group(const MoeGroupParams& p, cudaStream_t stream) {
  const size_t shared = 2 * static_cast<size_t>(p.num_experts) * sizeof(int32_t);
  launch_pdl(moe_group_kernel, dim3(1), kGroupThreads, shared, stream, p);
  CUDA_CHECK_LAUNCH();
}

void queue_moe_grouped(const MoeGroupedParams& p, bool gate_up, bool vec, cudaStream_t stream) {
  if (gate_up) {
    grouped_typed<true>(p, vec, stream);
  } else {
    grouped_typed<false>(p, vec, stream);
  }
}

void queue_moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  launch_pdl(moe_combine_kernel, dim3(static_cast<unsigned>(p.rows)), kCombineThreads, 0, stream, p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace spindle::kernels::cuda
