// Mixture-of-experts kernels on a CUDA device (CudaOps::moe, model/cuda_moe.cc): the router
// product and top-k, the grouping of a step's choices by expert, the grouped expert products and
// the weighted sum back into the rows.
//
// Nothing here reads a count on the host: the grouping writes per-expert offsets and the list of
// selected experts into device memory and the products read them there, so a step's launches
// are the same for any routing (a CUDA graph captured once replays for every later step).
//
// Arithmetic (kernels/cpu/moe_routing.h and CpuOps::moe define it; f32 activations):
//   router logits  l[r, e] = sum_c x[r, c] * W_router[e, c], widened weights, f32 accumulation
//   top-k          the k largest logits, largest first, an exact tie to the lower expert index, a
//                  NaN never chosen over a number (a row of NaNs chooses 0..k-1)
//   weights        w_j = exp(l_(e_j) - l_(e_0)) / sum_e exp(l_e - l_(e_0)) in f32 (the sum over
//                  lanes, then a warp tree: not the CPU's index order, so it may differ in the
//                  last bits), divided by sum_j w_j (in slot order) when norm_topk_prob
//   experts        act = silu(x W_gate^T) * (x W_up^T), out = act W_down^T (act f32), the same
//                  order for a row in any batch (batch-invariant), by one of two kernels fixed
//                  by the weights' type and alignment (moe_grouped_uses_tensor_cores):
//                  16-bit experts on tensor cores (moe_mma.cu): x split as x = hi + lo, both
//                  rounded to the weights' type (~16 significant bits, cublas_linear.h's split),
//                  exact 16-bit products, f32 accumulation in 32-column chunks ascending;
//                  f32 experts (and 16-bit ones whose width is not a multiple of 8): f32 FMA,
//                  every dot product lane-strided in f32 then summed over the warp
//   combine        y[r] = sum_j w[r, j] * out[r k + j] in slot order, then
//                  y[r] += sigmoid(shared_gate[r]) * shared_out[r] with a shared expert.
//
// Plain launch functions: every pointer is device memory of the current device, every launch is
// queued on `stream` with programmatic dependent launch (pdl.cuh: each kernel waits for the one
// before it first, only its launch overlaps) and checked (errors throw spindle::Error). Shapes are
// checked by the callers (the launch functions check only what would make a kernel read out of
// bounds). C++17.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/model_ops.h"

namespace spindle::kernels::cuda {

// The most experts per row a top-k launch chooses (one lane keeps each choice).
inline constexpr int kMoeMaxTopK = 32;
// The most experts a router has on CUDA (their logits sit in shared memory).
inline constexpr int kMoeMaxExperts = 4096;

// Steps of at most this many rows compute the router product across the device first when
// MoeRouteParams::logits_scratch is given: one warp per (row, expert), the same sum in the same
// order as the one-block-per-row kernel (the same bits), then the top-k from those logits. One block
// per row would leave a decode step's router bytes (Qwen3-30B-A3B: 512 KiB) to one SM's warps.
inline constexpr int64_t kMoeRouteSpreadMaxRows = 64;

struct MoeRouteParams {
  // Logits from a product: x [rows, hidden] f32 and router [num_experts, hidden] of router_type.
  const float* x = nullptr;
  const void* router = nullptr;
  WeightType router_type = WeightType::kBF16;
  int64_t hidden = 0;
  // Or given logits [rows, num_experts] f32 (x and router null): the top-k alone.
  const float* logits = nullptr;
  int64_t rows = 0;
  int num_experts = 0;  // 1..kMoeMaxExperts
  int top_k = 0;        // 1..min(num_experts, kMoeMaxTopK)
  bool norm_topk_prob = false;
  int32_t* experts = nullptr;  // out [rows, top_k]: chosen experts, largest logit first
  float* weights = nullptr;    // out [rows, top_k]: their routing weights
  // [rows, num_experts] f32 device scratch for the router product (kMoeRouteSpreadMaxRows), or null.
  float* logits_scratch = nullptr;
};
// One block per row (after the spread router product, see kMoeRouteSpreadMaxRows). Throws
// spindle::Error for bad params.
void launch_moe_route(const MoeRouteParams& p, cudaStream_t stream);

struct MoeGroupParams {
  const int32_t* experts = nullptr;  // [num_choices] (route's experts, flat choice c = r * top_k + j), in [0, E)
  int64_t num_choices = 0;
  int num_experts = 0;  // E
  // out: offsets [E + 1]; order [num_choices]: order[offsets[e] .. offsets[e + 1]) = the choices
  // c with experts[c] == e, ascending; active [E + 1]: active[0 .. n) the experts with a choice,
  // ascending, and active[E] = n.
  int32_t* offsets = nullptr;
  int32_t* order = nullptr;
  int32_t* active = nullptr;
};
// One block (a stable counting sort: one warp per expert at a time).
void launch_moe_group(const MoeGroupParams& p, cudaStream_t stream);

// The grouped products over the selected experts (launch_moe_group's output).
struct MoeGroupedParams {
  const int32_t* offsets = nullptr;  // [E + 1]
  const int32_t* order = nullptr;    // [num_choices]
  const int32_t* active = nullptr;   // [E + 1], the count at active[E]
  int num_experts = 0;               // E
  int top_k = 0;
  int64_t num_choices = 0;           // rows * top_k
  int64_t max_rows_per_expert = 0;   // a bound on any expert's count (the step's rows); picks the kernel
  // Per expert e (device arrays of device pointers, [E]): gate/up: first[e] = gate rows [F, in],
  // second[e] = up rows [F, in]; down: first[e] = [out, in], second unused.
  const void* const* first = nullptr;
  const void* const* second = nullptr;
  WeightType type = WeightType::kBF16;
  // in % 8 == 0 and every row 16-byte aligned take the vector loads.
  bool aligned16 = false;
  int64_t in_features = 0;
  int64_t out_features = 0;  // gate/up: F; down: H
  const float* x = nullptr;
  float* y = nullptr;
};
// Whether launch_moe_gate_up / launch_moe_down compute p on tensor cores: bf16 or f16 experts,
// in_features % 8 == 0, aligned16 and x 16-byte aligned.
bool moe_grouped_uses_tensor_cores(const MoeGroupedParams& p);
// act [num_choices, F] at grouped position i (order's index) = silu(x[r] W_gate^T) * (x[r] W_up^T)
// with r = order[i] / top_k, x [rows, in]; y = act.
void launch_moe_gate_up(const MoeGroupedParams& p, cudaStream_t stream);
// out [num_choices, H] at choice c = order[i]: act[i] W_down^T, x = act [num_choices, F]; y = out.
void launch_moe_down(const MoeGroupedParams& p, cudaStream_t stream);

struct MoeCombineParams {
  const float* expert_out = nullptr;  // [rows * top_k, hidden] by choice
  const float* weights = nullptr;     // [rows, top_k]
  const float* shared_out = nullptr;  // [rows, hidden], or null (no shared expert)
  const float* shared_gate = nullptr; // [rows] the shared expert gate's logit (with shared_out)
  int64_t rows = 0;
  int top_k = 0;
  int64_t hidden = 0;
  float* y = nullptr;  // [rows, hidden]
};
void launch_moe_combine(const MoeCombineParams& p, cudaStream_t stream);

// ---- The small-step path (decode and verify steps): three launches instead of six -------------
//
// route_group (router product, top-k and grouping in one launch), gate_up_stream (the weights of
// the selected experts streamed by f32 FMA, SwiGLU in its epilogue), down_combine (the down product
// and, in the last block of each output tile, the weighted sum over the row's experts and the
// shared expert's term). For 16-bit experts (bf16, f16) with 16-byte aligned rows, hidden and
// width multiples of 8, steps of at most kMoeFusedMaxRows rows and routers of at most
// kMoeFusedMaxExperts experts (moe_fused_supported); the general launches above do the rest.
//
// Arithmetic: routing the same bits as launch_moe_route + launch_moe_group (the same dot products,
// top_k_warp, the same grouping); the expert products f32 FMA over f32 rows (the f32 kernel's
// order: 8 columns a lane step, lane-strided, a warp sum), so they differ from the tensor-core
// kernels' (x split into two 16-bit parts) by the split's ~2^-16 relative error: a row is
// batch-invariant within this path (1..kMoeFusedMaxRows rows), not across the two paths. The
// combine is launch_moe_combine's, bit for bit.
//
// Budget at batch 1, Qwen3-30B-A3B (H 2048, F 768, 128 experts, top 8), bf16 experts on an H200
// (4.26 TB/s copy bandwidth; bound: 8 x 3 x 2048 x 768 x 2 B = 75.5 MB + 0.5 MB router = 17.8 us),
// as bench_moe_cuda times it (eager launches, L2 cold). Predictions from the code, not measured:
//   general path, 6 launches (measured 62.7 us, route + group 20.0 us of it): spread logits on 16
//     blocks, ~1 vector a lane in flight, 8 round trips (~6 us); top-k, 1 block (~2 us); grouping,
//     1 block, one thread scanning 128 experts (~4-5 us); the launch gaps between them (~2-3 us
//     each); gate/up on tensor cores, 192 blocks of 64 weight rows over 2 blocks per SM (~18-20 us
//     for 50.3 MB); down, 256 blocks of 96 KB (~9-10 us for 25.2 MB); combine, one 256-thread
//     block per row, 8 dependent L2 reads a thread (~3-4 us); no kernel's tail overlaps the next
//     one's ramp.
//   this path, 3 launches: route_group ~5-6 us (8 vectors a lane in flight, 128 warps: the router
//     in one round trip; fence + ticket ~1 us; 8 top-k rounds ~0.7 us; grouping ~1 us);
//     gate_up_stream 768 blocks x 4 warps at 80 registers (6 blocks per SM: one wave on 132 SMs),
//     4 KB in flight a warp = 12.6 MB against the ~5 MB Little's law asks (4.26 TB/s x ~1.2 us):
//     50.3 MB at ~90% of the copy bandwidth ~13-14 us; down_combine 2048 blocks of 12 KB (2.6
//     waves), each warp's 3 KB in one round trip, asked of L2 before its wait: 25.2 MB ~6-7 us,
//     ~1 us of it under gate/up's tail; the tiles' combine ~1 us. Sum ~25-29 us = 61-71% of the
//     bound (75% needs ~23.7 us). 8 rows (~52 distinct experts, bound ~115 us): ~130-135 us
//     (85-88%, was 60%); 32 rows (~112 experts, bound ~248 us): ~275-290 us (85-90%, was 72%).
inline constexpr int64_t kMoeFusedMaxRows = 32;
inline constexpr int kMoeFusedMaxExperts = 512;
// Outputs per down_combine block (its output tile); the tile counters: ceil(hidden / this).
inline constexpr int kMoeDownCombineTile = 8;

// Whether the small-step path computes a block: rows 1..kMoeFusedMaxRows, num_experts <=
// kMoeFusedMaxExperts, 16-bit experts with aligned16, hidden and width % 8 == 0, x 16-byte aligned.
bool moe_fused_supported(int64_t rows, int num_experts, WeightType type, bool aligned16, int64_t hidden,
                         int64_t width, const float* x);

struct MoeFusedRouteParams {
  MoeRouteParams route;  // a router product needs logits_scratch; rows <= kMoeFusedMaxRows
  // out, as MoeGroupParams's: offsets [E + 1], order [rows * top_k], active [E + 1].
  int32_t* offsets = nullptr;
  int32_t* order = nullptr;
  int32_t* active = nullptr;
  // One int32 of device memory, 0 before the first launch; every launch leaves it 0 (a ticket
  // counter: the last block to finish the router product does the top-k and the grouping).
  int32_t* counter = nullptr;
};
void launch_moe_route_group(const MoeFusedRouteParams& p, cudaStream_t stream);

// act at grouped positions (launch_moe_gate_up's output), for moe_fused_supported blocks. Waits
// for its predecessor first (launch_moe_down_combine relies on it).
void launch_moe_gate_up_stream(const MoeGroupedParams& p, cudaStream_t stream);

struct MoeDownCombineParams {
  MoeGroupedParams down;    // launch_moe_down's: down.x = act, down.y = out [rows * top_k, H] (scratch)
  MoeCombineParams combine; // weights, shared_out / shared_gate, rows, top_k, hidden, y; expert_out unused
  // [ceil(H / kMoeDownCombineTile)] int32, 0 before the first launch; every launch leaves them 0.
  int32_t* tile_counters = nullptr;
};
// Contract: queued right after launch_moe_gate_up_stream, itself right after the
// launch_moe_route_group that wrote down's grouping (its blocks read active[] before they wait).
void launch_moe_down_combine(const MoeDownCombineParams& p, cudaStream_t stream);

}  // namespace spindle::kernels::cuda
