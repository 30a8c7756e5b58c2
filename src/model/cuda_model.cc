#include "model/cuda_model.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/cuda_check.h"
#include "model/model_files.h"
#include "model/safetensors.h"
#include "model/weight_map.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle {

namespace kc = kernels::cpu;
namespace kcu = kernels::cuda;

struct CudaModel::Layer {
  Norm input_norm;  // [H]
  Norm post_norm;   // [H]
  Norm q_norm;      // [D], Qwen3 only
  Norm k_norm;      // [D], Qwen3 only
  kcu::DeviceWeight q, k, v, o;  // [Q, H], [K, H], [K, H], [H, Q]
  // gate_up: [2I, H] = gate_proj rows then up_proj rows (data null when their dtypes differ);
  // otherwise gate and up [I, H] each.
  kcu::DeviceWeight gate_up, gate, up;
  kcu::DeviceWeight down;  // [H, I]
  const float* q_bias = nullptr;  // f32, null without attention_bias
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
};

// Device scratch, f32 unless stated, grown on demand (T tokens, N logit rows).
struct CudaModel::Workspace {
  kcu::DeviceBuffer hidden;      // [T, H] the residual stream
  kcu::DeviceBuffer normed;      // [T, H]
  kcu::DeviceBuffer q;           // [T, Q]
  kcu::DeviceBuffer k, v;        // [T, K]
  kcu::DeviceBuffer attn;        // [T, Q]
  kcu::DeviceBuffer proj;        // [T, H] o_proj and down_proj outputs
  kcu::DeviceBuffer gate_up;     // [T, 2I]: fused rows [gate | up], else [gate rows; up rows]
  kcu::DeviceBuffer act;         // [T, I]
  kcu::DeviceBuffer final_rows;  // [N, H]
  kcu::DeviceBuffer logits;      // [N, V]
  kcu::DeviceBuffer step;        // positions [T] i64, logit rows [N] i64, token ids [T] i32

  uint64_t bytes() const {
    uint64_t n = 0;
    for (const auto* b : {&hidden, &normed, &q, &k, &v, &attn, &proj, &gate_up, &act, &final_rows, &logits, &step}) {
      n += b->size();
    }
    return n;
  }
};

namespace {

// Weight slots start on this boundary (cuBLAS and vector loads like aligned data).
constexpr size_t kWeightAlign = 256;
constexpr int kMinCcMajor = 8;  // the kernels are built for sm_80 and sm_90

kcu::WeightType weight_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return kcu::WeightType::kF32;
    case DType::kBF16: return kcu::WeightType::kBF16;
    case DType::kF16: return kcu::WeightType::kF16;
    default: break;
  }
  SPINDLE_FAIL("weights of dtype {} are not supported on CUDA (F32, BF16, F16)", dtype_name(dtype));
}

void grow_f32(kcu::DeviceBuffer& buffer, int64_t count) { buffer.reserve(static_cast<size_t>(count) * sizeof(float)); }

}  // namespace

CudaModel::CudaModel() = default;
CudaModel::~CudaModel() = default;

std::unique_ptr<CudaModel> CudaModel::load(const std::filesystem::path& dir, const CudaModelOptions& options) {
  ModelFiles files = open_model_files(dir);  // the folder's problems first, as Model reports them

  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  SPINDLE_CHECK(status == cudaSuccess, "{}: cannot load the model on CUDA: {}", dir.string(),
                cudaGetErrorString(status));
  SPINDLE_CHECK(options.device >= 0 && options.device < count,
                "{}: CUDA device {} does not exist ({} visible; check CUDA_VISIBLE_DEVICES)", dir.string(),
                options.device, count);
  CUDA_CHECK(cudaSetDevice(options.device));
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, options.device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, options.device));
  SPINDLE_CHECK(major >= kMinCcMajor, "{}: CUDA device {} has compute capability {}.{}; Spindle's CUDA path needs {}.0",
                dir.string(), options.device, major, minor, kMinCcMajor);

  std::unique_ptr<CudaModel> model(new CudaModel());
  model->config_ = std::move(files.config);
  model->device_ = options.device;
  model->linear_ = std::make_unique<kcu::CublasLinear>(model->stream_, options.allow_16bit_activations);
  model->upload_weights(*files.checkpoint);
  files.checkpoint.reset();  // unmapped: everything the forward reads is on the device
  model->upload_rope(rope_table_positions(model->config_, options.rope_table_positions));
  model->ws_ = std::make_unique<Workspace>();
  CUDA_CHECK(cudaDeviceSynchronize());
  return model;
}

void CudaModel::upload_weights(const Checkpoint& checkpoint) {
  const ModelConfig& c = config_;
  layers_.assign(static_cast<size_t>(c.num_hidden_layers), Layer{});
  std::byte* base = nullptr;
  // Pass 0 lays the slots out (pointers stay null); pass 1 allocates once and copies.
  for (int pass = 0; pass < 2; ++pass) {
    size_t cursor = 0;
    weight_bytes_ = 0;
    // The parts back to back in the next aligned slot; returns the slot (null in pass 0).
    auto place = [&](std::initializer_list<std::span<const std::byte>> parts) -> const void* {
      size_t bytes = 0;
      for (const auto& p : parts) bytes += p.size();
      const size_t offset = cursor;
      cursor += (bytes + kWeightAlign - 1) / kWeightAlign * kWeightAlign;
      weight_bytes_ += bytes;
      if (base == nullptr) return nullptr;
      std::byte* dst = base + offset;
      for (const auto& p : parts) {
        CUDA_CHECK(cudaMemcpy(dst, p.data(), p.size(), cudaMemcpyHostToDevice));
        dst += p.size();
      }
      return base + offset;
    };
    auto norm = [&](const std::string& name) -> Norm {
      const TensorView t = checkpoint.tensor(name);
      return {place({t.bytes}), weight_type(t.info->dtype)};
    };
    auto linear = [&](const std::string& name) -> kcu::DeviceWeight {
      const TensorView t = checkpoint.tensor(name);
      weight_type(t.info->dtype);  // throws for anything but F32, BF16, F16
      return {place({t.bytes}), t.info->dtype, t.info->shape.front(), t.info->shape.back()};
    };
    auto bias = [&](const std::string& name) -> const float* {
      const std::vector<float> b = tensor_to_f32(checkpoint.tensor(name));
      return static_cast<const float*>(place({std::as_bytes(std::span(b))}));
    };

    const TensorView embed = checkpoint.tensor("model.embed_tokens.weight");
    embed_ = {place({embed.bytes}), weight_type(embed.info->dtype)};
    final_norm_ = norm("model.norm.weight");
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      Layer& l = layers_[static_cast<size_t>(i)];
      auto name = [i](std::string_view suffix) { return layer_weight_name(i, suffix); };
      l.input_norm = norm(name("input_layernorm.weight"));
      l.post_norm = norm(name("post_attention_layernorm.weight"));
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
        l.q_norm = norm(name("self_attn.q_norm.weight"));
        l.k_norm = norm(name("self_attn.k_norm.weight"));
      }
      const TensorView gate = checkpoint.tensor(name("mlp.gate_proj.weight"));
      const TensorView up = checkpoint.tensor(name("mlp.up_proj.weight"));
      if (gate.info->dtype == up.info->dtype) {
        weight_type(gate.info->dtype);
        l.gate_up = {place({gate.bytes, up.bytes}), gate.info->dtype, 2 * int64_t{c.intermediate_size},
                     int64_t{c.hidden_size}};
      } else {
        l.gate = linear(name("mlp.gate_proj.weight"));
        l.up = linear(name("mlp.up_proj.weight"));
      }
      l.down = linear(name("mlp.down_proj.weight"));
    }
    if (lm_head_is_tied(c, checkpoint)) {
      lm_head_ = {embed_.data, embed.info->dtype, int64_t{c.vocab_size}, int64_t{c.hidden_size}};
    } else {
      lm_head_ = linear("lm_head.weight");
    }

    has_16bit_weights_ = lm_head_.dtype != DType::kF32;
    for (const Layer& l : layers_) {
      for (const kcu::DeviceWeight* w : {&l.q, &l.k, &l.v, &l.o, &l.gate_up, &l.gate, &l.up, &l.down}) {
        has_16bit_weights_ = has_16bit_weights_ || (w->out_features > 0 && w->dtype != DType::kF32);
      }
    }
    if (pass == 0) {
      weights_.reserve(std::max<size_t>(cursor, 1));
      base = weights_.as<std::byte>();
    }
  }
}

void CudaModel::upload_rope(int64_t table_positions) {
  // A RopeTable without a table computes every position on the fly with the arithmetic that
  // fills Model's table; rotating [1, .., 1, 0, .., 0] by position p yields exactly
  // [cos(p f_i) .., sin(p f_i) ..].
  const kc::RopeTable rope(rope_params(config_), 0);
  const int d = config_.head_dim;
  const int half = d / 2;
  rope_positions_ = table_positions;
  inv_freq_.reserve(rope.inv_freq().size() * sizeof(float));
  kcu::copy_to_device(inv_freq_.data(), rope.inv_freq().data(), rope.inv_freq().size() * sizeof(float));
  rope_table_.reserve(static_cast<size_t>(std::max<int64_t>(table_positions, 1) * d) * sizeof(float));

  constexpr int64_t kChunk = 4096;  // positions per upload
  std::vector<float> host(static_cast<size_t>(std::min(table_positions, kChunk) * d));
  for (int64_t start = 0; start < table_positions; start += kChunk) {
    const int64_t n = std::min(kChunk, table_positions - start);
    ThreadPool::global().parallel_for(n, [&](int64_t i) {
      float* row = host.data() + i * d;
      std::fill(row, row + half, 1.0f);
      std::fill(row + half, row + d, 0.0f);
      rope.apply(row, 1, start + i);
    });
    kcu::copy_to_device(rope_table_.as<float>() + start * d, host.data(), static_cast<size_t>(n * d) * sizeof(float));
  }
}

uint64_t CudaModel::workspace_bytes() const {
  return ws_->bytes() + rope_table_.size() + inv_freq_.size() + linear_->workspace_bytes();
}

const char* CudaModel::linear_kernel_name() const { return linear_->name(); }

int CudaModel::num_fused_gate_up() const {
  return static_cast<int>(
      std::count_if(layers_.begin(), layers_.end(), [](const Layer& l) { return l.gate_up.data != nullptr; }));
}

void CudaModel::set_attention_backends(attn::AttentionBackend* prefill, attn::AttentionBackend* decode) {
  check_attention_backends(prefill, decode, device());
  prefill_backend_ = prefill;
  decode_backend_ = decode;
  if (!kv_caches_.empty()) bind_kv_caches(std::vector<attn::LayerKvCache>(kv_caches_));
}

void CudaModel::bind_kv_caches(std::span<const attn::LayerKvCache> caches) {
  check_kv_caches(caches, config_.num_hidden_layers, device());
  CUDA_CHECK(cudaSetDevice(device_));
  kv_caches_.assign(caches.begin(), caches.end());
  if (prefill_backend_ != nullptr) prefill_backend_->bind_kv_caches(kv_caches_);
  if (decode_backend_ != nullptr && decode_backend_ != prefill_backend_) {
    decode_backend_->bind_kv_caches(kv_caches_);
  }
}

void CudaModel::ensure_workspace(int64_t t, int64_t n) {
  const ModelConfig& c = config_;
  Workspace& w = *ws_;
  const int64_t h = c.hidden_size, qs = c.q_size(), ks = c.kv_size(), im = c.intermediate_size;
  grow_f32(w.hidden, t * h);
  grow_f32(w.normed, t * h);
  grow_f32(w.q, t * qs);
  grow_f32(w.k, t * ks);
  grow_f32(w.v, t * ks);
  grow_f32(w.attn, t * qs);
  grow_f32(w.proj, t * h);
  grow_f32(w.gate_up, t * 2 * im);
  grow_f32(w.act, t * im);
  grow_f32(w.final_rows, n * h);
  grow_f32(w.logits, n * c.vocab_size);
  w.step.reserve(static_cast<size_t>(t * 8 + n * 8 + t * 4));
  if (has_16bit_weights_) {  // conversion scratch: the layers' products (inputs H, Q or I wide;
                             // outputs up to 2I), then the LM head's
    linear_->reserve(t, std::max({h, qs, im}), std::max({qs, ks, h, 2 * im}));
    linear_->reserve(n, h, c.vocab_size);
  }
}

void CudaModel::rms_norm(const float* x, float* out, int64_t rows, int64_t cols, const Norm& weight,
                         const int64_t* row_index) {
  kcu::launch_rms_norm(x, cols, row_index, out, cols, rows, cols, weight.data, weight.type,
                       static_cast<float>(config_.rms_norm_eps), stream_);
}

void CudaModel::forward(std::span<const int32_t> token_ids, const attn::BatchMetadata& batch,
                        std::span<const int64_t> logit_rows, float* logits) {
  const ModelConfig& c = config_;
  const int64_t t = static_cast<int64_t>(token_ids.size());
  const bool any_prefill = check_forward_step(t, batch, logit_rows, positions_);
  for (size_t i = 0; i < token_ids.size(); ++i) {
    SPINDLE_CHECK(token_ids[i] >= 0 && token_ids[i] < c.vocab_size,
                  "token id {} at position {} is outside the vocabulary [0, {})", token_ids[i], i, c.vocab_size);
  }
  if (t == 0) return;
  attn::AttentionBackend* backend = any_prefill ? prefill_backend_ : decode_backend_;
  SPINDLE_CHECK(backend != nullptr, "forward: no attention backend set (set_attention_backends)");
  SPINDLE_CHECK(static_cast<int>(kv_caches_.size()) == c.num_hidden_layers,
                "forward: no KV caches bound (bind_kv_caches)");

  CUDA_CHECK(cudaSetDevice(device_));
  const int64_t n = static_cast<int64_t>(logit_rows.size());
  ensure_workspace(t, n);
  Workspace& w = *ws_;
  const int64_t h = c.hidden_size;

  // One upload of the step's metadata: positions [t] i64, logit rows [n] i64, token ids [t] i32.
  const size_t positions_bytes = static_cast<size_t>(t) * sizeof(int64_t);
  const size_t rows_bytes = static_cast<size_t>(n) * sizeof(int64_t);
  const size_t ids_bytes = static_cast<size_t>(t) * sizeof(int32_t);
  staging_.resize(positions_bytes + rows_bytes + ids_bytes);
  std::memcpy(staging_.data(), positions_.data(), positions_bytes);
  if (n > 0) std::memcpy(staging_.data() + positions_bytes, logit_rows.data(), rows_bytes);
  std::memcpy(staging_.data() + positions_bytes + rows_bytes, token_ids.data(), ids_bytes);
  // Pageable source: returns once staging_ has been read, so it may be reused right away.
  CUDA_CHECK(cudaMemcpyAsync(w.step.data(), staging_.data(), staging_.size(), cudaMemcpyHostToDevice, stream_));
  const int64_t* positions = w.step.as<int64_t>();
  const int64_t* rows = positions + t;
  const auto* ids = reinterpret_cast<const int32_t*>(rows + n);

  kcu::launch_embedding_gather(embed_.data, embed_.type, h, ids, t, w.hidden.as<float>(), stream_);
  backend->prepare(batch);
  for (int i = 0; i < c.num_hidden_layers; ++i) run_layer(i, t, *backend);

  if (n > 0) {
    rms_norm(w.hidden.as<float>(), w.final_rows.as<float>(), n, h, final_norm_, rows);
    linear_->forward(lm_head_, w.final_rows.as<float>(), n, w.logits.as<float>());
    CUDA_CHECK(cudaMemcpyAsync(logits, w.logits.data(), static_cast<size_t>(n * c.vocab_size) * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaModel::run_layer(int index, int64_t t, attn::AttentionBackend& backend) {
  const ModelConfig& c = config_;
  const Layer& l = layers_[static_cast<size_t>(index)];
  Workspace& w = *ws_;
  const int64_t h = c.hidden_size, qs = c.q_size(), ks = c.kv_size(), im = c.intermediate_size;
  const int64_t d = c.head_dim;
  float* hidden = w.hidden.as<float>();
  float* normed = w.normed.as<float>();
  float* q = w.q.as<float>();
  float* k = w.k.as<float>();
  float* v = w.v.as<float>();
  float* attn_out = w.attn.as<float>();
  float* proj = w.proj.as<float>();
  float* gate_up = w.gate_up.as<float>();
  float* act = w.act.as<float>();

  // Products that read `x`, converting it once per weight dtype.
  auto project = [&](kcu::CublasLinear::Input& in, const float* x, const kcu::DeviceWeight& weight, float* y,
                     const float* bias) {
    if (in.x != x || in.dtype != weight.dtype || in.cols != weight.in_features) {
      in = linear_->prepare(x, t, weight.in_features, weight.dtype);
    }
    linear_->forward(weight, in, y, bias);
  };

  // Attention block.
  rms_norm(hidden, normed, t, h, l.input_norm);
  {
    kcu::CublasLinear::Input in;  // normed, for q, k and v
    project(in, normed, l.q, q, l.q_bias);
    project(in, normed, l.k, k, l.k_bias);
    project(in, normed, l.v, v, l.v_bias);
  }
  if (c.qk_norm) {
    rms_norm(q, q, t * c.num_attention_heads, d, l.q_norm);
    rms_norm(k, k, t * c.num_key_value_heads, d, l.k_norm);
  }
  kcu::launch_rope(q, k, t, c.num_attention_heads, c.num_key_value_heads, c.head_dim, w.step.as<int64_t>(),
                   rope_table_.as<float>(), rope_positions_, inv_freq_.as<float>(), stream_);
  backend.forward(index, {q, t, qs}, {k, t, ks}, {v, t, ks}, {attn_out, t, qs});
  linear_->forward(l.o, attn_out, t, proj);
  kcu::launch_add_inplace(hidden, proj, t * h, stream_);

  // MLP block.
  rms_norm(hidden, normed, t, h, l.post_norm);
  if (l.gate_up.data != nullptr) {
    linear_->forward(l.gate_up, normed, t, gate_up);
    kcu::launch_silu_mul(gate_up, gate_up + im, 2 * im, act, t, im, stream_);
  } else {
    kcu::CublasLinear::Input in;  // normed, for gate and up
    project(in, normed, l.gate, gate_up, nullptr);
    project(in, normed, l.up, gate_up + t * im, nullptr);
    kcu::launch_silu_mul(gate_up, gate_up + t * im, im, act, t, im, stream_);
  }
  linear_->forward(l.down, act, t, proj);
  kcu::launch_add_inplace(hidden, proj, t * h, stream_);
}

}  // namespace spindle
