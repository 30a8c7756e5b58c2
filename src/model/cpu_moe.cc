// CpuOps::moe: a sparse layer's mixture of experts on the CPU (device_ops.h LayerMath::moe).
//
// Per chunk of at most kMoeChunkRows rows:
//   1. the router product (the router's LinearKernel, f32 accumulation) and the routing
//      (kernels/cpu/moe_routing.h: f32 softmax, top-k with ties to the lower index, norm_topk_prob);
//   2. the rows gathered per selected expert (group_by_expert: each expert's rows contiguous);
//   3. each selected expert's gate/up, SiLU-mul and down products once over its rows (the experts
//      no row chose are not read: at batch 1 only the top_k experts' weights are);
//   4. y[r] = sum_j w_rj * out[r, j] in slot order j = 0..k-1 (independent of the batch), plus
//      sigmoid(x . w_shared_gate) * shared_expert(x) with a shared expert.
// Parallelism: with at least as many selected experts as threads and every expert's row count in
// the direct kernels' range, experts run side by side on the pool (each product on one thread);
// otherwise experts run one after another, each product spread over the pool. Either way a row's
// values are the same (the direct kernels split output features, never a row's sum).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/paged_attention.h"
#include "model/cpu_ops.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle {

namespace kc = kernels::cpu;

namespace {

template <typename T>
void grow(std::vector<T>& buffer, int64_t size) {
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(static_cast<size_t>(size));
}

template <typename T>
uint64_t capacity_bytes(const std::vector<T>& buffer) {
  return buffer.capacity() * sizeof(T);
}

}  // namespace

void CpuMoeScratch::reserve(const ModelConfig& c, int64_t rows) {
  const int64_t r = std::min(rows, kMoeChunkRows);
  const int64_t k = c.moe.num_experts_per_tok, h = c.hidden_size, f = c.moe.moe_intermediate_size;
  const int64_t s = c.moe.shared_expert_intermediate_size;
  grow(logits, r * c.moe.num_experts);
  grow(experts, r * k);
  grow(weights, r * k);
  grow(gathered, r * k * h);
  grow(gate_up, r * k * 2 * f);
  grow(act, r * k * f);
  grow(out, r * k * h);
  if (s > 0) {
    grow(shared_gate_up, r * 2 * s);
    grow(shared_act, r * s);
    grow(shared_out, r * h);
    grow(shared_gate, r);
  }
}

uint64_t CpuMoeScratch::bytes() const {
  return capacity_bytes(logits) + capacity_bytes(experts) + capacity_bytes(weights) + capacity_bytes(gathered) +
         capacity_bytes(gate_up) + capacity_bytes(act) + capacity_bytes(out) + capacity_bytes(shared_gate_up) +
         capacity_bytes(shared_act) + capacity_bytes(shared_out) + capacity_bytes(shared_gate);
}

void CpuOps::moe(const float* x, int64_t rows, const MoeBlock& block, float* y) {
  check_moe_block(block, config_.moe);
  const int64_t h = config_.hidden_size;
  moe_scratch_.reserve(config_, rows);
  for (int64_t begin = 0; begin < rows; begin += kMoeChunkRows) {
    moe_chunk(x + begin * h, std::min(kMoeChunkRows, rows - begin), block, y + begin * h);
  }
}

void CpuOps::moe_chunk(const float* x, int64_t rows, const MoeBlock& block, float* y) {
  CpuMoeScratch& s = moe_scratch_;
  const int64_t h = config_.hidden_size, k = block.top_k;
  const Product router{block.router, s.logits.data(), kNoWeight};
  linear(x, rows, {&router, 1});
  const kc::RoutingParams params{block.num_experts, block.top_k, block.norm_topk_prob};
  kc::route_top_k(s.logits.data(), rows, params, s.experts.data(), s.weights.data());
  kc::group_by_expert(s.experts.data(), rows, params, s.groups);

  // Gather: entry i of the grouped order is choice order[i] = r * k + j, the row r.
  parallel_rows(rows * k, h, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t r = s.groups.order[static_cast<size_t>(i)] / k;
      std::memcpy(s.gathered.data() + i * h, x + r * h, static_cast<size_t>(h) * sizeof(float));
    }
  });
  run_experts(block, h);

  // Scatter: each row's k expert outputs, weighted, in slot order.
  parallel_rows(rows, h * k, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* yr = y + r * h;
      std::fill(yr, yr + h, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const float w = s.weights[static_cast<size_t>(r * k + j)];
        const float* o = s.out.data() + s.groups.position[static_cast<size_t>(r * k + j)] * h;
        for (int64_t i = 0; i < h; ++i) yr[i] += w * o[i];
      }
    }
  });
  if (block.shared_width > 0) add_shared_expert(x, rows, block, y);
}

// Every selected expert over its gathered rows: out = (silu(x W_gate^T) * (x W_up^T)) W_down^T.
void CpuOps::run_experts(const MoeBlock& block, int64_t h) {
  CpuMoeScratch& s = moe_scratch_;
  const kc::ExpertGroups& g = s.groups;
  const int64_t f = block.expert_width;
  int64_t max_rows = 0;
  for (const int32_t e : g.active) max_rows = std::max(max_rows, g.count(e));
  // In a step of decode-sized sequences every expert's kernel is the one for as many rows as the
  // step has sequences (capped at the decode-row class, kLinearDecodeMaxRows), as linear_choose_rows does for the
  // dense products: a verify row then computes as the decode step of that row does.
  const bool decode_sized = step_.num_sequences > 0 && step_.max_new_tokens <= kc::kDecodeSizedMaxNewTokens;
  const int64_t step_choice = std::min<int64_t>(step_.num_sequences, kc::kLinearDecodeMaxRows);
  auto run = [&](int32_t e, ThreadPool* pool) {
    const int64_t off = g.offsets[static_cast<size_t>(e)], m = g.count(e);
    const int64_t choose = decode_sized ? step_choice : m;
    const float* xe = s.gathered.data() + off * h;
    float* gu = s.gate_up.data() + off * 2 * f;
    float* act = s.act.data() + off * f;
    const LinearGroup& w = block.gate_up[static_cast<size_t>(e)];
    if (w.joined != kNoWeight) {  // [m, 2F]: gate and up side by side per row
      placed(w.joined).linear->forward_choosing_for(xe, m, choose, gu, pool);
      kc::silu_mul(gu, gu + f, 2 * f, act, m, f);
    } else {  // [gate rows; up rows]
      placed(w.parts[0]).linear->forward_choosing_for(xe, m, choose, gu, pool);
      placed(w.parts[1]).linear->forward_choosing_for(xe, m, choose, gu + m * f, pool);
      kc::silu_mul(gu, gu + m * f, f, act, m, f);
    }
    placed(block.down[static_cast<size_t>(e)])
        .linear->forward_choosing_for(act, m, choose, s.out.data() + off * h, pool);
  };
  const auto active = static_cast<int64_t>(g.active.size());
  if (active >= pool_->num_threads() && active > 1 && max_rows <= kc::kLinearDecodeMaxRows) {
    pool_->parallel_for(active, [&](int64_t i) { run(g.active[static_cast<size_t>(i)], nullptr); });
  } else {
    for (const int32_t e : g.active) run(e, pool_);
  }
}

// y += sigmoid(x . w_shared_gate) * shared_expert(x) (Qwen2-MoE).
void CpuOps::add_shared_expert(const float* x, int64_t rows, const MoeBlock& block, float* y) {
  CpuMoeScratch& s = moe_scratch_;
  const int64_t h = config_.hidden_size;
  swiglu(x, rows, block.shared_gate_up, s.shared_gate_up.data(), s.shared_act.data(), block.shared_width);
  const Product down{block.shared_down, s.shared_out.data(), kNoWeight};
  linear(s.shared_act.data(), rows, {&down, 1});
  const Product gate{block.shared_gate, s.shared_gate.data(), kNoWeight};
  linear(x, rows, {&gate, 1});
  parallel_rows(rows, h, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float g = 1.0f / (1.0f + std::exp(-s.shared_gate[static_cast<size_t>(r)]));
      const float* o = s.shared_out.data() + r * h;
      float* yr = y + r * h;
      for (int64_t i = 0; i < h; ++i) yr[i] += g * o[i];
    }
  });
}

}  // namespace spindle
