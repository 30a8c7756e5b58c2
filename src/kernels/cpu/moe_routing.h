// Mixture-of-experts routing on the CPU: the router's top-k choice per row and the grouping of a
// step's (row, slot) pairs by expert.
//
// Routing as Hugging Face's Qwen2-MoE / Qwen3-MoE / Mixtral blocks compute it (router logits are
// the product x W_router^T, f32):
//   p = softmax(logits) over all E experts, in f32 (max subtracted; the sum in index order)
//   the k experts of the largest logits, largest first; an exact tie goes to the lower expert
//   index (softmax is monotonic, so these are the k largest p)
//   w_j = p_(e_j), divided by sum_j w_j when norm_topk_prob (Mixtral always: its softmax over
//   the top-k logits is this renormalized top-k)
// A NaN logit is never chosen over a number; a row of NaNs chooses experts 0..k-1.
#pragma once

#include <cstdint>
#include <vector>

namespace spindle::kernels::cpu {

struct RoutingParams {
  int num_experts = 0;  // E >= 1
  int top_k = 0;        // 1 <= k <= E
  bool norm_topk_prob = false;
};

// logits [rows, E] -> experts [rows, k] (int32) and weights [rows, k] (f32), per row in the order
// chosen (largest logit first). Throws spindle::Error for bad params.
void route_top_k(const float* logits, int64_t rows, const RoutingParams& params, int32_t* experts, float* weights);

// A step's routing grouped by expert (a stable counting sort of the rows * k choices):
//   order[offsets[e] .. offsets[e + 1]) = the flat indices r * k + j with experts[r * k + j] == e,
//   ascending (so each expert's rows in row order); position[r * k + j] = where that choice sits
//   in `order`. active = the experts with at least one row, ascending.
struct ExpertGroups {
  std::vector<int64_t> offsets;   // [E + 1]
  std::vector<int64_t> order;     // [rows * k]
  std::vector<int64_t> position;  // [rows * k]
  std::vector<int32_t> active;

  int64_t count(int32_t expert) const { return offsets[expert + 1] - offsets[expert]; }
};
// Fills `groups` (its vectors reused). Throws for an expert id outside [0, E).
void group_by_expert(const int32_t* experts, int64_t rows, const RoutingParams& params, ExpertGroups& groups);

}  // namespace spindle::kernels::cpu
