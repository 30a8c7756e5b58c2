// A float64 forward of the decoder-only transformer (Llama / Mistral / Qwen2 / Qwen3), written for
// tests from the model definition (Hugging Face's modeling_llama / modeling_qwen3), over weights
// given as float64 in the Hugging Face layout (golden_gguf.h's Float64Weights):
//   x = embed[ids]
//   per layer: h = RMSNorm(x) * w_in;  q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)
//              Qwen3: q, k = RMSNorm per head over head_dim (q_norm, k_norm)
//              q, k = RoPE half-split: pairs (i, i + D/2), angle p * theta^(-2i/D)
//              a = softmax(q k^T / sqrt(D), causal) v, query head h reading kv head h / (H / KV)
//              x = x + a Wo^T;  h = RMSNorm(x) * w_post;  x = x + (silu(h Wg^T) * (h Wu^T)) Wd^T
//   logits = RMSNorm(x) * w_norm . W_head^T  (W_head = embed when lm_head.weight is absent)
// A layer holding a router (P.gate.weight, P = mlp or Mixtral's block_sparse_moe) is a mixture of
// experts instead of the MLP (Hugging Face's Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock /
// Qwen2MoeSparseMoeBlock): p = softmax(h W_router^T); the top_k experts by p (ties to the lower
// index), weights p_e (divided by their sum when norm_topk); y = sum_e p_e * MLP_e(h) with expert e's
// P.experts.e.{gate,up,down}_proj (Mixtral: w1, w3, w2); Qwen2-MoE's shared expert adds
// sigmoid(h . w_shared_gate) * MLP_shared(h). The router and the shared gate read unrounded inputs.
// RMSNorm(v) = v / sqrt(mean(v^2) + eps); with w["rope_freqs"] (Llama-3 scaling) frequency i's
// angle is divided by rope_freqs[i]. reference_last_logits: the logits of the last position;
// reference_last_hidden: its final normed hidden state.
// Below it, the shape of a loaded model and the comparison the quantized-weight tests make.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/golden_fixtures.h"
#include "model/model_config.h"
#include "support/fp8_reference.h"

namespace spindle::testing {

// How a rounded product's input is rounded (ReferenceShape::quantize_activations):
//   kInt8Block32   the CPU int8 kernels (kernels/cpu/quant_linear.h): per block of 32,
//                  dx = max|x_b| / 127, x -> dx * nearest-even(x / dx)
//   kE4m3PerToken  the FP8 tensor-core products (kernels/cuda/fp8_activation.h, per token): per
//                  product input, s = f32(max|x|) / 448 in f32 (1 when 0), x -> s * e4m3(x / s), e4m3
//                  the nearest-even E4M3 value (fp8_reference.h's definition), saturated at +-448
enum class ActivationRounding { kInt8Block32, kE4m3PerToken };

struct ReferenceShape {
  int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  double eps = 1e-6, theta = 10000.0;
  bool qk_norm = false;
  // Every product's input rounded as the int8 kernels round it (kernels/cpu/quant_linear.h): per
  // block of 32, dx = max|x_b| / 127, x -> dx * nearest-even(x / dx).
  bool quantize_activations = false;
  bool quantize_only_experts = false;  // with quantize_activations: the routed experts' inputs only
  // With quantize_activations: how (above); whether the LM head's input is rounded too (the FP8
  // checkpoints' LM head is not FP8); only positions [0, rounded_positions) (all when negative: a
  // prefill on the W8A8 path, decode rows on W8A16); and, where output_bf16(out, in) says so for a
  // rounded product of that [out, in] weight, its output (before the bias) rounded to f32 then bf16,
  // as a cuBLASLt product without an f32-output algorithm writes it.
  ActivationRounding rounding = ActivationRounding::kInt8Block32;
  bool round_lm_head = true;
  int64_t rounded_positions = -1;
  std::function<bool(int64_t out, int64_t in)> output_bf16;
  // Sensitivity probes of the rounded forward (gguf_moe_test.cc): round as the kernels compute it,
  // q = nearest-even(f32(x) * f32(1 / dx)) in f32 (instead of x / dx in float64), and / or multiply
  // every input element i by (1 + jitter * (i odd ? 1 : -1)) before rounding it.
  bool round_in_f32 = false;
  double activation_jitter = 0;
  int64_t top_k = 0;        // mixtures of experts: experts per token
  bool norm_topk = false;   // renormalize the top-k weights
};

namespace reference_forward_detail {

using Vec = std::vector<double>;

inline Vec rms_norm(const Vec& x, const Vec& w, double eps, size_t offset = 0, size_t n = 0) {
  if (n == 0) n = x.size();
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[offset + i] * x[offset + i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  Vec out(n);
  for (size_t i = 0; i < n; ++i) out[i] = x[offset + i] * inv * w[i];
  return out;
}

// How a product's input is rounded (ReferenceShape's quantize_activations and probes).
struct Rounding {
  bool on = false, in_f32 = false;
  double jitter = 0;
  ActivationRounding kind = ActivationRounding::kInt8Block32;
  std::function<bool(int64_t out, int64_t in)> out_bf16;  // empty: f32 outputs
};

// The E4M3 value nearest to v (ties to the even code), saturated at +-448.
inline double round_e4m3(double v) {
  static const std::vector<double> values = [] {  // codes 0..126: every non-negative finite value
    std::vector<double> t;
    for (int code = 0; code < 127; ++code) t.push_back(e4m3_definition(code));
    return t;
  }();
  const double a = std::min(std::abs(v), values.back());
  const size_t hi = static_cast<size_t>(std::lower_bound(values.begin(), values.end(), a) - values.begin());
  size_t code = hi;
  if (hi > 0 && values[hi] != a) {
    const double below = a - values[hi - 1], above = values[hi] - a;
    code = below < above || (below == above && (hi - 1) % 2 == 0) ? hi - 1 : hi;
  }
  return v < 0 ? -values[code] : values[code];
}

// v rounded to f32, then to bf16 (nearest even), as a double.
inline double round_bf16(double v) {
  const float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isfinite(f)) bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// kE4m3PerToken of one product input (x already jittered).
inline Vec quantize_token_e4m3(const Vec& x, bool in_f32) {
  double m = 0;
  for (double v : x) m = std::max(m, std::abs(v));
  const float amax = static_cast<float>(m), s = amax > 0 ? amax / 448.0f : 1.0f;
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double scaled = in_f32 ? static_cast<double>(static_cast<float>(x[i]) / s) : x[i] / static_cast<double>(s);
    out[i] = round_e4m3(scaled) * static_cast<double>(s);
  }
  return out;
}

inline Vec quantize_blocks(const Vec& x_in, const Rounding& r) {
  Vec x = x_in, out(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] *= 1.0 + (i % 2 ? r.jitter : -r.jitter);
  if (r.kind == ActivationRounding::kE4m3PerToken) return quantize_token_e4m3(x, r.in_f32);
  for (size_t b = 0; b < x.size(); b += 32) {
    double m = 0;
    for (size_t i = b; i < b + 32 && i < x.size(); ++i) m = std::max(m, std::abs(x[i]));
    const float dxf = static_cast<float>(m) / 127.0f, inv = dxf == 0 ? 0.0f : 1.0f / dxf;
    const double dx = static_cast<double>(dxf);
    for (size_t i = b; i < b + 32 && i < x.size(); ++i) {
      const double q = r.in_f32 ? std::nearbyint(static_cast<double>(static_cast<float>(x[i]) * inv)) : std::nearbyint(x[i] / dx);
      out[i] = dx == 0 ? 0 : dx * q;
    }
  }
  return out;
}

// y = W x (+ b), W [rows, x.size()]; with quantize.on, x rounded per block first (quantize_blocks).
inline Vec matvec(const Vec& w, const Vec& x_in, const Vec* bias = nullptr, const Rounding& quantize = {}) {
  const Vec x = quantize.on ? quantize_blocks(x_in, quantize) : x_in;
  const size_t cols = x.size(), rows = w.size() / cols;
  const bool bf16_out = quantize.on && quantize.out_bf16 && quantize.out_bf16(static_cast<int64_t>(rows), static_cast<int64_t>(cols));
  Vec y(rows);
  for (size_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (size_t c = 0; c < cols; ++c) acc += w[r * cols + c] * x[c];
    y[r] = (bf16_out ? round_bf16(acc) : acc) + (bias ? (*bias)[r] : 0.0);
  }
  return y;
}

// factors: empty, or one divisor per frequency (Llama-3 scaling's rope_freqs).
inline void rope(Vec& v, int64_t num_heads, int64_t d, int64_t pos, double theta, const Vec& factors) {
  for (int64_t h = 0; h < num_heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i) {
      const double divisor = factors.empty() ? 1.0 : factors[static_cast<size_t>(i)];
      const double angle =
          static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d)) / divisor;
      double& a = v[static_cast<size_t>(h * d + i)];
      double& b = v[static_cast<size_t>(h * d + i + d / 2)];
      const double x0 = a, x1 = b;
      a = x0 * std::cos(angle) - x1 * std::sin(angle);
      b = x1 * std::cos(angle) + x0 * std::sin(angle);
    }
}

}  // namespace reference_forward_detail

namespace reference_forward_detail {

using Weights = std::map<std::string, std::vector<double>>;

inline std::string layer_name(int64_t i, const std::string& suffix) {
  return "model.layers." + std::to_string(i) + "." + suffix;
}

// How a routed expert's input at position t is rounded, and any other product's.
inline Rounding quantize_experts(const ReferenceShape& s, size_t t) {
  const bool at = s.rounded_positions < 0 || static_cast<int64_t>(t) < s.rounded_positions;
  return {s.quantize_activations && at, s.round_in_f32, s.activation_jitter, s.rounding, s.output_bf16};
}
inline Rounding quantize_dense(const ReferenceShape& s, size_t t) {
  Rounding r = quantize_experts(s, t);
  r.on = r.on && !s.quantize_only_experts;
  return r;
}

// q, k, v of every position of layer l (q/k normed per head for Qwen3, then rotated).
inline void qkv(const ReferenceShape& s, const Weights& w, int64_t l, const std::vector<Vec>& x, std::vector<Vec>& q,
                std::vector<Vec>& k, std::vector<Vec>& v) {
  const size_t d = static_cast<size_t>(s.head_dim);
  const Vec factors = w.contains("rope_freqs") ? w.at("rope_freqs") : Vec{};
  auto at = [&](const std::string& suffix) -> const Vec& { return w.at(layer_name(l, suffix)); };
  auto bias = [&](const std::string& suffix) { return w.contains(layer_name(l, suffix)) ? &at(suffix) : nullptr; };
  auto norm_heads = [&](Vec& t, int64_t num_heads, const Vec& weight) {
    for (int64_t hh = 0; hh < num_heads; ++hh) {
      const Vec n = rms_norm(t, weight, s.eps, hh * d, d);
      std::copy(n.begin(), n.end(), t.begin() + static_cast<int64_t>(hh * d));
    }
  };
  for (size_t t = 0; t < x.size(); ++t) {
    const Rounding qa = quantize_dense(s, t);
    const Vec h = rms_norm(x[t], at("input_layernorm.weight"), s.eps);
    q[t] = matvec(at("self_attn.q_proj.weight"), h, bias("self_attn.q_proj.bias"), qa);
    k[t] = matvec(at("self_attn.k_proj.weight"), h, bias("self_attn.k_proj.bias"), qa);
    v[t] = matvec(at("self_attn.v_proj.weight"), h, bias("self_attn.v_proj.bias"), qa);
    if (s.qk_norm) {
      norm_heads(q[t], s.heads, at("self_attn.q_norm.weight"));
      norm_heads(k[t], s.kv_heads, at("self_attn.k_norm.weight"));
    }
    rope(q[t], s.heads, s.head_dim, static_cast<int64_t>(t), s.theta, factors);
    rope(k[t], s.kv_heads, s.head_dim, static_cast<int64_t>(t), s.theta, factors);
  }
}

// Causal GQA attention of position t: [heads * D].
inline Vec attend(const ReferenceShape& s, size_t t, const std::vector<Vec>& q, const std::vector<Vec>& k,
                  const std::vector<Vec>& v) {
  const size_t d = static_cast<size_t>(s.head_dim);
  Vec a(static_cast<size_t>(s.heads) * d, 0.0);
  for (int64_t hh = 0; hh < s.heads; ++hh) {
    const size_t kvh = static_cast<size_t>(hh / (s.heads / s.kv_heads));
    std::vector<double> score(t + 1);
    double mx = -INFINITY;
    for (size_t u = 0; u <= t; ++u) {
      double dot = 0;
      for (size_t i = 0; i < d; ++i) dot += q[t][hh * d + i] * k[u][kvh * d + i];
      score[u] = dot / std::sqrt(static_cast<double>(d));
      mx = std::max(mx, score[u]);
    }
    double sum = 0;
    for (double& e : score) sum += (e = std::exp(e - mx));
    for (size_t u = 0; u <= t; ++u)
      for (size_t i = 0; i < d; ++i) a[hh * d + i] += score[u] / sum * v[u][kvh * d + i];
  }
  return a;
}

// (silu(h Wg^T) * (h Wu^T)) Wd^T with the weights named gate, up_name, down.
inline Vec swiglu_mlp(const Weights& w, const std::string& gate, const std::string& up_name, const std::string& down,
                      const Vec& h, const Rounding& qa) {
  const Vec g = matvec(w.at(gate), h, nullptr, qa);
  const Vec up = matvec(w.at(up_name), h, nullptr, qa);
  Vec act(g.size());
  for (size_t i = 0; i < g.size(); ++i) act[i] = g[i] / (1.0 + std::exp(-g[i])) * up[i];
  return matvec(w.at(down), act, nullptr, qa);
}

// A sparse layer's mixture of experts (the header's definition); `p` is "mlp." or "block_sparse_moe.".
inline Vec moe(const ReferenceShape& s, const Weights& w, int64_t l, const std::string& p, const Vec& h, size_t t) {
  const Rounding qa = quantize_experts(s, t);
  const bool mixtral = p == "block_sparse_moe.";
  const Vec logits = matvec(w.at(layer_name(l, p + "gate.weight")), h);
  const double m = *std::max_element(logits.begin(), logits.end());
  Vec prob(logits.size());
  double sum = 0;
  for (size_t e = 0; e < logits.size(); ++e) sum += prob[e] = std::exp(logits[e] - m);
  for (double& v : prob) v /= sum;
  std::vector<size_t> order(prob.size());
  for (size_t e = 0; e < order.size(); ++e) order[e] = e;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
  order.resize(static_cast<size_t>(s.top_k));
  double top = 0;
  for (const size_t e : order) top += prob[e];
  Vec y(h.size(), 0.0);
  for (const size_t e : order) {
    const std::string ex = layer_name(l, p + "experts." + std::to_string(e) + ".");
    const Vec out = swiglu_mlp(w, ex + (mixtral ? "w1" : "gate_proj") + ".weight", ex + (mixtral ? "w3" : "up_proj") + ".weight",
                               ex + (mixtral ? "w2" : "down_proj") + ".weight", h, qa);
    const double weight = s.norm_topk ? prob[e] / top : prob[e];
    for (size_t i = 0; i < y.size(); ++i) y[i] += weight * out[i];
  }
  if (w.contains(layer_name(l, "mlp.shared_expert_gate.weight"))) {
    const std::string sh = layer_name(l, "mlp.shared_expert.");
    const Vec out =
        swiglu_mlp(w, sh + "gate_proj.weight", sh + "up_proj.weight", sh + "down_proj.weight", h, quantize_dense(s, t));
    const double g = matvec(w.at(layer_name(l, "mlp.shared_expert_gate.weight")), h)[0];
    for (size_t i = 0; i < y.size(); ++i) y[i] += out[i] / (1.0 + std::exp(-g));
  }
  return y;
}

// Position t's x += attention output projection; x += MLP (or the layer's mixture of experts).
inline void residual_blocks(const ReferenceShape& s, const Weights& w, int64_t l, size_t t, const Vec& a, Vec& x) {
  const Rounding qa = quantize_dense(s, t);
  auto at = [&](const std::string& suffix) -> const Vec& { return w.at(layer_name(l, suffix)); };
  const Vec o = matvec(at("self_attn.o_proj.weight"), a, nullptr, qa);
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
  const Vec h = rms_norm(x, at("post_attention_layernorm.weight"), s.eps);
  Vec down;
  if (w.contains(layer_name(l, "mlp.gate.weight"))) {
    down = moe(s, w, l, "mlp.", h, t);
  } else if (w.contains(layer_name(l, "block_sparse_moe.gate.weight"))) {
    down = moe(s, w, l, "block_sparse_moe.", h, t);
  } else {
    down = swiglu_mlp(w, layer_name(l, "mlp.gate_proj.weight"), layer_name(l, "mlp.up_proj.weight"),
                      layer_name(l, "mlp.down_proj.weight"), h, qa);
  }
  for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
}

}  // namespace reference_forward_detail

// The final RMSNorm of the last position's hidden state: [hidden] (what the LM head reads; the
// last_hidden_state of HF's *Model at the last position).
inline std::vector<double> reference_last_hidden(const ReferenceShape& s, const std::map<std::string, std::vector<double>>& w,
                                                 const std::vector<int32_t>& ids) {
  namespace r = reference_forward_detail;
  const size_t n = ids.size(), hd = static_cast<size_t>(s.hidden);
  const r::Vec& table = w.at("model.embed_tokens.weight");
  std::vector<r::Vec> x(n);
  for (size_t t = 0; t < n; ++t) x[t].assign(table.begin() + ids[t] * hd, table.begin() + (ids[t] + 1) * hd);
  for (int64_t l = 0; l < s.layers; ++l) {
    std::vector<r::Vec> q(n), k(n), v(n);
    r::qkv(s, w, l, x, q, k, v);
    for (size_t t = 0; t < n; ++t) r::residual_blocks(s, w, l, t, r::attend(s, t, q, k, v), x[t]);
  }
  return r::rms_norm(x.back(), w.at("model.norm.weight"), s.eps);
}

inline std::vector<double> reference_last_logits(const ReferenceShape& s, const std::map<std::string, std::vector<double>>& w,
                                                 const std::vector<int32_t>& ids) {
  namespace r = reference_forward_detail;
  const r::Vec h = reference_last_hidden(s, w, ids);
  const r::Vec& head = w.contains("lm_head.weight") ? w.at("lm_head.weight") : w.at("model.embed_tokens.weight");
  return r::matvec(head, h, nullptr, s.round_lm_head ? r::quantize_dense(s, ids.size() - 1) : r::Rounding{});
}

// The shape of a model Spindle loaded (its ModelConfig, experts included), unquantized activations.
inline ReferenceShape reference_shape(const ModelConfig& c) {
  ReferenceShape s{c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
                   c.num_key_value_heads, c.head_dim, c.vocab_size, c.rms_norm_eps, c.rope_theta, c.qk_norm};
  s.top_k = c.moe.num_experts_per_tok;
  s.norm_topk = c.moe.norm_topk_prob;
  return s;
}

// Over a model's golden prompts: the worst relative errors of its last logits against the forward
// with float64 activations and against the forward with them rounded as the int8 kernels round
// them (ReferenceShape::quantize_activations), how many prompts the latter holds within its
// tolerance, and on how many the rounded forward is stable at f32 precision: its two probes (the
// rounding computed in f32 as the kernels compute it; every input moved by one f32 ulp) leave it
// within that tolerance. The rounded forward is discontinuous: where a probe moves it, an int8
// rounding sits at a half step, f32 activations upstream may flip it, and after one flip the two
// forwards round independently (gguf_moe_test.cc, bench/results/2026-12-07-devvm-zen4-f64-reference).
struct QuantizedComparison {
  double worst = 0, worst_same_activations = 0;
  int prompts = 0, within_same_activations = 0, stable = 0;
};

// Expects every prompt's error within `tolerance` of the float64-activation forward, and within
// `same_activations_tolerance` of the rounded-activation one on every prompt where that is stable.
// `ours` gives the model's last logits.
inline QuantizedComparison compare_quantized(ReferenceShape shape, const std::map<std::string, std::vector<double>>& w,
                                             const std::vector<GoldenPrompt>& prompts,
                                             const std::function<std::vector<float>(const GoldenPrompt&)>& ours,
                                             double tolerance, double same_activations_tolerance) {
  auto as_float = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  QuantizedComparison out;
  for (const GoldenPrompt& prompt : prompts) {
    const std::vector<float> logits = ours(prompt);
    shape.quantize_activations = false;
    const std::vector<double> ref = reference_last_logits(shape, w, prompt.ids);
    shape.quantize_activations = true;
    const std::vector<double> ref_q = reference_last_logits(shape, w, prompt.ids);
    ReferenceShape probe = shape;
    probe.round_in_f32 = true;
    const std::vector<double> probe_f32 = reference_last_logits(probe, w, prompt.ids);
    probe.round_in_f32 = false;
    probe.activation_jitter = 0x1p-23;
    const std::vector<double> probe_ulp = reference_last_logits(probe, w, prompt.ids);
    const double instability = std::max(relative_error(as_float(probe_f32), as_float(ref_q)),
                                        relative_error(as_float(probe_ulp), as_float(ref_q)));
    const double err = relative_error(logits, as_float(ref));
    const double err_q = relative_error(logits, as_float(ref_q));
    out.worst = std::max(out.worst, err);
    out.worst_same_activations = std::max(out.worst_same_activations, err_q);
    EXPECT_LE(err, tolerance) << prompt.text;
    ++out.prompts;
    out.within_same_activations += err_q <= same_activations_tolerance;
    if (instability <= same_activations_tolerance) {
      ++out.stable;
      EXPECT_LE(err_q, same_activations_tolerance) << prompt.text << " (the rounded reference is stable here)";
    }
  }
  EXPECT_GT(out.prompts, 0);
  return out;
}

}  // namespace spindle::testing
