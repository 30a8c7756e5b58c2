#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "model/model_files.h"
#include "model/moe_layer.h"
#include "model/weight_view.h"
#include "model/weight_map.h"
#include "util/error.h"

namespace spindle {

Transformer::Transformer(ModelConfig config, std::unique_ptr<DeviceOps> ops, WeightSource& weights)
    : config_(std::move(config)), ops_(std::move(ops)) {
  SPINDLE_CHECK(ops_ != nullptr, "Transformer: no device ops");
  place_weights(weights);
  ops_->finish_loading();
  num_logit_ids_ = config_.vocab_size;
}

void Transformer::limit_logit_ids(int num_ids) {
  SPINDLE_CHECK(num_ids >= 1 && num_ids <= config_.vocab_size, "limit_logit_ids: {} token ids of a vocabulary of {}",
                num_ids, config_.vocab_size);
  if (num_ids == config_.vocab_size) {
    lm_head_rows_ = kNoWeight;
  } else {
    const WeightId rows = ops_->place_leading_rows(lm_head_, num_ids);
    SPINDLE_CHECK(rows != kNoWeight, "an LM head over the first {} of {} token ids is not available on {}", num_ids,
                  config_.vocab_size, attn::device_name(device()));
    lm_head_rows_ = rows;
  }
  num_logit_ids_ = num_ids;
}

Transformer::~Transformer() = default;

// The one walk over the weight names (the table itself: weight_map.h).
void Transformer::place_weights(WeightSource& weights) {
  const ModelConfig& c = config_;
  auto views = [&](std::initializer_list<std::string> names) {
    std::vector<WeightView> parts;
    for (const auto& name : names) parts.push_back(weights.weight(name));
    return parts;
  };
  auto vector = [&](const std::string& name) { return ops_->place(views({name}), WeightUse::kVector); };
  auto linear = [&](const std::string& name) { return ops_->place(views({name}), WeightUse::kLinear); };

  const ExpertLayout expert_layout = moe_expert_layout(c, weights);
  embed_ = vector("model.embed_tokens.weight");
  final_norm_ = vector("model.norm.weight");
  layers_.assign(static_cast<size_t>(c.num_hidden_layers), Layer{});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    Layer& l = layers_[static_cast<size_t>(i)];
    auto name = [i](std::string_view suffix) { return layer_weight_name(i, suffix); };
    l.input_norm = vector(name("input_layernorm.weight"));
    l.post_norm = vector(name("post_attention_layernorm.weight"));
    const auto qkv_biases = c.attention_bias
                                ? views({name("self_attn.q_proj.bias"), name("self_attn.k_proj.bias"),
                                         name("self_attn.v_proj.bias")})
                                : std::vector<WeightView>{};
    l.qkv = ops_->place_group(LinearGroupKind::kQkv,
                              views({name("self_attn.q_proj.weight"), name("self_attn.k_proj.weight"),
                                     name("self_attn.v_proj.weight")}),
                              qkv_biases);
    l.o = linear(name("self_attn.o_proj.weight"));
    if (c.qk_norm) {
      l.q_norm = vector(name("self_attn.q_norm.weight"));
      l.k_norm = vector(name("self_attn.k_norm.weight"));
    }
    if (c.is_moe_layer(i)) {
      l.moe = place_moe_block(*ops_, weights, c, expert_layout, i);
      continue;
    }
    l.gate_up = ops_->place_group(LinearGroupKind::kGateUp,
                                  views({name("mlp.gate_proj.weight"), name("mlp.up_proj.weight")}), {});
    l.down = linear(name("mlp.down_proj.weight"));
  }
  lm_head_ = linear(lm_head_is_tied(c, weights) ? "model.embed_tokens.weight" : "lm_head.weight");
}

int Transformer::num_fused_gate_up() const {
  return static_cast<int>(
      std::count_if(layers_.begin(), layers_.end(), [](const Layer& l) { return l.gate_up.joined != kNoWeight; }));
}

int Transformer::num_fused_qkv() const {
  return static_cast<int>(
      std::count_if(layers_.begin(), layers_.end(), [](const Layer& l) { return l.qkv.joined != kNoWeight; }));
}

attn::AttentionShape Transformer::attention_shape(DType kv_dtype, int page_size) const {
  attn::AttentionShape s;
  s.num_heads = config_.num_attention_heads;
  s.num_kv_heads = config_.num_key_value_heads;
  s.head_dim = config_.head_dim;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(config_.head_dim)));
  s.kv_dtype = kv_dtype;
  s.page_size = page_size;
  return s;
}

const kernels::cuda::DeviceBatch* Transformer::upload(const StepBatch& batch, int page_size, int plan_kv_len) {
  check_step_batch(batch, config_.vocab_size, page_size);
  return ops_->upload(batch, page_size, plan_kv_len);
}

void Transformer::reserve_workspace(int64_t num_tokens, int64_t num_logit_rows) {
  SPINDLE_CHECK(num_tokens > 0 && num_logit_rows >= 0 && num_logit_rows <= num_tokens,
                "reserve_workspace: {} tokens and {} logit rows", num_tokens, num_logit_rows);
  ops_->reserve(num_tokens, num_logit_rows);
}

void Transformer::forward(const StepBatch& batch, attn::AttentionBackend& attention, float* logits, StepMode mode) {
  const int64_t t = batch.num_tokens();
  const int64_t n = batch.num_logit_rows();
  SPINDLE_CHECK(attention.device() == device(), "forward: attention backend {} runs on {}, this model on {}",
                attention.name(), attn::device_name(attention.device()), attn::device_name(device()));
  // (A device refuses what it cannot do: logits left on a device that does not sample there,
  // logits_target; graphs where it has none, run_forward.)
  if (t == 0) return;
  const StepBatchView& step = ops_->step();
  SPINDLE_CHECK(step.num_tokens == t && step.num_logit_rows == n,
                "forward: the batch ({} tokens, {} logit rows) is not the uploaded one ({}, {}); upload it first", t,
                n, step.num_tokens, step.num_logit_rows);

  ops_->reserve(t, n);  // before logits_target: growing moves the device scratch
  float* device_logits = ops_->logits_target(logits);
  // Decode: the row count; a uniform multi-token step: the row count and the tokens per sequence.
  const int64_t graph_key =
      mode == StepMode::kEager ? -1 : batch.is_decode() ? t : (int64_t{batch.max_new_tokens} << 32) | t;
  ops_->run_forward(graph_key, [&] { queue_forward(batch, attention, device_logits); }, last_capture_failure_);
  ops_->finish_step(logits, n * config_.vocab_size);
  if (num_logit_ids_ < config_.vocab_size && logits != nullptr) {
    widen_logit_rows(logits, n, num_logit_ids_, config_.vocab_size);
  }
}

void Transformer::read_logits(float* host, int64_t num_rows) {
  SPINDLE_CHECK(samples_on_device(), "read_logits: {} writes its logits to the host in forward()",
                attn::device_name(device()));
  const int64_t have = ops_->step().num_logit_rows;
  SPINDLE_CHECK(host != nullptr && num_rows >= 0 && num_rows <= have, "read_logits: {} rows of a step of {}", num_rows,
                have);
  // No row range of the head on such a device (limit_logit_ids), so the rows are whole.
  ops_->finish_step(host, num_rows * config_.vocab_size);
}

void widen_logit_rows(float* logits, int64_t rows, int64_t num_ids, int64_t vocab) {
  SPINDLE_CHECK(rows >= 0 && num_ids >= 1 && num_ids <= vocab, "widen_logit_rows: {} rows of {} of {} ids", rows,
                num_ids, vocab);
  // Last row first: row r moves from r * num_ids to r * vocab >= r * num_ids (overlapping).
  for (int64_t r = rows - 1; r >= 0; --r) {
    float* row = logits + r * vocab;
    if (r > 0 && num_ids < vocab) std::memmove(row, logits + r * num_ids, static_cast<size_t>(num_ids) * sizeof(float));
    std::fill(row + num_ids, row + vocab, kExcludedLogit);
  }
}

// The device work of one forward, queued; the LM head writes `logits` (logits_target's).
void Transformer::queue_forward(const StepBatch& batch, attn::AttentionBackend& attention, float* logits) {
  const ModelConfig& c = config_;
  const int64_t t = batch.num_tokens();
  const int64_t n = batch.num_logit_rows();
  const StepBatchView& step = ops_->step();
  ops_->reserve(t, n);
  const int64_t h = c.hidden_size;
  float* hidden = ops_->scratch(Scratch::kHidden);
  float* normed = ops_->scratch(Scratch::kNormed);
  ops_->embed(embed_, step.token_ids, t, h, hidden);
  ops_->rms_norm(hidden, normed, t, h, layers_.front().input_norm);
  for (int i = 0; i < c.num_hidden_layers; ++i) run_layer(i, t, attention);

  if (n > 0) {
    float* final_rows = ops_->scratch(Scratch::kFinalRows);
    ops_->rms_norm(hidden, final_rows, n, h, final_norm_, step.logit_rows);
    // The first num_logit_ids_ rows only (limit_logit_ids): compact [n, num_logit_ids_] rows,
    // widened by forward().
    const LayerMath::Product head{lm_head_rows_ != kNoWeight ? lm_head_rows_ : lm_head_, logits, kNoWeight};
    ops_->linear(final_rows, n, {&head, 1});
  }
}

// Layer `index` over t rows. On entry kNormed holds RMSNorm(x) with this layer's input norm; on
// exit kHidden holds x + attention + MLP and kNormed the next layer's input norm of it (the last
// layer leaves kHidden complete for the final norm).
void Transformer::run_layer(int index, int64_t t, attn::AttentionBackend& attention) {
  const ModelConfig& c = config_;
  const Layer& l = layers_[static_cast<size_t>(index)];
  const int64_t h = c.hidden_size, qs = c.q_size(), ks = c.kv_size(), im = c.intermediate_size;
  DeviceOps& ops = *ops_;
  float* hidden = ops.scratch(Scratch::kHidden);
  float* normed = ops.scratch(Scratch::kNormed);
  float* q = ops.scratch(Scratch::kQ);
  float* k = ops.scratch(Scratch::kK);
  float* v = ops.scratch(Scratch::kV);
  float* attn_out = ops.scratch(Scratch::kAttention);
  float* proj = ops.scratch(Scratch::kProjection);
  float* gate_up = ops.scratch(Scratch::kGateUp);
  float* act = ops.scratch(Scratch::kActivation);

  // Attention block: q, k, v (the device may write k and v into the pages as it makes them),
  // attention, the output projection, the residual add and the MLP's norm.
  LayerMath::AttentionInput in;
  in.x = normed;
  in.rows = t;
  in.qkv = &l.qkv;
  in.q_norm = l.q_norm;
  in.k_norm = l.k_norm;
  in.positions = ops.step().positions;
  in.num_heads = c.num_attention_heads;
  in.num_kv_heads = c.num_key_value_heads;
  in.q = q;
  in.k = k;
  in.v = v;
  const bool kv_written = ops.attention_input(in, attention, index);
  ops.attend(attention, index, {q, t, qs}, {k, t, ks}, {v, t, ks}, {attn_out, t, qs}, kv_written);
  const LayerMath::Product o{l.o, proj, kNoWeight};
  ops.linear_add_rms_norm(attn_out, t, o, hidden, normed, h, l.post_norm);

  // MLP block: the dense MLP, or a sparse layer's mixture of experts.
  const bool last = index + 1 == c.num_hidden_layers;
  if (l.moe) {
    ops.moe(normed, t, *l.moe, proj);
    if (last) {
      ops.add(hidden, proj, t, h);
    } else {
      ops.add_rms_norm(hidden, proj, normed, t, h, layers_[static_cast<size_t>(index) + 1].input_norm);
    }
    return;
  }
  ops.swiglu(normed, t, l.gate_up, gate_up, act, im);
  const LayerMath::Product down{l.down, proj, kNoWeight};
  if (!last) {  // the residual add and the next layer's input norm
    ops.linear_add_rms_norm(act, t, down, hidden, normed, h, layers_[static_cast<size_t>(index) + 1].input_norm);
  } else {
    ops.linear(act, t, {&down, 1});
    ops.add(hidden, proj, t, h);
  }
}

void check_attention_backends(const attn::AttentionBackend* prefill, const attn::AttentionBackend* decode,
                              attn::Device device) {
  SPINDLE_CHECK(prefill != nullptr && decode != nullptr, "set_attention_backends: backends must not be null");
  for (const attn::AttentionBackend* b : {prefill, decode}) {
    SPINDLE_CHECK(b->device() == device,
                  "set_attention_backends: attention backend {} runs on {}, but this model runs on {}; choose a {} "
                  "backend",
                  b->name(), attn::device_name(b->device()), attn::device_name(device), attn::device_name(device));
  }
}

void check_kv_caches(std::span<const attn::LayerKvCache> caches, int num_layers, attn::Device device) {
  SPINDLE_CHECK(static_cast<int>(caches.size()) == num_layers, "bind_kv_caches: {} caches given for {} layers",
                caches.size(), num_layers);
  for (size_t i = 0; i < caches.size(); ++i) {
    SPINDLE_CHECK(caches[i].device == device,
                  "bind_kv_caches: layer {}'s KV pages are in {} memory, but this model runs on {}", i,
                  attn::device_name(caches[i].device), attn::device_name(device));
  }
}

void check_step_batch(const StepBatch& b, int vocab_size, int page_size) {
  SPINDLE_CHECK(page_size > 0, "forward: page size {} must be positive", page_size);
  const int64_t t = b.num_tokens();
  SPINDLE_CHECK(static_cast<int64_t>(b.positions.size()) == t, "forward: {} positions for {} token ids",
                b.positions.size(), t);
  int64_t row = 0, logit = 0, max_new = 0, max_kv = 0;
  for (size_t i = 0; i < b.sequences.size(); ++i) {
    const StepSequence& s = b.sequences[i];
    SPINDLE_CHECK(s.num_new_tokens >= 0 && s.num_cached_tokens >= 0,
                  "forward: negative token counts ({} new, {} cached)", s.num_new_tokens, s.num_cached_tokens);
    SPINDLE_CHECK(s.query_offset == row, "forward: sequence {} starts at row {}, expected {}", i, s.query_offset, row);
    SPINDLE_CHECK(s.num_logit_rows >= 0 && s.num_logit_rows <= s.num_new_tokens && s.logit_offset == logit,
                  "forward: sequence {} wants {} logit rows at {} ({} new tokens, expected offset {})", i,
                  s.num_logit_rows, s.logit_offset, s.num_new_tokens, logit);
    SPINDLE_CHECK(s.page_table_offset >= 0 && s.num_pages >= 0 &&
                      int64_t{s.page_table_offset} + s.num_pages <= static_cast<int64_t>(b.page_tables.size()),
                  "forward: sequence {}'s page table [{}, +{}) is outside the batch's {} entries", i,
                  s.page_table_offset, s.num_pages, b.page_tables.size());
    const int64_t kv_len = int64_t{s.num_cached_tokens} + s.num_new_tokens;
    SPINDLE_CHECK(int64_t{s.num_pages} * page_size >= kv_len,
                  "forward: sequence {}: page table of {} pages cannot hold {} tokens (page size {})", i, s.num_pages,
                  kv_len, page_size);
    for (int j = 0; j < s.num_new_tokens && row + j < t; ++j) {
      SPINDLE_CHECK(b.positions[static_cast<size_t>(row + j)] == int64_t{s.num_cached_tokens} + j,
                    "forward: sequence {} row {} has position {}, expected {}", i, j,
                    b.positions[static_cast<size_t>(row + j)], int64_t{s.num_cached_tokens} + j);
    }
    max_new = std::max<int64_t>(max_new, s.num_new_tokens);
    max_kv = std::max(max_kv, kv_len);
    row += s.num_new_tokens;
    logit += s.num_logit_rows;
  }
  SPINDLE_CHECK(row == t, "forward: {} token ids for a batch of {} new tokens", t, row);
  SPINDLE_CHECK(b.max_new_tokens == max_new && b.max_kv_len == max_kv,
                "forward: the batch's maxima ({} new, {} kv) are not its sequences' ({}, {})", b.max_new_tokens,
                b.max_kv_len, max_new, max_kv);
  SPINDLE_CHECK(logit == b.num_logit_rows(), "forward: {} logit rows, the sequences want {}", b.num_logit_rows(),
                logit);
  for (const int64_t r : b.logit_rows) {
    SPINDLE_CHECK(r >= 0 && r < t, "forward: logit row {} is outside the batch's {} tokens", r, t);
  }
  for (size_t i = 0; i < b.token_ids.size(); ++i) {
    SPINDLE_CHECK(b.token_ids[i] >= 0 && b.token_ids[i] < vocab_size,
                  "token id {} at position {} is outside the vocabulary [0, {})", b.token_ids[i], i, vocab_size);
  }
}

}  // namespace spindle
