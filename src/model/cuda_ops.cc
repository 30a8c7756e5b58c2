#include "model/cuda_ops.h"

#include "model/gguf_model_config.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemv16.h"
#include "model/model_files.h"
#include "model/safetensors.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle {

namespace kc = kernels::cpu;
namespace kcu = kernels::cuda;

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

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t free_device_bytes() {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

}  // namespace

CudaOps::CudaOps(const ModelConfig& config, const CudaModelOptions& options)
    : config_(config),
      device_(options.device),
      fp8_prefill_kernel_(options.fp8_prefill_kernel),
      fp8_prefill_cache_dir_(options.fp8_prefill_cache_dir),
      cache_fingerprint_(options.cache_fingerprint) {
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaStreamCreate(&stream_));
  try {
    linear_ = std::make_unique<kcu::CublasLinear>(stream_, options.allow_16bit_activations);
    fp8_linear_ = std::make_unique<kcu::Fp8Linear>(*linear_, stream_);
    upload_rope(rope_table_positions(config_, options.rope_table_positions));
  } catch (...) {
    fp8_linear_.reset();
    linear_.reset();
    cudaStreamDestroy(stream_);
    throw;
  }
}

CudaOps::~CudaOps() {
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);  // no throw from a destructor
  cudaStreamSynchronize(stream_);
  fp8_linear_.reset();
  linear_.reset();
  cudaStreamDestroy(stream_);
}

WeightId CudaOps::place(std::span<const WeightView> parts, WeightUse use) {
  SPINDLE_CHECK(!parts.empty(), "place: no tensor");
  const WeightView& first = parts.front();
  // GGUF block types run on the CPU only (the GPU path of quantized weights is the FP8 issue's).
  for (const WeightView& t : parts) {
    SPINDLE_CHECK(!t.quantized(), "{} is {}; the CUDA path computes F32, F16 and BF16 weights only (serve this "
                  "file on the CPU: --device cpu)", t.where(), t.type_name());
  }
  Placed p;
  p.use = use;
  switch (use) {
    case WeightUse::kVector:
      p.type = weight_type(first.dtype);
      p.parts.push_back(first.bytes);
      break;
    case WeightUse::kBias:  // parts side by side (the joined q/k/v bias)
      for (const WeightView& t : parts) {
        const std::vector<float> b = weight_to_f32(t);
        p.bias.insert(p.bias.end(), b.begin(), b.end());
      }
      p.parts.push_back(std::as_bytes(std::span<const float>(p.bias)));
      break;
    case WeightUse::kLinear: {
      if (first.dtype == DType::kF8E4M3) {
        if (!place_fp8(parts, p)) return kNoWeight;
        break;
      }
      int64_t rows = 0;
      for (const WeightView& t : parts) {
        if (t.dtype != first.dtype) return kNoWeight;  // joined parts share one dtype
        rows += t.shape.front();
        p.parts.push_back(t.bytes);
      }
      weight_type(first.dtype);  // throws for anything but F32, BF16, F16
      p.weight = {nullptr, first.dtype, rows, first.shape.back()};
      has_16bit_weights_ = has_16bit_weights_ || first.dtype != DType::kF32;
      break;
    }
  }
  // A single tensor placed before (a tied LM head) shares its slot.
  const auto seen = parts.size() == 1 && use != WeightUse::kBias ? slot_of_.find(first.bytes.data()) : slot_of_.end();
  if (seen != slot_of_.end()) {
    p.offset = seen->second;
    p.shares_slot = true;
  } else {
    size_t bytes = 0;
    for (const auto& part : p.parts) bytes += part.size();
    p.offset = cursor_;
    cursor_ += (bytes + kWeightAlign - 1) / kWeightAlign * kWeightAlign;
    weight_bytes_ += bytes;
    if (parts.size() == 1 && use != WeightUse::kBias) slot_of_[first.bytes.data()] = p.offset;
  }
  placed_.push_back(std::move(p));
  return static_cast<WeightId>(placed_.size()) - 1;
}

LinearGroup CudaOps::place_group(LinearGroupKind /*kind*/, std::span<const WeightView> weights,
                                 std::span<const WeightView> biases) {
  const LinearGroup joined = place_joined(weights, biases);
  return joined.joined != kNoWeight ? joined : place_each(weights, biases);
}

void CudaOps::finish_loading() {
  std::optional<DType> linear_dtype;
  bool one_dtype = true;
  for (const Placed& p : placed_) {
    if (p.use != WeightUse::kLinear) continue;
    if (linear_dtype && *linear_dtype != p.weight.dtype) one_dtype = false;
    linear_dtype = p.weight.dtype;
  }
  linear16_dtype_ = one_dtype && linear_dtype && *linear_dtype != DType::kF32 && *linear_dtype != DType::kF8E4M3
                        ? *linear_dtype
                        : DType::kF32;
  weights_.reserve(std::max<size_t>(cursor_, 1));
  auto* base = weights_.as<std::byte>();
  for (Placed& p : placed_) {
    std::byte* dst = base + p.offset;
    if (!p.shares_slot) {
      for (const auto& part : p.parts) {
        CUDA_CHECK(cudaMemcpy(dst, part.data(), part.size(), cudaMemcpyHostToDevice));
        dst += part.size();
      }
    }
    p.data = base + p.offset;
    p.weight.data = p.data;
    p.parts.clear();
    p.bias = {};
  }
  slot_of_.clear();
  finish_fp8();
  CUDA_CHECK(cudaDeviceSynchronize());
}

const CudaOps::Placed& CudaOps::placed(WeightId id) const {
  SPINDLE_CHECK(id >= 0 && id < static_cast<WeightId>(placed_.size()), "weight {} was not placed", id);
  return placed_[static_cast<size_t>(id)];
}

void CudaOps::upload_rope(int64_t table_positions) {
  // A RopeTable without a table computes every position on the fly with the arithmetic that
  // fills the CPU table; rotating [1, .., 1, 0, .., 0] by position p yields exactly
  // [cos(p f_i) .., sin(p f_i) ..].
  const kc::RopeTable rope(rope_params(config_), 0);  // copies below: synchronous, then ordered before stream_
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

uint64_t CudaOps::workspace_bytes() const {
  uint64_t n = rope_table_.size() + inv_freq_.size() + linear_->workspace_bytes() + fp8_linear_->workspace_bytes() + batch_.device_bytes() +
               sampler_.device_bytes() + graph_stats_.memory_bytes;
  for (const auto& [name, product] : fp8_prefill_) n += product->workspace_bytes();
  for (const auto& b : scratch_) n += b.size();
  return n + moe_workspace_bytes();
}

const kcu::DeviceBatch* CudaOps::upload(const StepBatch& batch, int page_size, int plan_kv_len) {
  CUDA_CHECK(cudaSetDevice(device_));
  batch_.upload(batch, page_size, stream_, plan_kv_len);
  return &batch_;
}

void CudaOps::reserve(int64_t t, int64_t n) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, qs = c.q_size(), ks = c.kv_size(), im = c.intermediate_size;
  auto buffer = [&](Scratch s) -> kcu::DeviceBuffer& { return scratch_[static_cast<int>(s)]; };
  grow_f32(buffer(Scratch::kHidden), t * h);
  grow_f32(buffer(Scratch::kNormed), t * h);
  grow_f32(buffer(Scratch::kQ), t * qs);
  grow_f32(buffer(Scratch::kK), t * ks);
  grow_f32(buffer(Scratch::kV), t * ks);
  grow_f32(buffer(Scratch::kAttention), t * qs);
  grow_f32(buffer(Scratch::kProjection), t * h);
  grow_f32(buffer(Scratch::kGateUp), t * 2 * im);
  grow_f32(buffer(Scratch::kActivation), t * im);
  grow_f32(buffer(Scratch::kQKV), t * (qs + 2 * ks));
  grow_f32(buffer(Scratch::kFinalRows), n * h);
  grow_f32(buffer(Scratch::kLogits), n * c.vocab_size);
  if (has_16bit_weights_) {  // conversion scratch: the layers' products (inputs H, Q or I wide;
                             // outputs up to 2I), then the LM head's
    linear_->reserve(t, std::max({h, qs, im}), std::max({qs + 2 * ks, h, 2 * im}));
    linear_->reserve(n, h, c.vocab_size);
  }
  for (auto& [name, product] : fp8_prefill_) product->reserve(t, fp8_max_in_, fp8_max_out_, fp8_max_elements_, fp8_has_block_);
  reserve_moe(t);
}

void CudaOps::finish_step(float* host, int64_t count) {
  if (host == nullptr) return;  // the logits stay on the device for sample(), which waits
  if (count > 0) {
    CUDA_CHECK(cudaMemcpyAsync(host, scratch(Scratch::kLogits), static_cast<size_t>(count) * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaOps::read_final_rows(float* host, int64_t count) {
  const size_t have = scratch_[static_cast<int>(Scratch::kFinalRows)].size() / sizeof(float);
  SPINDLE_CHECK(count >= 0 && static_cast<size_t>(count) <= have, "read_final_rows: {} floats of {}", count, have);
  if (count == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host, scratch(Scratch::kFinalRows), static_cast<size_t>(count) * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaOps::queue_sample(const SamplingBatch& batch) {
  const size_t have = scratch_[static_cast<int>(Scratch::kLogits)].size() / sizeof(float);
  SPINDLE_CHECK(batch.rows.size() * static_cast<size_t>(config_.vocab_size) <= have,
                "sample: {} rows asked for, the last step's logits hold fewer", batch.rows.size());
  sampler_.queue(scratch(Scratch::kLogits), config_.vocab_size, batch, stream_);
}

void CudaOps::take_pending_tokens(std::span<const PendingToken> tokens) {
  if (tokens.empty()) return;
  SPINDLE_CHECK(sampler_.last_results() != nullptr, "pending tokens: no sampling is queued to take them from");
  const int rows = batch_.step().num_tokens, sources = sampler_.last_num_rows();
  for (const PendingToken& t : tokens) {
    SPINDLE_CHECK(t.row >= 0 && t.row < rows && t.source >= 0 && t.source < sources,
                  "pending token: query row {} of {} from sampled row {} of {}", t.row, rows, t.source, sources);
  }
  kcu::copy_sampled_tokens(batch_.token_ids(), sampler_.last_results(), tokens.data(), tokens.size(), stream_);
}

void CudaOps::run_forward(int64_t graph_key, const std::function<void()>& work, std::string& capture_failure) {
  if (graph_key < 0) {
    work();
    return;
  }
  if (replay_graph(graph_key)) return;  // the graph wrote the logits
  work();
  begin_capture();  // record the same work for the next step of this key
  try {
    work();
  } catch (const std::exception& e) {
    abort_capture();
    capture_failure = e.what();
    return;
  }
  if (end_capture(graph_key, &capture_failure)) capture_failure.clear();
}

bool CudaOps::replay_graph(int64_t key) {
  const auto it = graphs_.find(key);
  if (it == graphs_.end()) return false;
  if (it->second.epoch != kcu::reallocation_epoch()) {  // a buffer it points into moved
    CUDA_CHECK(cudaGraphExecDestroy(it->second.exec));
    graphs_.erase(it);
    graph_stats_.captured = static_cast<int>(graphs_.size());
    return false;
  }
  CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream_));
  ++graph_stats_.replays;
  return true;
}

void CudaOps::begin_capture() {
  free_before_capture_ = free_device_bytes();
  capture_started_ = now_seconds();
  epoch_at_capture_ = kcu::reallocation_epoch();
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
}

void CudaOps::abort_capture() {
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
  (void)cudaGetLastError();
}

void CudaOps::release_graphs() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // no replay in flight
  for (auto& [key, g] : graphs_) CUDA_CHECK(cudaGraphExecDestroy(g.exec));
  graphs_.clear();
  graph_stats_.captured = 0;  // memory_bytes kept (device_ops.h)
}

bool CudaOps::end_capture(int64_t key, std::string* why) {
  const uint64_t epoch = kcu::reallocation_epoch();
  cudaGraph_t graph = nullptr;
  cudaError_t status = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  const bool grew = epoch != epoch_at_capture_;  // nodes recorded before the growth point at freed memory
  if (status == cudaSuccess && !grew) status = cudaGraphInstantiate(&exec, graph, 0);
  if (graph != nullptr) cudaGraphDestroy(graph);
  (void)cudaGetLastError();  // a failed capture's error is not sticky: clear it
  if (status != cudaSuccess || grew) {
    if (why != nullptr) *why = grew ? "a device buffer was reallocated during the capture" : cudaGetErrorString(status);
    return false;
  }
  Graph& g = graphs_[key];
  if (g.exec != nullptr) CUDA_CHECK(cudaGraphExecDestroy(g.exec));
  g.exec = exec;
  g.epoch = epoch;
  ++graph_stats_.captures;
  graph_stats_.captured = static_cast<int>(graphs_.size());
  graph_stats_.capture_seconds += now_seconds() - capture_started_;
  const uint64_t free_after = free_device_bytes();
  if (free_before_capture_ > free_after) graph_stats_.memory_bytes += free_before_capture_ - free_after;
  return true;
}

kcu::Out16 CudaOps::out16_for(const float* out, int64_t rows, int64_t cols, int slot) {
  ready16_ = {};
  if (linear16_dtype_ == DType::kF32) return {};
  if (out != scratch(Scratch::kNormed) && out != scratch(Scratch::kFinalRows) && out != scratch(Scratch::kActivation)) {
    return {};
  }
  void* target = linear_->input16_target(rows, cols, slot);
  if (target == nullptr) return {};
  ready16_ = {out, rows, cols, target};
  return {target, linear16_dtype_ == DType::kBF16};
}

void CudaOps::embed(WeightId table, const TokenId* ids, int64_t num_ids, int64_t hidden, float* out) {
  ready16_ = {};
  const Placed& p = placed(table);
  kcu::launch_embedding_gather(p.data, p.type, hidden, ids, num_ids, out, stream_);
}

void CudaOps::rms_norm(const float* x, float* out, int64_t rows, int64_t cols, WeightId w, const int64_t* row_index) {
  const Placed& p = placed(w);
  kcu::launch_rms_norm(x, cols, row_index, out, cols, rows, cols, p.data, p.type,
                       static_cast<float>(config_.rms_norm_eps), stream_, out16_for(out, rows, cols));
}

void CudaOps::add_rms_norm(float* hidden, const float* delta, float* out, int64_t rows, int64_t cols, WeightId w) {
  const Placed& p = placed(w);
  kcu::launch_add_rms_norm(hidden, delta, out, rows, cols, p.data, p.type, static_cast<float>(config_.rms_norm_eps),
                           stream_, out16_for(out, rows, cols));
}

namespace {

kcu::KvPagesOut kv_pages_out(const attn::KvWriteTarget& kv) {
  kcu::KvPagesOut pages;
  if (!kv) return pages;
  pages.k_pages = kv.k_pages;
  pages.v_pages = kv.v_pages;
  pages.slots = kv.slots;
  switch (kv.dtype) {
    case DType::kF32:
      pages.kv_type = kcu::KvPagesOut::kF32;
      break;
    case DType::kBF16:
      pages.kv_type = kcu::KvPagesOut::kBF16;
      break;
    case DType::kF16:
      pages.kv_type = kcu::KvPagesOut::kF16;
      break;
    default:
      SPINDLE_FAIL("split_qkv_rope: KV pages of dtype {} are not supported", dtype_name(kv.dtype));
  }
  return pages;
}

}  // namespace

void CudaOps::split_qkv_rope(const float* qkv, float* q, float* k, float* v, int64_t rows, int num_heads,
                             int num_kv_heads, WeightId q_norm, WeightId k_norm, const int64_t* positions,
                             const attn::KvWriteTarget& kv) {
  ready16_ = {};
  const void* qn = q_norm == kNoWeight ? nullptr : placed(q_norm).data;
  const void* kn = k_norm == kNoWeight ? nullptr : placed(k_norm).data;
  const kcu::WeightType type = q_norm == kNoWeight ? kcu::WeightType::kF32 : placed(q_norm).type;
  SPINDLE_CHECK(q_norm == kNoWeight || k_norm == kNoWeight || placed(k_norm).type == type,
                "split_qkv_rope: q_norm and k_norm have different dtypes");
  kcu::launch_split_qkv_norm_rope(qkv, q, k, v, rows, num_heads, num_kv_heads, config_.head_dim, qn, kn, type,
                                  static_cast<float>(config_.rms_norm_eps), positions, rope_table_.as<float>(),
                                  rope_positions_, inv_freq_.as<float>(), stream_, kv_pages_out(kv));
}

void CudaOps::linear_split_qkv_rope(const float* x, int64_t rows, const Product& qkv_product, float* q, float* k,
                                    float* v, int num_heads, int num_kv_heads, WeightId q_norm, WeightId k_norm,
                                    const int64_t* positions, const attn::KvWriteTarget& kv) {
  const kcu::DeviceWeight& w = placed(qkv_product.weight).weight;
  const int d = config_.head_dim;
  // (FP8: its product through linear(), then the split; gemv16 reads 16-bit weights only.)
  if (w.dtype == DType::kF8E4M3 || q_norm != kNoWeight || k_norm != kNoWeight ||
      rows > kcu::gemv16_fused_use_max_rows() || w.out_features != int64_t{num_heads + 2 * num_kv_heads} * d ||
      !linear_->gemv16_takes(w, rows)) {
    linear(x, rows, {&qkv_product, 1});
    split_qkv_rope(qkv_product.y, q, k, v, rows, num_heads, num_kv_heads, q_norm, k_norm, positions, kv);
    return;
  }
  const kcu::CublasLinear::Input in = input_for(x, rows, w);
  const float* bias =
      qkv_product.bias == kNoWeight ? nullptr : static_cast<const float*>(placed(qkv_product.bias).data);
  ready16_ = {};
  if (in.split || !kcu::gemv16_qkv_rope_supports(rows, in.cols, w.data, in.converted, d)) {
    linear_->forward(w, in, qkv_product.y, bias);
    split_qkv_rope(qkv_product.y, q, k, v, rows, num_heads, num_kv_heads, q_norm, k_norm, positions, kv);
    return;
  }
  kcu::QkvRopeParams p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.num_heads = num_heads;
  p.num_kv_heads = num_kv_heads;
  p.head_dim = d;
  p.positions = positions;
  p.table = rope_table_.as<float>();
  p.table_positions = rope_positions_;
  p.inv_freq = inv_freq_.as<float>();
  p.kv = kv_pages_out(kv);
  kcu::launch_gemv16_qkv_rope(w.data, in.converted, rows, in.cols, w.dtype == DType::kBF16, bias, p, stream_);
}

bool CudaOps::attention_input(const AttentionInput& in, attn::AttentionBackend& attention, int layer) {
  const LinearGroup& g = *in.qkv;
  if (g.joined == kNoWeight) return LayerMath::attention_input(in, attention, layer);  // q/k/v dtypes differ
  const Product qkv{g.joined, scratch(Scratch::kQKV), g.joined_bias};
  const attn::KvWriteTarget kv = attention.kv_write_target(layer);
  linear_split_qkv_rope(in.x, in.rows, qkv, in.q, in.k, in.v, in.num_heads, in.num_kv_heads, in.q_norm, in.k_norm,
                        in.positions, kv);
  return static_cast<bool>(kv);
}

void CudaOps::attend(attn::AttentionBackend& attention, int layer, attn::ConstTensor q, attn::ConstTensor k,
                     attn::ConstTensor v, attn::Tensor out, bool kv_written) {
  // The backend may round its output to 16 bits for the output projection as it writes it.
  const attn::OutputCopy copy = attention_output_copy(out.data, out.rows, out.cols);
  const bool copied = copy && attention.request_output_copy(copy);
  attention.forward(layer, q, k, v, out, kv_written);
  if (copied) attention_output_copied(out.data, out.rows, out.cols, copy);
}

attn::OutputCopy CudaOps::attention_output_copy(const float* /*out*/, int64_t rows, int64_t cols) {
  if (linear16_dtype_ == DType::kF32) return {};
  return {linear_->input16_target(rows, cols, 0), linear16_dtype_};
}

void CudaOps::attention_output_copied(const float* out, int64_t rows, int64_t cols, const attn::OutputCopy& copy) {
  SPINDLE_CHECK(copy.data == linear_->input16_target(rows, cols, 0) && copy.dtype == linear16_dtype_,
                "attention_output_copied: not the copy attention_output_copy offered");
  ready16_ = {out, rows, cols, copy.data};
}

void CudaOps::add(float* y, const float* x, int64_t rows, int64_t cols) {
  ready16_ = {};
  kcu::launch_add_inplace(y, x, rows * cols, stream_);
}

kcu::CublasLinear::Input CudaOps::input_for(const float* x, int64_t rows, const kcu::DeviceWeight& w) {
  if (ready16_.x == x && ready16_.rows == rows && ready16_.cols == w.in_features && w.dtype == linear16_dtype_) {
    return linear_->adopt(x, rows, w.in_features, w.dtype, ready16_.target);  // its producer wrote the copy
  }
  ready16_ = {};
  return linear_->prepare(x, rows, w.in_features, w.dtype);
}

void CudaOps::linear(const float* x, int64_t rows, std::span<const Product> products) {
  kcu::CublasLinear::Input in;  // x converted once per weight dtype and width
  for (const Product& p : products) {
    const Placed& placed_weight = placed(p.weight);
    const kcu::DeviceWeight& w = placed_weight.weight;
    const float* bias = p.bias == kNoWeight ? nullptr : static_cast<const float*>(placed(p.bias).data);
    // FP8: up to kFp8StreamMaxRows rows the streaming decode products of fp8_linear_ (gemv_fp8,
    // gemv_fp8_mma); above, the prefill entry chosen for the shape (or fp8_linear_'s W8A16 path).
    if (w.dtype == DType::kF8E4M3 && rows > kcu::kFp8StreamMaxRows && placed_weight.fp8_prefill != nullptr) {
      placed_weight.fp8_prefill->forward(placed_weight.fp8, x, rows, p.y, bias);  // f32 x, its own quantization
      continue;
    }
    if (w.dtype == DType::kF8E4M3) {  // bf16 activations for the FP8 product (split or rounded)
      if (in.x != x || in.dtype != DType::kBF16 || in.cols != w.in_features) {
        ready16_ = {};
        in = linear_->prepare(x, rows, w.in_features, DType::kBF16);
      }
      fp8_linear_->forward(placed_weight.fp8, in, p.y, bias);
      continue;
    }
    if (in.x != x || in.dtype != w.dtype || in.cols != w.in_features) in = input_for(x, rows, w);
    linear_->forward(w, in, p.y, bias);
  }
}

void CudaOps::swiglu(const float* x, int64_t rows, const LinearGroup& gate_up, float* gate_up_scratch, float* act,
                     int64_t im) {
  if (gate_up.joined == kNoWeight) {  // gate and up of different dtypes
    LayerMath::swiglu(x, rows, gate_up, gate_up_scratch, act, im);
    return;
  }
  linear_swiglu(x, rows, gate_up.joined, gate_up_scratch, act, im);
}

void CudaOps::linear_swiglu(const float* x, int64_t rows, WeightId gate_up_weight, float* gate_up, float* act,
                            int64_t im) {
  const kcu::DeviceWeight& w = placed(gate_up_weight).weight;
  if (w.dtype == DType::kF8E4M3) {  // the joined FP8 product (fp8_linear_ or its prefill entry), then SwiGLU
    const Product product{gate_up_weight, gate_up, kNoWeight};
    linear(x, rows, {&product, 1});
    silu_mul(gate_up, gate_up + im, 2 * im, act, rows, im);
    return;
  }
  const kcu::CublasLinear::Input in = input_for(x, rows, w);
  // (When forward_swiglu declines, silu_mul below sets the copy's target again.)
  if (w.out_features == 2 * im && linear_->forward_swiglu(w, in, act, out16_for(act, rows, im, /*slot=*/1))) return;
  linear_->forward(w, in, gate_up, nullptr);
  silu_mul(gate_up, gate_up + im, 2 * im, act, rows, im);
}

void CudaOps::qk_norm_rope(float* q, float* k, int64_t rows, int num_heads, int num_kv_heads, WeightId q_norm,
                           WeightId k_norm, const int64_t* positions) {
  ready16_ = {};
  const int d = config_.head_dim;
  if (q_norm != kNoWeight) {
    rms_norm(q, q, rows * num_heads, d, q_norm);
    rms_norm(k, k, rows * num_kv_heads, d, k_norm);
  }
  kcu::launch_rope(q, k, rows, num_heads, num_kv_heads, d, positions, rope_table_.as<float>(), rope_positions_,
                   inv_freq_.as<float>(), stream_);
}

void CudaOps::silu_mul(const float* gate, const float* up, int64_t stride, float* out, int64_t rows, int64_t cols) {
  kcu::launch_silu_mul(gate, up, stride, out, rows, cols, stream_, out16_for(out, rows, cols));
}

std::unique_ptr<Transformer> load_cuda_model(const std::filesystem::path& dir, const CudaModelOptions& options) {
  // A GGUF file: its block types run on the CPU only (the GPU path of quantized weights is the FP8 issue's).
  SPINDLE_CHECK(!is_gguf_path(dir), "{}: GGUF files are served on the CPU only; run without --device cuda "
                "(or serve the Hugging Face folder of this model on the GPU)", dir.string());
  ModelFiles files = open_model_files(dir, FileMemory::kMapped, options.quantize_fp8);  // the folder's problems first, as load_cpu_model reports them
  check_cuda_moe_weights(files.config, *files.weights);  // BF16, F16 or F32 experts

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

  auto model = std::make_unique<Transformer>(files.config, std::make_unique<CudaOps>(files.config, options),
                                             *files.weights);
  files.weights.reset();  // unmapped: everything the forward reads is on the device
  return model;
}

}  // namespace spindle
