// CudaOps::moe: a sparse layer's mixture of experts on a CUDA device (device_ops.h LayerMath::moe;
// the plan in model/cuda_moe.h, the kernels in kernels/cuda/moe_kernels.h).
#include "model/cuda_moe.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cuda/moe_kernels.h"
#include "model/cuda_ops.h"
#include "model/moe_layer.h"
#include "model/weight_map.h"
#include "util/error.h"

namespace spindle {

namespace kcu = kernels::cuda;

namespace {

bool cuda_computes(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32; }

kcu::WeightType expert_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return kcu::WeightType::kF32;
    case DType::kF16: return kcu::WeightType::kF16;
    default: return kcu::WeightType::kBF16;
  }
}

void grow(kcu::DeviceBuffer& buffer, int64_t count, size_t element) {
  buffer.reserve(std::max<size_t>(static_cast<size_t>(count) * element, 1));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void CudaMoeScratch::reserve(const ModelConfig& c, int64_t step_rows) {
  const int64_t r = std::min(step_rows, kCudaMoeChunkRows);
  const int64_t k = c.moe.num_experts_per_tok, e = c.moe.num_experts, h = c.hidden_size;
  const int64_t f = c.moe.moe_intermediate_size, s = c.moe.shared_expert_intermediate_size;
  grow(logits, std::min(r, kcu::kMoeRouteSpreadMaxRows) * e, sizeof(float));
  grow(experts, r * k, sizeof(int32_t));
  grow(weights, r * k, sizeof(float));
  grow(offsets, e + 1, sizeof(int32_t));
  grow(order, r * k, sizeof(int32_t));
  grow(active, e + 1, sizeof(int32_t));
  grow(act, r * k * f, sizeof(float));
  grow(out, r * k * h, sizeof(float));
  if (s > 0) {
    grow(shared_gate_up, r * 2 * s, sizeof(float));
    grow(shared_act, r * s, sizeof(float));
    grow(shared_out, r * h, sizeof(float));
    grow(shared_gate, r, sizeof(float));
  }
  const size_t counter_bytes = (1 + (h + kcu::kMoeDownCombineTile - 1) / kcu::kMoeDownCombineTile) * sizeof(int32_t);
  if (counters.size() < counter_bytes) {
    counters.reserve(counter_bytes);
    kcu::fill_zero(counters.data(), counters.size());  // the kernels keep them zero from here on
  }
  rows = std::max(rows, r);
}

uint64_t CudaMoeScratch::bytes() const {
  return logits.size() + experts.size() + weights.size() + offsets.size() + order.size() + active.size() +
         act.size() + out.size() + shared_gate_up.size() + shared_act.size() + shared_out.size() + shared_gate.size() +
         counters.size();
}

void check_cuda_moe_weights(const ModelConfig& c, WeightSource& weights) {
  if (!c.moe.enabled()) return;
  const ExpertLayout layout = moe_expert_layout(c, weights);
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    if (!c.is_moe_layer(layer)) continue;
    const MoeLayerNames n = moe_layer_names(c, layout, layer);
    std::vector<std::string> names = {n.router};
    if (layout == ExpertLayout::kFused3d) {
      names.insert(names.end(), {n.gate_up, n.down});
    } else {
      names.insert(names.end(), {n.expert_gate(0), n.expert_up(0), n.expert_down(0)});
    }
    for (const std::string& name : names) {
      const WeightView w = weights.weight(name);
      SPINDLE_CHECK(!w.quantized() && cuda_computes(w.dtype),
                    "{} is {}: the CUDA mixture-of-experts path computes BF16, F16 and F32 experts only (quantized "
                    "experts run on the CPU: --device cpu)",
                    w.where(), w.type_name());
    }
    return;  // one layer's types stand for all: a checkpoint stores its experts in one type
  }
}

void CudaOps::reserve_moe(int64_t rows) {
  if (!config_.moe.enabled()) return;
  if (!moe_) moe_ = std::make_unique<CudaMoeState>();
  moe_->scratch.reserve(config_, rows);
  const int64_t s = config_.moe.shared_expert_intermediate_size, h = config_.hidden_size;
  if (s > 0 && has_16bit_weights_) linear_->reserve(std::min(rows, kCudaMoeChunkRows), std::max(h, s), std::max(2 * s, h));
}

uint64_t CudaOps::moe_workspace_bytes() const {
  if (!moe_) return 0;
  uint64_t n = moe_->scratch.bytes();
  for (const auto& [router, experts] : moe_->experts) n += experts.pointers.size();
  return n;
}

// The device table of block's experts, made on the layer's first step (an eager one: a graph is
// captured only after the same work ran once, CudaOps::run_forward).
const CudaMoeExperts& CudaOps::moe_experts(const MoeBlock& block) {
  const auto found = moe_->experts.find(block.router);
  if (found != moe_->experts.end()) return found->second;
  const int64_t e_count = block.num_experts, f = block.expert_width, h = config_.hidden_size;
  std::vector<const void*> table(static_cast<size_t>(3 * e_count));
  const DType dtype = placed(block.down.front()).weight.dtype;
  SPINDLE_CHECK(cuda_computes(dtype), "moe: the experts are {}; CUDA computes BF16, F16 and F32 experts only",
                dtype_name(dtype));
  auto expert = [&](WeightId id, int64_t rows, int64_t cols, int e, const char* what) -> const std::byte* {
    const kcu::DeviceWeight& w = placed(id).weight;
    SPINDLE_CHECK(w.dtype == dtype && w.out_features == rows && w.in_features == cols,
                  "moe: expert {}'s {} is {} [{}, {}]; expected {} [{}, {}] like the others", e, what,
                  dtype_name(w.dtype), w.out_features, w.in_features, dtype_name(dtype), rows, cols);
    return static_cast<const std::byte*>(w.data);
  };
  for (int e = 0; e < e_count; ++e) {
    const LinearGroup& g = block.gate_up[static_cast<size_t>(e)];
    const std::byte* gate = nullptr;
    const std::byte* up = nullptr;
    if (g.joined != kNoWeight) {
      gate = expert(g.joined, 2 * f, h, e, "gate/up");
      up = gate + static_cast<size_t>(f * h) * dtype_size(dtype);
    } else {
      gate = expert(g.parts[0], f, h, e, "gate");
      up = expert(g.parts[1], f, h, e, "up");
    }
    table[static_cast<size_t>(e)] = gate;
    table[static_cast<size_t>(e_count + e)] = up;
    table[static_cast<size_t>(2 * e_count + e)] = expert(block.down[static_cast<size_t>(e)], h, f, e, "down");
  }
  CudaMoeExperts& out = moe_->experts[block.router];
  out.type = expert_type(dtype);
  out.aligned16 = std::all_of(table.begin(), table.end(), [](const void* p) { return aligned16(p); });
  out.pointers.reserve(table.size() * sizeof(const void*));
  kcu::copy_to_device(out.pointers.data(), table.data(), table.size() * sizeof(const void*));
  return out;
}

void CudaOps::moe(const float* x, int64_t rows, const MoeBlock& block, float* y) {
  check_moe_block(block, config_.moe);
  SPINDLE_CHECK(moe_ && moe_->scratch.rows >= std::min(rows, kCudaMoeChunkRows),
                "moe: a step of {} rows, the scratch holds {} (reserve() first)", rows, moe_ ? moe_->scratch.rows : 0);
  const CudaMoeExperts& experts = moe_experts(block);
  const int64_t h = config_.hidden_size;
  for (int64_t begin = 0; begin < rows; begin += kCudaMoeChunkRows) {
    moe_chunk(x + begin * h, std::min(kCudaMoeChunkRows, rows - begin), block, experts, y + begin * h);
  }
  ready16_ = {};
}

void CudaOps::moe_chunk(const float* x, int64_t rows, const MoeBlock& block, const CudaMoeExperts& experts,
                        float* y) {
  CudaMoeScratch& s = moe_->scratch;
  if (kcu::moe_fused_supported(rows, block.num_experts, experts.type, experts.aligned16, config_.hidden_size,
                               block.expert_width, x)) {
    moe_chunk_fused(x, rows, block, experts, y);
    return;
  }
  moe_route(x, rows, block);
  moe_expert_products(x, rows, block, experts);
  kcu::MoeCombineParams combine;
  combine.expert_out = s.out.as<float>();
  combine.weights = s.weights.as<float>();
  combine.rows = rows;
  combine.top_k = block.top_k;
  combine.hidden = config_.hidden_size;
  combine.y = y;
  if (block.shared_width > 0) {
    moe_shared_expert(x, rows, block);
    combine.shared_out = s.shared_out.as<float>();
    combine.shared_gate = s.shared_gate.as<float>();
  }
  kcu::launch_moe_combine(combine, stream_);
}

// The small-step path (kernels/cuda/moe_kernels.h): the shared expert first (its outputs are the
// combine's inputs), then route_group, gate_up_stream and down_combine back to back (the last one
// reads the grouping before it waits, which that order makes safe).
void CudaOps::moe_chunk_fused(const float* x, int64_t rows, const MoeBlock& block, const CudaMoeExperts& experts,
                              float* y) {
  CudaMoeScratch& s = moe_->scratch;
  if (block.shared_width > 0) moe_shared_expert(x, rows, block);
  kcu::MoeFusedRouteParams route;
  route.route = moe_route_params(x, rows, block);
  route.offsets = s.offsets.as<int32_t>();
  route.order = s.order.as<int32_t>();
  route.active = s.active.as<int32_t>();
  route.counter = s.counters.as<int32_t>();
  kcu::launch_moe_route_group(route, stream_);
  kcu::MoeGroupedParams g = moe_grouped_params(x, rows, block, experts, true);
  kcu::launch_moe_gate_up_stream(g, stream_);
  kcu::MoeDownCombineParams down;
  down.down = moe_grouped_params(x, rows, block, experts, false);
  down.combine.weights = s.weights.as<float>();
  down.combine.rows = rows;
  down.combine.top_k = block.top_k;
  down.combine.hidden = config_.hidden_size;
  down.combine.y = y;
  if (block.shared_width > 0) {
    down.combine.shared_out = s.shared_out.as<float>();
    down.combine.shared_gate = s.shared_gate.as<float>();
  }
  down.tile_counters = s.counters.as<int32_t>() + 1;
  kcu::launch_moe_down_combine(down, stream_);
}

// The routing launch's params: the router product of x, top-k into the scratch's experts / weights.
kcu::MoeRouteParams CudaOps::moe_route_params(const float* x, int64_t rows, const MoeBlock& block) {
  CudaMoeScratch& s = moe_->scratch;
  const int64_t h = config_.hidden_size;
  const kcu::DeviceWeight& router = placed(block.router).weight;
  SPINDLE_CHECK(cuda_computes(router.dtype) && router.out_features == block.num_experts && router.in_features == h,
                "moe: the router is {} [{}, {}]; expected BF16, F16 or F32 [{}, {}]", dtype_name(router.dtype),
                router.out_features, router.in_features, block.num_experts, h);
  kcu::MoeRouteParams route;
  route.x = x;
  route.router = router.data;
  route.router_type = expert_type(router.dtype);
  route.hidden = h;
  route.rows = rows;
  route.num_experts = block.num_experts;
  route.top_k = block.top_k;
  route.norm_topk_prob = block.norm_topk_prob;
  route.experts = s.experts.as<int32_t>();
  route.weights = s.weights.as<float>();
  route.logits_scratch = s.logits.as<float>();
  return route;
}

// The router product and top-k into the scratch's experts / weights, then their grouping by expert.
void CudaOps::moe_route(const float* x, int64_t rows, const MoeBlock& block) {
  CudaMoeScratch& s = moe_->scratch;
  kcu::launch_moe_route(moe_route_params(x, rows, block), stream_);
  kcu::launch_moe_group({s.experts.as<int32_t>(), rows * block.top_k, block.num_experts, s.offsets.as<int32_t>(),
                         s.order.as<int32_t>(), s.active.as<int32_t>()},
                        stream_);
}

// The grouped gate/up (gate_up: x -> act) or down (act -> out, by choice) product's params.
kcu::MoeGroupedParams CudaOps::moe_grouped_params(const float* x, int64_t rows, const MoeBlock& block,
                                                  const CudaMoeExperts& experts, bool gate_up) {
  CudaMoeScratch& s = moe_->scratch;
  const int64_t e_count = block.num_experts;
  kcu::MoeGroupedParams g;
  g.offsets = s.offsets.as<int32_t>();
  g.order = s.order.as<int32_t>();
  g.active = s.active.as<int32_t>();
  g.num_experts = block.num_experts;
  g.top_k = block.top_k;
  g.num_choices = rows * block.top_k;
  g.max_rows_per_expert = rows;
  g.type = experts.type;
  g.aligned16 = experts.aligned16;
  const auto* table = experts.pointers.as<const void*>();
  if (gate_up) {
    g.first = table;
    g.second = table + e_count;
    g.in_features = config_.hidden_size;
    g.out_features = block.expert_width;
    g.x = x;
    g.y = s.act.as<float>();
  } else {
    g.first = table + 2 * e_count;
    g.second = nullptr;
    g.in_features = block.expert_width;
    g.out_features = config_.hidden_size;
    g.x = s.act.as<float>();
    g.y = s.out.as<float>();
  }
  return g;
}

// The grouped gate/up + SiLU-mul into act, then the grouped down into out (by choice).
void CudaOps::moe_expert_products(const float* x, int64_t rows, const MoeBlock& block,
                                  const CudaMoeExperts& experts) {
  kcu::launch_moe_gate_up(moe_grouped_params(x, rows, block, experts, true), stream_);
  kcu::launch_moe_down(moe_grouped_params(x, rows, block, experts, false), stream_);
}

// Qwen2-MoE's shared expert through the dense products: shared_out = swiglu(x) W_down^T and
// shared_gate = x . w_gate (its sigmoid is taken by the combine).
void CudaOps::moe_shared_expert(const float* x, int64_t rows, const MoeBlock& block) {
  CudaMoeScratch& s = moe_->scratch;
  const Product gate{block.shared_gate, s.shared_gate.as<float>(), kNoWeight};
  linear(x, rows, {&gate, 1});
  swiglu(x, rows, block.shared_gate_up, s.shared_gate_up.as<float>(), s.shared_act.as<float>(), block.shared_width);
  const Product down{block.shared_down, s.shared_out.as<float>(), kNoWeight};
  linear(s.shared_act.as<float>(), rows, {&down, 1});
}

}  // namespace spindle
