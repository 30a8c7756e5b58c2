// Internal to the MoE kernels: the launches of moe_kernels.cu, queued as given (moe_kernels.cc
// checks the params on the host first; the .cu files do not include util/error.h). C++17.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/moe_kernels.h"

namespace spindle::kernels::cuda::detail {

// vec: the 16-byte vector loads (hidden % 8 == 0, x and router 16-byte aligned).
void queue_moe_route(const MoeRouteParams& p, bool vec, cudaStream_t stream);
// The router product alone into p.logits_scratch: grid (experts / 8, rows), one warp per logit.
void queue_moe_router_logits(const MoeRouteParams& p, bool vec, cudaStream_t stream);
void queue_moe_group(const MoeGroupParams& p, cudaStream_t stream);
// gate_up: launch_moe_gate_up's kernel, else launch_moe_down's; vec as above for in_features and
// every weight and x row.
void queue_moe_grouped(const MoeGroupedParams& p, bool gate_up, bool vec, cudaStream_t stream);
// The same products on 16-bit tensor cores (moe_mma.cu): bf16 / f16 experts with the vector
// loads' alignment (in % 8 == 0, every weight row and x 16-byte aligned).
void queue_moe_grouped_mma(const MoeGroupedParams& p, bool gate_up, cudaStream_t stream);
void queue_moe_combine(const MoeCombineParams& p, cudaStream_t stream);
// The small-step path (moe_fused.cu); vec as queue_moe_route's.
size_t moe_route_group_shared_bytes(int num_experts, int64_t num_choices);
void queue_moe_route_group(const MoeFusedRouteParams& p, bool vec, cudaStream_t stream);
void queue_moe_gate_up_stream(const MoeGroupedParams& p, cudaStream_t stream);
void queue_moe_down_combine(const MoeDownCombineParams& p, cudaStream_t stream);

}  // namespace spindle::kernels::cuda::detail
