// moe_kernels.h's launch functions: the host-side checks, then the launches of moe_kernels.cu.
#include "kernels/cuda/moe_kernels.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/moe_kernels_launch.h"
#include "util/error.h"

namespace spindle::kernels::cuda {
namespace {

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

void check_grouped(const MoeGroupedParams& p, const char* what, bool needs_second) {
  SPINDLE_CHECK(p.num_experts >= 1 && p.num_experts <= kMoeMaxExperts && p.top_k >= 1 && p.in_features >= 1 &&
                    p.out_features >= 1 && p.num_choices >= 0 && p.num_choices <= INT32_MAX,
                "moe {}: {} experts, top {}, {} choices, [{} -> {}]", what, p.num_experts, p.top_k, p.num_choices,
                p.in_features, p.out_features);
  SPINDLE_CHECK(p.first != nullptr && (!needs_second || p.second != nullptr) && p.x != nullptr && p.y != nullptr &&
                    p.offsets != nullptr && p.order != nullptr && p.active != nullptr,
                "moe {}: a null pointer among the weights, rows or grouping", what);
}

// The tensor-core kernel where moe_grouped_uses_tensor_cores, else the f32 FMA one (its vector
// loads under the same alignment).
void queue_grouped(const MoeGroupedParams& p, bool gate_up, cudaStream_t stream) {
  if (moe_grouped_uses_tensor_cores(p)) {
    detail::queue_moe_grouped_mma(p, gate_up, stream);
  } else {
    detail::queue_moe_grouped(p, gate_up, p.aligned16 && p.in_features % 8 == 0 && aligned(p.x, 16), stream);
  }
}

}  // namespace

void launch_moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  SPINDLE_CHECK(p.num_experts >= 1 && p.num_experts <= kMoeMaxExperts && p.top_k >= 1 &&
                    p.top_k <= std::min(p.num_experts, kMoeMaxTopK) && p.rows >= 0 && p.rows <= INT32_MAX,
                "moe routing: top {} of {} experts over {} rows (CUDA: at most {} experts, top {})", p.top_k,
                p.num_experts, p.rows, kMoeMaxExperts, kMoeMaxTopK);
  SPINDLE_CHECK(p.experts != nullptr && p.weights != nullptr &&
                    (p.logits != nullptr || (p.x != nullptr && p.router != nullptr && p.hidden >= 1)),
                "moe routing: no logits and no router product to compute them");
  if (p.rows == 0) return;
  const size_t element = p.router_type == WeightType::kF32 ? 4 : 2;
  const bool vec = p.logits == nullptr && p.hidden % 8 == 0 && aligned(p.x, 16) && aligned(p.router, 16) &&
                   (p.hidden * static_cast<int64_t>(element)) % 16 == 0;
  if (p.logits == nullptr && p.logits_scratch != nullptr && p.rows <= kMoeRouteSpreadMaxRows) {
    detail::queue_moe_router_logits(p, vec, stream);
    MoeRouteParams from_logits = p;
    from_logits.logits = p.logits_scratch;
    from_logits.x = nullptr;
    from_logits.router = nullptr;
    detail::queue_moe_route(from_logits, false, stream);
    return;
  }
  detail::queue_moe_route(p, vec, stream);
}

void launch_moe_group(const MoeGroupParams& p, cudaStream_t stream) {
  SPINDLE_CHECK(p.num_experts >= 1 && p.num_experts <= kMoeMaxExperts && p.num_choices >= 0 &&
                    p.num_choices <= INT32_MAX,
                "moe grouping: {} choices over {} experts (CUDA: at most {})", p.num_choices, p.num_experts,
                kMoeMaxExperts);
  SPINDLE_CHECK(p.experts != nullptr && p.offsets != nullptr && p.order != nullptr && p.active != nullptr,
                "moe grouping: a null pointer");
  detail::queue_moe_group(p, stream);
}

bool moe_grouped_uses_tensor_cores(const MoeGroupedParams& p) {
  return p.type != WeightType::kF32 && p.aligned16 && p.in_features % 8 == 0 && aligned(p.x, 16);
}

void launch_moe_gate_up(const MoeGroupedParams& p, cudaStream_t stream) {
  check_grouped(p, "gate/up", true);
  if (p.num_choices == 0) return;
  queue_grouped(p, true, stream);
}

void launch_moe_down(const MoeGroupedParams& p, cudaStream_t stream) {
  check_grouped(p, "down", false);
  if (p.num_choices == 0) return;
  queue_grouped(p, false, stream);
}

void launch_moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  SPINDLE_CHECK(p.rows >= 0 && p.rows <= INT32_MAX && p.top_k >= 1 && p.hidden >= 1 && p.expert_out != nullptr &&
                    p.weights != nullptr && p.y != nullptr && (p.shared_out == nullptr || p.shared_gate != nullptr),
                "moe combine: {} rows, top {}, hidden {}", p.rows, p.top_k, p.hidden);
  if (p.rows == 0) return;
  detail::queue_moe_combine(p, stream);
}

bool moe_fused_supported(int64_t rows, int num_experts, WeightType type, bool aligned16, int64_t hidden,
                         int64_t width, const float* x) {
  return rows >= 1 && rows <= kMoeFusedMaxRows && num_experts >= 1 && num_experts <= kMoeFusedMaxExperts &&
         type != WeightType::kF32 && aligned16 && hidden % 8 == 0 && width % 8 == 0 && aligned(x, 16);
}

void launch_moe_route_group(const MoeFusedRouteParams& p, cudaStream_t stream) {
  const MoeRouteParams& r = p.route;
  SPINDLE_CHECK(r.num_experts >= 1 && r.num_experts <= kMoeFusedMaxExperts && r.top_k >= 1 &&
                    r.top_k <= std::min(r.num_experts, kMoeMaxTopK) && r.rows >= 1 && r.rows <= kMoeFusedMaxRows,
                "moe route+group: top {} of {} experts over {} rows (the small-step path: at most {} experts, {} "
                "rows, top {})",
                r.top_k, r.num_experts, r.rows, kMoeFusedMaxExperts, kMoeFusedMaxRows, kMoeMaxTopK);
  SPINDLE_CHECK(r.experts != nullptr && r.weights != nullptr && p.offsets != nullptr && p.order != nullptr &&
                    p.active != nullptr && p.counter != nullptr &&
                    (r.logits != nullptr ||
                     (r.x != nullptr && r.router != nullptr && r.hidden >= 1 && r.logits_scratch != nullptr)),
                "moe route+group: a null pointer (a router product needs logits_scratch)");
  const size_t element = r.router_type == WeightType::kF32 ? 4 : 2;
  const bool vec = r.logits == nullptr && r.hidden % 8 == 0 && aligned(r.x, 16) && aligned(r.router, 16) &&
                   (r.hidden * static_cast<int64_t>(element)) % 16 == 0;
  detail::queue_moe_route_group(p, vec, stream);
}

void launch_moe_gate_up_stream(const MoeGroupedParams& p, cudaStream_t stream) {
  check_grouped(p, "gate/up stream", true);
  SPINDLE_CHECK(p.type != WeightType::kF32 && p.aligned16 && p.in_features % 8 == 0 && aligned(p.x, 16),
                "moe gate/up stream: 16-bit experts with 16-byte aligned rows only ({} columns)", p.in_features);
  if (p.num_choices == 0) return;
  detail::queue_moe_gate_up_stream(p, stream);
}

void launch_moe_down_combine(const MoeDownCombineParams& p, cudaStream_t stream) {
  check_grouped(p.down, "down+combine", false);
  const MoeCombineParams& c = p.combine;
  SPINDLE_CHECK(p.down.type != WeightType::kF32 && p.down.aligned16 && p.down.in_features % 8 == 0 &&
                    aligned(p.down.x, 16),
                "moe down+combine: 16-bit experts with 16-byte aligned rows only ({} columns)", p.down.in_features);
  SPINDLE_CHECK(c.weights != nullptr && c.y != nullptr && p.tile_counters != nullptr &&
                    (c.shared_out == nullptr || c.shared_gate != nullptr) && c.top_k == p.down.top_k &&
                    c.hidden == p.down.out_features && c.rows * c.top_k == p.down.num_choices,
                "moe down+combine: {} rows x top {} vs {} choices, hidden {} vs {} outputs, or a null pointer",
                c.rows, c.top_k, p.down.num_choices, c.hidden, p.down.out_features);
  if (p.down.num_choices == 0) return;
  detail::queue_moe_down_combine(p, stream);
}

}  // namespace spindle::kernels::cuda
