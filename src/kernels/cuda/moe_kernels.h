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

}  // namespace spindle::kernels::cuda
