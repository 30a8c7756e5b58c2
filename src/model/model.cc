#include "model/model.h"

#include <algorithm>
#include <cmath>

#include "model/model_files.h"
#include "model/weight_map.h"
#include "util/error.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace spindle {

namespace kc = kernels::cpu;

struct Model::Layer {
  kc::TypedWeight input_norm;  // [H]
  kc::TypedWeight post_norm;   // [H]
  kc::TypedWeight q_norm;      // [D], Qwen3 only
  kc::TypedWeight k_norm;      // [D], Qwen3 only
  std::unique_ptr<kc::LinearKernel> q, k, v, o;  // [Q, H], [K, H], [K, H], [H, Q]
  // gate_up: [2I, H] over gate_proj and up_proj lying back to back in the file; otherwise
  // gate and up [I, H] each.
  std::unique_ptr<kc::LinearKernel> gate_up, gate, up;
  std::unique_ptr<kc::LinearKernel> down;  // [H, I]
  std::vector<float> q_bias, k_bias, v_bias;  // f32 copies; empty without attention_bias
};

// Scratch activations, f32, grown on demand.
struct Model::Workspace {
  std::vector<float> hidden;      // [T, H] the residual stream
  std::vector<float> normed;      // [T, H]
  std::vector<float> q;           // [T, Q]
  std::vector<float> k, v;        // [T, K]
  std::vector<float> attn;        // [T, Q]
  std::vector<float> proj;        // [T, H] o_proj and down_proj outputs
  std::vector<float> gate_up;     // [T, 2I]: fused rows [gate | up], else [gate rows; up rows]
  std::vector<float> act;         // [T, I]
  std::vector<float> final_rows;  // [num_logit_rows, H]

  uint64_t bytes() const {
    size_t n = 0;
    for (const auto* b : {&hidden, &normed, &q, &k, &v, &attn, &proj, &gate_up, &act, &final_rows}) {
      n += b->capacity();
    }
    return n * sizeof(float);
  }
};

namespace {

// Elements of work below which an op runs on the calling thread.
constexpr int64_t kMinParallelWork = 1 << 15;

void grow(std::vector<float>& buffer, int64_t size) {
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(static_cast<size_t>(size));
}

kc::TypedWeight typed(const TensorView& view) { return {view.bytes.data(), view.info->dtype}; }

}  // namespace

std::unique_ptr<Model> Model::load(const std::filesystem::path& dir, const ModelOptions& options) {
  std::unique_ptr<Model> model(new Model());
  ModelFiles files = open_model_files(dir);
  model->config_ = std::move(files.config);
  model->checkpoint_ = std::move(files.checkpoint);
  model->pool_ = options.pool ? options.pool : &ThreadPool::global();
  model->load_weights(options);
  model->ws_ = std::make_unique<Workspace>();
  return model;
}

Model::~Model() = default;

void Model::load_weights(const ModelOptions& options) {
  const ModelConfig& c = config_;
  auto make_linear = options.make_linear ? options.make_linear : [](const kc::LinearWeight& w) {
    return kc::make_linear_kernel(w);
  };
  auto view = [&](const std::string& name) {
    TensorView t = checkpoint_->tensor(name);
    weight_bytes_ += t.info->num_bytes();
    return t;
  };
  auto linear_from = [&](const TensorView& t, int64_t rows) {
    SPINDLE_CHECK(t.info->dtype == DType::kF32 || t.info->dtype == DType::kBF16,
                  "{}: tensor {} is {}; the CPU linear kernels take F32 or BF16 weights (convert the "
                  "checkpoint, e.g. save it with torch_dtype=bfloat16)",
                  checkpoint_->dir().string(), t.info->name, dtype_name(t.info->dtype));
    kc::LinearWeight w{t.bytes.data(), t.info->dtype, rows, t.info->shape.back()};
    return make_linear(w);
  };
  auto linear = [&](const std::string& name) {
    TensorView t = view(name);
    return linear_from(t, t.info->shape.front());
  };
  auto bias = [&](const std::string& name) {
    TensorView t = view(name);
    std::vector<float> b = tensor_to_f32(t);
    weight_bytes_ += b.size() * sizeof(float);
    return b;
  };

  embed_ = typed(view("model.embed_tokens.weight"));
  final_norm_ = typed(view("model.norm.weight"));
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    Layer& l = layers_[i];
    auto name = [i](std::string_view suffix) { return layer_weight_name(i, suffix); };
    l.input_norm = typed(view(name("input_layernorm.weight")));
    l.post_norm = typed(view(name("post_attention_layernorm.weight")));
    l.q = linear(name("self_attn.q_proj.weight"));
    l.k = linear(name("self_attn.k_proj.weight"));
    l.v = linear(name("self_attn.v_proj.weight"));
    l.o = linear(name("self_attn.o_proj.weight"));
    if (c.attention_bias) {
      l.q_bias = bias(name("self_attn.q_proj.bias"));
      l.k_bias = bias(name("self_attn.k_proj.bias"));
      l.v_bias = bias(name("self_attn.v_proj.bias"));
    }
    if (c.qk_norm) {
      l.q_norm = typed(view(name("self_attn.q_norm.weight")));
      l.k_norm = typed(view(name("self_attn.k_norm.weight")));
    }
    const TensorView gate = view(name("mlp.gate_proj.weight"));
    const TensorView up = view(name("mlp.up_proj.weight"));
    if (gate.info->dtype == up.info->dtype && gate.bytes.data() + gate.bytes.size() == up.bytes.data()) {
      TensorView fused = gate;
      l.gate_up = linear_from(fused, 2 * int64_t{c.intermediate_size});
    } else {
      l.gate = linear_from(gate, c.intermediate_size);
      l.up = linear_from(up, c.intermediate_size);
    }
    l.down = linear(name("mlp.down_proj.weight"));
  }
  if (lm_head_is_tied(c, *checkpoint_)) {
    lm_head_ = linear_from(checkpoint_->tensor("model.embed_tokens.weight"), c.vocab_size);
  } else {
    lm_head_ = linear("lm_head.weight");
  }

  rope_ = std::make_unique<kc::RopeTable>(rope_params(c), rope_table_positions(c, options.rope_table_positions));
}

uint64_t Model::workspace_bytes() const {
  return ws_->bytes() + rope_->table_bytes() + positions_.capacity() * sizeof(int64_t);
}

const char* Model::linear_kernel_name() const { return lm_head_->name(); }

int Model::num_fused_gate_up() const {
  return static_cast<int>(std::count_if(layers_.begin(), layers_.end(),
                                        [](const Layer& l) { return l.gate_up != nullptr; }));
}

void Model::set_attention_backends(attn::AttentionBackend* prefill, attn::AttentionBackend* decode) {
  check_attention_backends(prefill, decode, device());
  prefill_backend_ = prefill;
  decode_backend_ = decode;
  if (!kv_caches_.empty()) bind_kv_caches(std::vector<attn::LayerKvCache>(kv_caches_));
}

void Model::bind_kv_caches(std::span<const attn::LayerKvCache> caches) {
  check_kv_caches(caches, config_.num_hidden_layers, device());
  kv_caches_.assign(caches.begin(), caches.end());
  if (prefill_backend_ != nullptr) prefill_backend_->bind_kv_caches(kv_caches_);
  if (decode_backend_ != nullptr && decode_backend_ != prefill_backend_) {
    decode_backend_->bind_kv_caches(kv_caches_);
  }
}

void Model::ensure_workspace(int64_t t, int64_t num_logit_rows) {
  const ModelConfig& c = config_;
  Workspace& w = *ws_;
  grow(w.hidden, t * c.hidden_size);
  grow(w.normed, t * c.hidden_size);
  grow(w.q, t * c.q_size());
  grow(w.k, t * c.kv_size());
  grow(w.v, t * c.kv_size());
  grow(w.attn, t * c.q_size());
  grow(w.proj, t * c.hidden_size);
  grow(w.gate_up, t * 2 * int64_t{c.intermediate_size});
  grow(w.act, t * c.intermediate_size);
  grow(w.final_rows, num_logit_rows * c.hidden_size);
}

void Model::parallel_rows(int64_t rows, int64_t cost_per_row,
                          const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t threads = pool_->num_threads();
  if (threads <= 1 || rows < 2 || rows * cost_per_row < kMinParallelWork) {
    fn(0, rows);
    return;
  }
  const int64_t chunks = std::min(rows, threads * 4);
  pool_->parallel_for(chunks, [&](int64_t i) { fn(i * rows / chunks, (i + 1) * rows / chunks); });
}

void Model::forward(std::span<const int32_t> token_ids, const attn::BatchMetadata& batch,
                    std::span<const int64_t> logit_rows, float* logits) {
  const ModelConfig& c = config_;
  const int64_t t = static_cast<int64_t>(token_ids.size());
  const bool any_prefill = check_forward_step(t, batch, logit_rows, positions_);
  if (t == 0) return;
  attn::AttentionBackend* backend = any_prefill ? prefill_backend_ : decode_backend_;
  SPINDLE_CHECK(backend != nullptr, "forward: no attention backend set (set_attention_backends)");
  SPINDLE_CHECK(static_cast<int>(kv_caches_.size()) == c.num_hidden_layers,
                "forward: no KV caches bound (bind_kv_caches)");

  const int64_t n = static_cast<int64_t>(logit_rows.size());
  ensure_workspace(t, n);
  Workspace& w = *ws_;
  const int64_t h = c.hidden_size;
  parallel_rows(t, h, [&](int64_t b, int64_t e) {
    kc::embedding_gather(embed_, c.vocab_size, h, token_ids.subspan(b, e - b), w.hidden.data() + b * h);
  });
  backend->prepare(batch);
  for (int i = 0; i < c.num_hidden_layers; ++i) run_layer(i, t, *backend);

  if (n == 0) return;
  const float eps = static_cast<float>(c.rms_norm_eps);
  parallel_rows(n, h, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      kc::rms_norm(w.hidden.data() + logit_rows[r] * h, h, w.final_rows.data() + r * h, h, 1, h, final_norm_, eps);
    }
  });
  lm_head_->forward(w.final_rows.data(), n, logits, pool_);
}

void Model::run_layer(int index, int64_t t, attn::AttentionBackend& backend) {
  const ModelConfig& c = config_;
  const Layer& l = layers_[index];
  Workspace& w = *ws_;
  const int64_t h = c.hidden_size, qs = c.q_size(), ks = c.kv_size(), im = c.intermediate_size;
  const int64_t d = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };

  // Attention block.
  parallel_rows(t, h, [&](int64_t b, int64_t e) {
    kc::rms_norm(w.hidden.data() + b * h, h, w.normed.data() + b * h, h, e - b, h, l.input_norm, eps);
  });
  l.q->forward(w.normed.data(), t, w.q.data(), pool_, bias(l.q_bias));
  l.k->forward(w.normed.data(), t, w.k.data(), pool_, bias(l.k_bias));
  l.v->forward(w.normed.data(), t, w.v.data(), pool_, bias(l.v_bias));
  parallel_rows(t, qs + ks, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* q = w.q.data() + r * qs;
      float* k = w.k.data() + r * ks;
      if (c.qk_norm) {
        kc::rms_norm(q, d, q, d, c.num_attention_heads, d, l.q_norm, eps);
        kc::rms_norm(k, d, k, d, c.num_key_value_heads, d, l.k_norm, eps);
      }
      rope_->apply(q, c.num_attention_heads, positions_[r]);
      rope_->apply(k, c.num_key_value_heads, positions_[r]);
    }
  });
  backend.forward(index, {w.q.data(), t, qs}, {w.k.data(), t, ks}, {w.v.data(), t, ks}, {w.attn.data(), t, qs});
  l.o->forward(w.attn.data(), t, w.proj.data(), pool_);

  // MLP block (the residual add of the attention block is fused into the norm's row loop).
  parallel_rows(t, h, [&](int64_t b, int64_t e) {
    kc::add_inplace(w.hidden.data() + b * h, w.proj.data() + b * h, (e - b) * h);
    kc::rms_norm(w.hidden.data() + b * h, h, w.normed.data() + b * h, h, e - b, h, l.post_norm, eps);
  });
  const float* gate;
  const float* up;
  int64_t stride;
  if (l.gate_up) {
    l.gate_up->forward(w.normed.data(), t, w.gate_up.data(), pool_);
    gate = w.gate_up.data();
    up = gate + im;
    stride = 2 * im;
  } else {
    l.gate->forward(w.normed.data(), t, w.gate_up.data(), pool_);
    l.up->forward(w.normed.data(), t, w.gate_up.data() + t * im, pool_);
    gate = w.gate_up.data();
    up = gate + t * im;
    stride = im;
  }
  parallel_rows(t, im * 8, [&](int64_t b, int64_t e) {
    kc::silu_mul(gate + b * stride, up + b * stride, stride, w.act.data() + b * im, e - b, im);
  });
  l.down->forward(w.act.data(), t, w.proj.data(), pool_);
  parallel_rows(t, h, [&](int64_t b, int64_t e) {
    kc::add_inplace(w.hidden.data() + b * h, w.proj.data() + b * h, (e - b) * h);
  });
}

}  // namespace spindle
