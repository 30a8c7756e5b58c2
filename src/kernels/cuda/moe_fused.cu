// Kernels of moe_kernels.h's small-step path (kMoeFusedMaxRows): three launches per MoE block.
//
// route_group: grid (ceil(E / 8), ceil(rows / 4)) blocks of 8 warps; warp w of block (bx, by)
//   asks L2 for its router row before its PDL wait, then computes the router logits of expert bx * 8 + w for rows by * 4 .. by * 4 + 3 (moe_kernels.cu's
//   warp_dot order: the same bits) into the logits scratch, then the block takes a ticket (a
//   device counter); the last block reads every logit back (L2), picks each row's top k (one warp
//   per row, top_k_warp: the same ids and weight bits as launch_moe_route) and groups the choices
//   by expert (shared-memory counts, a warp scan, __match_any ranks: the same offsets, order and
//   active list as launch_moe_group), then sets the counter back to 0 for the next launch.
// gate_up_stream: grid (ceil(F / 8), min(E, choices)); warp w of block (bx, slot) owns features
//   f0 = (bx * 4 + w) * 2 and f0 + 1 of expert active[slot] (gate and up rows: 4 weight rows) for
//   every row routed to it, 4, 2 or 1 rows at a time; lane l reads the 16-byte vectors l, l + 32,
//   ... of each weight row, two vectors per row in flight (8 per lane), and the same columns of
//   the f32 rows; f32 FMA in moe_kernels.cu's grouped_dots order, a warp sum, SwiGLU.
// down_combine: grid (ceil(H / 8), min(E, choices)); warp w owns outputs o0 = (bx * 4 + w) * 2,
//   o0 + 1 of expert active[slot], four vectors per weight row in flight; writes out[choice, o].
//   Before its wait it asks L2 for the first 4 vectors per lane of its weight rows (2 KiB a row) (the expert is
//   known: active[] was written by route_group, complete before this launch, see below), so the
//   down weights stream in under gate_up_stream's tail. Then the block takes a ticket of its
//   output tile; the last of the tile's active experts computes y of the tile for every row:
//   sum_j w[r, j] * out[r k + j] in slot order, + sigmoid(shared_gate) * shared_out (launch_moe_
//   combine's arithmetic, the same bits), and sets the tile's counter back to 0.
//
// PDL (pdl.cuh): every kernel calls pdl_begin (wait first) before touching another kernel's output
// (route_group and down_combine prefetch weights into L2 before it), except down_combine's early
// reads of active[] and the expert table, for its L2 prefetch only (read again after its wait): it
// launches only once every gate_up_stream block has passed its wait, i.e. once route_group has
// completed. So the three
// launches must be queued back to back in this order (launch_moe_down_combine's contract).
//
// Time at batch 1 of Qwen3-30B-A3B on an H200: moe_kernels.h's budget (a prediction).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_device.cuh"
#include "kernels/cuda/moe_kernels.h"
#include "kernels/cuda/moe_kernels_launch.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/round16.cuh"
#include "kernels/cuda/stream_load.cuh"

namespace spindle::kernels::cuda {
namespace {

using namespace detail::moe;
using detail::load_stream;

constexpr int kRouteWarps = 8;
constexpr int kRouteThreads = kRouteWarps * 32;
constexpr int kRouteRowsPerBlock = 4;
constexpr int kStreamWarps = 4;
constexpr int kStreamThreads = kStreamWarps * 32;
// Resident blocks per SM the register budget is set for (<= 80 registers a thread): batch 1 of
// Qwen3-30B-A3B is 768 gate/up blocks, one wave on 132 SMs.
constexpr int kStreamBlocksPerSm = 6;
constexpr int kGateUpFeatures = 2;  // per warp: 4 weight rows (gate, up)
constexpr int kDownOutputs = 2;     // per warp
static_assert(kStreamWarps * kDownOutputs == kMoeDownCombineTile, "a down block is one output tile");

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// ---- the streamed dot products ---------------------------------------------------------------

// acc[j][r] = the warp's sum of w_j . x_r over `vecs` 16-byte vectors of w (8 columns each): lane l
// takes vectors l, l + 32, ... (kG of them per row in flight, the last group too: Qwen3's down rows
// are 3 vectors a lane, read at once), each column's fmaf(w, x, acc) in order, then the butterfly
// (grouped_dots' order: every lane returns the sums).
template <bool kBf16, int kW, int kRows, int kG>
__device__ __forceinline__ void stream_dots(const uint4* const (&w)[kW], const float* const (&x)[kRows], int64_t vecs,
                                            int lane, float (&acc)[kW][kRows]) {
#pragma unroll
  for (int j = 0; j < kW; ++j) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[j][r] = 0.0f;
  }
  // kG vectors per row from v (partial: only those below vecs, the rest neither read nor added).
  auto group = [&](int64_t v, auto partial) {
    constexpr bool kPartial = decltype(partial)::value;
    uint4 wv[kG][kW];
#pragma unroll
    for (int u = 0; u < kG; ++u) {
#pragma unroll
      for (int j = 0; j < kW; ++j) {
        wv[u][j] = !kPartial || v + 32 * u < vecs ? load_stream(w[j] + v + 32 * u) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kG; ++u) {
      if (kPartial && v + 32 * u >= vecs) break;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float xv[8];
        load8(x[r] + 8 * (v + 32 * u), xv);
#pragma unroll
        for (int j = 0; j < kW; ++j) {
          float wf[8];
          unpack8<kBf16>(wv[u][j], wf);
#pragma unroll
          for (int t = 0; t < 8; ++t) acc[j][r] = fmaf(wf[t], xv[t], acc[j][r]);
        }
      }
    }
  };
  int64_t v = lane;
  for (; v + 32 * (kG - 1) < vecs; v += 32 * kG) group(v, std::false_type{});
  if (v < vecs) group(v, std::true_type{});  // the last 1 .. kG - 1 vectors, all loads in flight at once
#pragma unroll
  for (int j = 0; j < kW; ++j) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[j][r] = warp_sum(acc[j][r]);
  }
}

// ---- route_group ----------------------------------------------------------------------------

// Logits of expert e for rows r0 .. r0 + n - 1 (n <= 4) into scratch [rows, E]: warp_dot's sum (the
// 16-bit vector case through stream_dots: the same order and unpacking, the same bits).
template <typename T, bool kVec>
__device__ void router_logits_rows(const MoeFusedRouteParams& p, int e, int64_t r0, int n, int lane) {
  const MoeRouteParams& q = p.route;
  const T* w = static_cast<const T*>(q.router) + int64_t{e} * q.hidden;
  if constexpr (kVec && !std::is_same_v<T, float>) {  // 16-bit: 8 vectors a lane in flight (Qwen3: the whole row)
    const uint4* wr[1] = {reinterpret_cast<const uint4*>(w)};
    auto rows = [&](auto count) {
      constexpr int kRows = decltype(count)::value;
      const float* x[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) x[r] = q.x + (r0 + r) * q.hidden;
      float acc[1][kRows];
      stream_dots<std::is_same_v<T, __nv_bfloat16>, 1, kRows, 8>(wr, x, q.hidden / 8, lane, acc);
      if (lane != 0) return;
#pragma unroll
      for (int r = 0; r < kRows; ++r) q.logits_scratch[(r0 + r) * q.num_experts + e] = acc[0][r];
    };
    static_assert(kRouteRowsPerBlock == 4, "rows 1..4 below");
    switch (n) {
      case 1: rows(std::integral_constant<int, 1>{}); break;
      case 2: rows(std::integral_constant<int, 2>{}); break;
      case 3: rows(std::integral_constant<int, 3>{}); break;
      default: rows(std::integral_constant<int, 4>{}); break;
    }
    return;
  }
  float acc[kRouteRowsPerBlock] = {};
  if constexpr (kVec) {
#pragma unroll 4
    for (int64_t c = int64_t{lane} * 8; c < q.hidden; c += 256) {
      float wv[8];
      load8(w + c, wv);
#pragma unroll
      for (int r = 0; r < kRouteRowsPerBlock; ++r) {
        if (r >= n) break;
        float xv[8];
        load8(q.x + (r0 + r) * q.hidden + c, xv);
#pragma unroll
        for (int t = 0; t < 8; ++t) acc[r] = fmaf(wv[t], xv[t], acc[r]);
      }
    }
  } else {
    for (int64_t c = lane; c < q.hidden; c += 32) {
      const float wv = to_f32(w[c]);
#pragma unroll
      for (int r = 0; r < kRouteRowsPerBlock; ++r) {
        if (r < n) acc[r] = fmaf(wv, q.x[(r0 + r) * q.hidden + c], acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRouteRowsPerBlock; ++r) {
    if (r >= n) break;  // n is the same in every lane
    const float s = warp_sum(acc[r]);
    if (lane == 0) q.logits_scratch[(r0 + r) * q.num_experts + e] = s;
  }
}

// The last block: each row's top k (warp per row), then the grouping (launch_moe_group's output).
__device__ void top_k_and_group(const MoeFusedRouteParams& p, const float* logits, unsigned char* shared) {
  const MoeRouteParams& q = p.route;
  const int e_count = q.num_experts, k = q.top_k;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* my_logits = reinterpret_cast<float*>(shared) + warp * e_count;
  unsigned char* taken = shared + kRouteWarps * e_count * 4 + warp * e_count;
  for (int64_t r = warp; r < q.rows; r += kRouteWarps) {
    for (int e = lane; e < e_count; e += 32) {
      my_logits[e] = __ldcg(logits + r * e_count + e);
      taken[e] = 0;
    }
    __syncwarp();
    top_k_warp(my_logits, taken, e_count, k, q.norm_topk_prob, q.experts + r * k, q.weights + r * k);
    __syncwarp();
  }
  __syncthreads();  // the block's global writes of experts[] are visible to the block
  const int n = static_cast<int>(q.rows) * k;
  const size_t taken_bytes = (size_t{kRouteWarps} * e_count + 3) / 4 * 4;
  int* counts = reinterpret_cast<int*>(shared + kRouteWarps * e_count * 4 + taken_bytes);
  int* starts = counts + e_count;
  int* chosen = starts + e_count;
  for (int e = threadIdx.x; e < e_count; e += kRouteThreads) counts[e] = 0;
  for (int c = threadIdx.x; c < n; c += kRouteThreads) chosen[c] = q.experts[c];
  __syncthreads();
  for (int c = threadIdx.x; c < n; c += kRouteThreads) atomicAdd(&counts[chosen[c]], 1);
  __syncthreads();
  if (warp == 0) {  // lane l scans experts [l * per, (l + 1) * per): ascending offsets and active list
    const int per = (e_count + 31) / 32, lo = min(lane * per, e_count), hi = min(lo + per, e_count);
    int sum = 0, num = 0;
    for (int e = lo; e < hi; ++e) sum += counts[e], num += counts[e] > 0;
    int sum_incl = sum, num_incl = num;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int s = __shfl_up_sync(kFullMask, sum_incl, off), m = __shfl_up_sync(kFullMask, num_incl, off);
      if (lane >= off) sum_incl += s, num_incl += m;
    }
    int at = sum_incl - sum, slot = num_incl - num;
    for (int e = lo; e < hi; ++e) {
      starts[e] = at;
      p.offsets[e] = at;
      if (counts[e] > 0) p.active[slot++] = e;
      at += counts[e];
    }
    if (lane == 31) {
      p.offsets[e_count] = sum_incl;
      p.active[e_count] = num_incl;
    }
    __syncwarp();
    // order: each expert's choices ascending (chunks of 32 in order, ranks within a chunk by lane).
    const unsigned below = (1u << lane) - 1u;
    for (int base = 0; base < n; base += 32) {
      const int c = base + lane;
      const int e = c < n ? chosen[c] : -1 - lane;  // a lane past the end matches no other
      const unsigned same = __match_any_sync(kFullMask, e);
      const int rank = __popc(same & below);
      if (c < n) p.order[starts[e] + rank] = c;
      __syncwarp();
      if (c < n && rank == 0) starts[e] += __popc(same);
      __syncwarp();
    }
  }
  if (threadIdx.x == 0) *p.counter = 0;  // every other block has taken its ticket
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kRouteThreads) moe_route_group_kernel(MoeFusedRouteParams p) {
  extern __shared__ __align__(16) unsigned char route_shared[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int e = static_cast<int>(blockIdx.x) * kRouteWarps + warp;
  if (p.route.logits == nullptr && e < p.route.num_experts) {
    // Before the wait, the warp's router row (a weight: no kernel writes it) asked of L2, 32 bytes
    // a lane step: in a served step this kernel launches during the norm before it (pdl.cuh), so
    // the router's round trip overlaps that kernel instead of following it.
    const auto* row = static_cast<const unsigned char*>(p.route.router) +
                      int64_t{e} * p.route.hidden * static_cast<int64_t>(sizeof(T));
    for (int64_t b = int64_t{lane} * 32; b < p.route.hidden * static_cast<int64_t>(sizeof(T)); b += 32 * 32) {
      prefetch_l2(row + b);
    }
  }
  pdl_begin();  // x (and given logits) are the previous kernels' outputs (pdl.cuh)
  const float* logits = p.route.logits;
  if (logits == nullptr) {
    const int64_t r0 = int64_t{blockIdx.y} * kRouteRowsPerBlock;
    const int n = static_cast<int>(min(int64_t{kRouteRowsPerBlock}, p.route.rows - r0));
    if (e < p.route.num_experts) router_logits_rows<T, kVec>(p, e, r0, n, lane);
    logits = p.route.logits_scratch;
    __threadfence();  // this block's logits are visible device-wide before its ticket
  }
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(p.counter, 1) == static_cast<int>(gridDim.x * gridDim.y) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  top_k_and_group(p, logits, route_shared);
}

// ---- the streamed expert products -----------------------------------------------------------

// Runs the grouped positions [begin, end) of one expert kMaxRows (4 or 2), 2 or 1 at a time (the
// bits of a row do not depend on which): emit(i0, acc) receives the sums of positions i0 .. i0 +
// kRows - 1. A warp's weight rows are read from memory in the first pass, from L2 in the others.
template <bool kBf16, int kW, int kG, int kMaxRows, typename RowOf, typename Emit>
__device__ __forceinline__ void expert_rows(const uint4* const (&w)[kW], int begin, int end, int64_t vecs, int lane,
                                            RowOf row_of, Emit emit) {
  auto run = [&](int i0, auto rows) {
    constexpr int kRows = decltype(rows)::value;
    const float* x[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) x[r] = row_of(i0 + r);
    float acc[kW][kRows];
    stream_dots<kBf16, kW, kRows, kG>(w, x, vecs, lane, acc);
    emit(i0, acc);
  };
  static_assert(kMaxRows == 2 || kMaxRows == 4, "row tiles of 4, 2, 1 or of 2, 1");
  int i0 = begin;
  for (; i0 + kMaxRows <= end; i0 += kMaxRows) run(i0, std::integral_constant<int, kMaxRows>{});
  if (kMaxRows == 4 && i0 + 2 <= end) run(i0, std::integral_constant<int, 2>{}), i0 += 2;
  if (i0 < end) run(i0, std::integral_constant<int, 1>{});
}

template <bool kBf16>
__global__ void __launch_bounds__(kStreamThreads, kStreamBlocksPerSm) moe_gate_up_stream_kernel(MoeGroupedParams p) {
  pdl_begin();  // first: the grouping and x are the previous kernels' outputs; down_combine relies on it
  if (static_cast<int>(blockIdx.y) >= p.active[p.num_experts]) return;
  const int e = p.active[blockIdx.y];
  const int begin = p.offsets[e], end = p.offsets[e + 1];
  const int lane = threadIdx.x & 31;
  const int64_t f0 = (int64_t{blockIdx.x} * kStreamWarps + (threadIdx.x >> 5)) * kGateUpFeatures;
  const int64_t in = p.in_features, out = p.out_features;
  if (f0 >= out) return;
  const uint4* w[2 * kGateUpFeatures];
#pragma unroll
  for (int j = 0; j < kGateUpFeatures; ++j) {
    const int64_t f = min(f0 + j, out - 1);  // past the end: computed, not written
    w[j] = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.first[e]) + f * in);
    w[kGateUpFeatures + j] = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.second[e]) + f * in);
  }
  const auto row_of = [&](int i) { return p.x + int64_t{p.order[min(i, end - 1)] / p.top_k} * in; };
  const auto emit = [&](int i0, const auto& acc) {
    constexpr int kRows = std::extent_v<std::remove_reference_t<decltype(acc)>, 1>;
    if (lane != 0) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int j = 0; j < kGateUpFeatures; ++j) {
        if (f0 + j < out) p.y[int64_t{i0 + r} * out + f0 + j] = swiglu(acc[j][r], acc[kGateUpFeatures + j][r]);
      }
    }
  };
  expert_rows<kBf16, 2 * kGateUpFeatures, 2, 2>(w, begin, end, in / 8, lane, row_of, emit);
}

template <bool kBf16>
__global__ void __launch_bounds__(kStreamThreads, kStreamBlocksPerSm) moe_down_combine_kernel(MoeDownCombineParams q) {
  const MoeGroupedParams& p = q.down;
  const int lane = threadIdx.x & 31;
  const int64_t o_tile = int64_t{blockIdx.x} * kMoeDownCombineTile;
  const int64_t o0 = o_tile + (threadIdx.x >> 5) * kDownOutputs;
  const int64_t in = p.in_features, out = p.out_features, vecs = in / 8;
  const auto weight_rows = [&](int expert, const uint4* (&w)[kDownOutputs]) {
#pragma unroll
    for (int j = 0; j < kDownOutputs; ++j) {
      w[j] = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.first[expert]) + min(o0 + j, out - 1) * in);
    }
  };
  const uint4* w[kDownOutputs];
  // Before the wait, for the L2 prefetch only: active[] (route_group's output, complete: see the
  // header) read from L2, not through this SM's L1. PDL promises visibility to the direct
  // dependent at its wait, so the expert and the count this block works with and counts tickets
  // against are read again after it.
  if (const int early = __ldcg(p.active + p.num_experts); static_cast<int>(blockIdx.y) < early) {
    weight_rows(__ldcg(p.active + blockIdx.y), w);
#pragma unroll
    for (int j = 0; j < kDownOutputs; ++j) {
      for (int64_t v = lane; v < min(vecs, int64_t{4 * 32}); v += 32) prefetch_l2(w[j] + v);
    }
  }
  pdl_begin();  // act is gate_up_stream's output
  const int num_active = __ldcg(p.active + p.num_experts);
  if (static_cast<int>(blockIdx.y) >= num_active) return;  // whole blocks: no barrier is skipped
  const int e = __ldcg(p.active + blockIdx.y);
  weight_rows(e, w);
  const int begin = p.offsets[e], end = p.offsets[e + 1];
  if (o0 < out) {
    const auto row_of = [&](int i) { return p.x + int64_t{min(i, end - 1)} * in; };
    const auto emit = [&](int i0, const auto& acc) {
      constexpr int kRows = std::extent_v<std::remove_reference_t<decltype(acc)>, 1>;
      if (lane != 0) return;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t choice = p.order[i0 + r];
#pragma unroll
        for (int j = 0; j < kDownOutputs; ++j) {
          if (o0 + j < out) p.y[choice * out + o0 + j] = acc[j][r];
        }
      }
    };
    expert_rows<kBf16, kDownOutputs, 4, 4>(w, begin, end, vecs, lane, row_of, emit);
  }
  __threadfence();  // this block's outputs are visible device-wide before its ticket
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(q.tile_counters + blockIdx.x, 1) == num_active - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const MoeCombineParams& c = q.combine;
  const int k = c.top_k;
  const int64_t tile_outputs = min(int64_t{kMoeDownCombineTile}, out - o_tile);
  for (int64_t idx = threadIdx.x; idx < c.rows * kMoeDownCombineTile; idx += kStreamThreads) {
    const int64_t r = idx / kMoeDownCombineTile, o = o_tile + idx % kMoeDownCombineTile;
    if (idx % kMoeDownCombineTile >= tile_outputs) continue;
    float v = 0.0f;
    for (int j = 0; j < k; ++j) v = __fadd_rn(v, __fmul_rn(c.weights[r * k + j], __ldcg(p.y + (r * k + j) * out + o)));
    if (c.shared_out != nullptr) {
      const float g = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-c.shared_gate[r])));
      v = __fadd_rn(v, __fmul_rn(g, c.shared_out[r * out + o]));
    }
    c.y[r * out + o] = v;
  }
  if (threadIdx.x == 0) q.tile_counters[blockIdx.x] = 0;  // every working block has taken its ticket
}

template <typename T>
void route_group_typed(const MoeFusedRouteParams& p, bool vec, size_t shared, cudaStream_t stream) {
  dim3 grid(1, 1);
  if (p.route.logits == nullptr) {
    grid = dim3(static_cast<unsigned>((p.route.num_experts + kRouteWarps - 1) / kRouteWarps),
                static_cast<unsigned>((p.route.rows + kRouteRowsPerBlock - 1) / kRouteRowsPerBlock));
  }
  if (vec) {
    launch_pdl(moe_route_group_kernel<T, true>, grid, kRouteThreads, shared, stream, p);
  } else {
    launch_pdl(moe_route_group_kernel<T, false>, grid, kRouteThreads, shared, stream, p);
  }
}

dim3 stream_grid(int64_t features_per_block, int64_t out, const MoeGroupedParams& p) {
  return dim3(static_cast<unsigned>((out + features_per_block - 1) / features_per_block),
              static_cast<unsigned>(std::min<int64_t>(p.num_experts, p.num_choices)));
}

}  // namespace

namespace detail {

size_t moe_route_group_shared_bytes(int num_experts, int64_t num_choices) {
  const size_t e = static_cast<size_t>(num_experts);
  return size_t{kRouteWarps} * e * 4 + (size_t{kRouteWarps} * e + 3) / 4 * 4 + 2 * e * 4 +
         static_cast<size_t>(num_choices) * 4;
}

void queue_moe_route_group(const MoeFusedRouteParams& p, bool vec, cudaStream_t stream) {
  const size_t shared = moe_route_group_shared_bytes(p.route.num_experts, p.route.rows * p.route.top_k);
  switch (p.route.router_type) {
    case WeightType::kBF16: route_group_typed<__nv_bfloat16>(p, vec, shared, stream); break;
    case WeightType::kF16: route_group_typed<__half>(p, vec, shared, stream); break;
    case WeightType::kF32: route_group_typed<float>(p, vec, shared, stream); break;
  }
  CUDA_CHECK_LAUNCH();
}

void queue_moe_gate_up_stream(const MoeGroupedParams& p, cudaStream_t stream) {
  const dim3 grid = stream_grid(int64_t{kStreamWarps} * kGateUpFeatures, p.out_features, p);
  const auto kernel =
      p.type == WeightType::kBF16 ? moe_gate_up_stream_kernel<true> : moe_gate_up_stream_kernel<false>;
  launch_pdl(kernel, grid, kStreamThreads, 0, stream, p);
  CUDA_CHECK_LAUNCH();
}

void queue_moe_down_combine(const MoeDownCombineParams& p, cudaStream_t stream) {
  const dim3 grid = stream_grid(kMoeDownCombineTile, p.down.out_features, p.down);
  const auto kernel =
      p.down.type == WeightType::kBF16 ? moe_down_combine_kernel<true> : moe_down_combine_kernel<false>;
  launch_pdl(kernel, grid, kStreamThreads, 0, stream, p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace spindle::kernels::cuda
