// The defaults of DeviceOps' roles (device_ops.h): the fused entries made of the plain ops, the
// one-by-one and joined weight placements, and the step without graphs or device sampling.
#include "model/device_ops.h"

#include "model/model_config.h"
#include "util/error.h"

namespace spindle {

void check_moe_block(const MoeBlock& block, const MoeConfig& moe) {
  SPINDLE_CHECK(block.num_experts == moe.num_experts && block.top_k == moe.num_experts_per_tok &&
                    static_cast<int>(block.gate_up.size()) == block.num_experts &&
                    static_cast<int>(block.down.size()) == block.num_experts,
                "moe: a block of {} experts (top {}) for a model of {} (top {})", block.num_experts, block.top_k,
                moe.num_experts, moe.num_experts_per_tok);
}

LinearGroup WeightStore::place_each(std::span<const WeightView> weights, std::span<const WeightView> biases) {
  SPINDLE_CHECK(!weights.empty() && weights.size() <= LinearGroup{}.parts.size() &&
                    (biases.empty() || biases.size() == weights.size()),
                "place_group: {} weights and {} biases", weights.size(), biases.size());
  LinearGroup g;
  for (size_t i = 0; i < weights.size(); ++i) g.parts[i] = place(weights.subspan(i, 1), WeightUse::kLinear);
  for (size_t i = 0; i < biases.size(); ++i) g.biases[i] = place(biases.subspan(i, 1), WeightUse::kBias);
  return g;
}

LinearGroup WeightStore::place_joined(std::span<const WeightView> weights, std::span<const WeightView> biases) {
  SPINDLE_CHECK(!weights.empty() && (biases.empty() || biases.size() == weights.size()),
                "place_group: {} weights and {} biases", weights.size(), biases.size());
  LinearGroup g;
  g.joined = place(weights, WeightUse::kLinear);
  if (g.joined != kNoWeight && !biases.empty()) g.joined_bias = place(biases, WeightUse::kBias);
  return g;
}

void StepContext::queue_sample(const SamplingBatch& /*batch*/) {
  SPINDLE_FAIL("sampling on the device is not available on {}", attn::device_name(device()));
}
void StepContext::collect_sample(std::vector<SampledRow>& /*out*/) {
  SPINDLE_FAIL("sampling on the device is not available on {}", attn::device_name(device()));
}
void StepContext::take_pending_tokens(std::span<const PendingToken> /*tokens*/) {
  SPINDLE_FAIL("tokens pending on the device are not available on {}", attn::device_name(device()));
}

void StepContext::run_forward(int64_t graph_key, const std::function<void()>& work, std::string& /*capture_failure*/) {
  SPINDLE_CHECK(graph_key < 0, "forward: {} has no step graphs", attn::device_name(device()));
  work();
}

void LayerMath::linear_add_rms_norm(const float* x, int64_t rows, const Product& p, float* hidden, float* out,
                                    int64_t cols, WeightId w) {
  linear(x, rows, {&p, 1});
  add_rms_norm(hidden, p.y, out, rows, cols, w);
}

bool LayerMath::attention_input(const AttentionInput& in, attn::AttentionBackend& /*attention*/, int /*layer*/) {
  const LinearGroup& g = *in.qkv;
  SPINDLE_CHECK(g.joined == kNoWeight, "attention_input: this device cannot run a joined q/k/v product");
  const Product qkv[] = {
      {g.parts[0], in.q, g.biases[0]}, {g.parts[1], in.k, g.biases[1]}, {g.parts[2], in.v, g.biases[2]}};
  linear(in.x, in.rows, qkv);
  qk_norm_rope(in.q, in.k, in.rows, in.num_heads, in.num_kv_heads, in.q_norm, in.k_norm, in.positions);
  return false;
}

void LayerMath::attend(attn::AttentionBackend& attention, int layer, attn::ConstTensor q, attn::ConstTensor k,
                       attn::ConstTensor v, attn::Tensor out, bool kv_written) {
  attention.forward(layer, q, k, v, out, kv_written);
}

void LayerMath::swiglu(const float* x, int64_t rows, const LinearGroup& gate_up, float* gate_up_scratch, float* act,
                       int64_t im) {
  if (gate_up.joined != kNoWeight) {  // [rows, 2 im]: gate and up side by side per row
    const Product fused{gate_up.joined, gate_up_scratch, kNoWeight};
    linear(x, rows, {&fused, 1});
    silu_mul(gate_up_scratch, gate_up_scratch + im, 2 * im, act, rows, im);
    return;
  }
  float* up = gate_up_scratch + rows * im;  // [gate rows; up rows]
  const Product parts[] = {{gate_up.parts[0], gate_up_scratch, kNoWeight}, {gate_up.parts[1], up, kNoWeight}};
  linear(x, rows, parts);
  silu_mul(gate_up_scratch, up, im, act, rows, im);
}

void LayerMath::moe(const float* /*x*/, int64_t /*rows*/, const MoeBlock& /*block*/, float* /*y*/) {
  SPINDLE_FAIL("mixture-of-experts layers are not available on this device");
}

}  // namespace spindle
