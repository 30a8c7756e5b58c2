#include "model/cpu_ops.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "gguf/dequantize.h"
#include "kernels/cpu/fp8_linear.h"
#include "gguf/quantize_q8_0.h"
#include "kernels/cpu/paged_attention.h"
#include "model/model_files.h"
#include "model/safetensors.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle {

namespace kc = kernels::cpu;

namespace {

// Elements of work below which an op runs on the calling thread.
constexpr int64_t kMinParallelWork = 1 << 15;

bool is_plain_float(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

// The int8 kernels' type of a block-typed weight; throws naming the type, tensor and file when
// there is no CPU kernel for it.
kc::QuantType cpu_quant_type(const WeightView& w) {
  switch (*w.block) {
    case gguf::GgmlType::kQ8_0: return kc::QuantType::kQ8_0;
    case gguf::GgmlType::kQ4_0: return kc::QuantType::kQ4_0;
    case gguf::GgmlType::kQ5_0: return kc::QuantType::kQ5_0;
    case gguf::GgmlType::kQ5_1: return kc::QuantType::kQ5_1;
    case gguf::GgmlType::kQ4_K: return kc::QuantType::kQ4_K;
    case gguf::GgmlType::kQ5_K: return kc::QuantType::kQ5_K;
    case gguf::GgmlType::kQ6_K: return kc::QuantType::kQ6_K;
    default: break;
  }
  SPINDLE_FAIL("{} is {}; the CPU linear kernels compute F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weights",
               w.where(), w.type_name());
}

// Throws naming the tensor and file for a linear weight the CPU cannot compute.
void check_linear_type(const WeightView& w) {
  if (w.dtype == DType::kF8E4M3 && !w.quantized()) {
    SPINDLE_CHECK(w.scale.has_value(), "{} is FP8 without a scale", w.where());
    return;
  }
  if (w.quantized()) {
    cpu_quant_type(w);
    return;
  }
  SPINDLE_CHECK(is_plain_float(w.dtype),
                "{} is {}; the CPU linear kernels take F32, F16 or BF16 weights (convert the checkpoint, e.g. save "
                "it with torch_dtype=bfloat16)", w.where(), w.type_name());
}

// An FP8 weight (its scales as f32 in `scales`) as the FP8 kernel's descriptor.
kc::Fp8LinearWeight fp8_linear_weight(const WeightView& w, const std::vector<float>& scales) {
  const kc::Fp8ScaleLayout layout = w.scale->mode == Fp8ScaleMode::kPerTensor    ? kc::Fp8ScaleLayout::kPerTensor
                                    : w.scale->mode == Fp8ScaleMode::kPerChannel ? kc::Fp8ScaleLayout::kPerChannel
                                                                                 : kc::Fp8ScaleLayout::kBlock128;
  return {reinterpret_cast<const uint8_t*>(w.bytes.data()), w.rows(), w.cols(), layout, scales.data()};
}

void grow(std::vector<float>& buffer, int64_t size) {
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(static_cast<size_t>(size));
}

}  // namespace

CpuOps::CpuOps(const ModelConfig& config, const ModelOptions& options, std::unique_ptr<WeightSource> weights)
    : config_(config),
      pool_(options.pool ? options.pool : &ThreadPool::global()),
      make_linear_(options.make_linear ? options.make_linear
                                       : [](const kc::LinearWeight& w) { return kc::make_linear_kernel(w); }),
      weights_(std::move(weights)),
      quantization_(options.quantization),
      eps_(static_cast<float>(config.rms_norm_eps)),
      rope_(std::make_unique<kc::RopeTable>(rope_params(config),
                                            rope_table_positions(config, options.rope_table_positions))) {}

CpuOps::~CpuOps() = default;

const char* CpuOps::linear_kernel_name() const {
  for (auto it = placed_.rbegin(); it != placed_.rend(); ++it) {  // the LM head's, placed last
    if (it->linear) return it->linear->name();
  }
  return "none";
}

void CpuOps::count_bytes(const WeightView& t) {
  if (counted_.insert(t.bytes.data()).second) weight_bytes_ += t.bytes.size();
}

CpuOps::Placed CpuOps::place_vector(const WeightView& w) {
  Placed p;
  if (!w.quantized()) {
    SPINDLE_CHECK(is_plain_float(w.dtype), "{} is {}; norm and embedding weights must be F32, F16 or BF16",
                  w.where(), w.type_name());
    p.vector = {w.bytes.data(), w.dtype};
  } else {
    // A block-typed embedding table: rows dequantized at lookup (a norm weight must be plain).
    SPINDLE_CHECK(w.shape.size() == 2 && gguf::can_dequantize(*w.block),
                  "{} is {}; Spindle reads a block type only in an embedding table or a linear weight", w.where(),
                  w.type_name());
    p.table_block = w.block;
    p.table_bytes = w.bytes;
  }
  count_bytes(w);
  return p;
}

// Parts are repacked where they lie, never joined in a temporary first: a copy per expert, freed
// after repacking, left holes in the malloc heap that stayed resident (~84 MiB per layer of the
// Qwen3-30B-A3B shape while the repacked experts came from malloc; tests/model/load_memory_test.cc).
CpuOps::Placed CpuOps::place_converted(std::span<const WeightView> parts) {
  const WeightView& first = parts.front();
  int64_t rows = 0;
  for (const WeightView& t : parts) rows += t.rows();
  Placed p;
  if (first.quantized()) {
    const kc::QuantType type = cpu_quant_type(first);
    std::vector<kc::QuantRows> sources;
    size_t bytes = 0;
    sources.reserve(parts.size());
    for (const WeightView& t : parts) {
      sources.push_back({t.bytes.data(), static_cast<int64_t>(t.bytes.size()), t.rows()});
      bytes += t.bytes.size();
    }
    // Below 2 MiB (a mixture of experts' per-expert weights, small projections) the bytes go to the
    // arena's huge pages; operator new would put them on 4 KiB pages.
    HugePageArena* arena = bytes < kHugePageMinBytes ? &small_weights_ : nullptr;
    p.packed = std::make_unique<kc::PackedQuantWeight>(kc::repack_quant_weight(type, sources, first.cols(), pool_, arena));
    p.linear_weight = kc::LinearWeight::from_quant(*p.packed);
    weight_bytes_ += static_cast<uint64_t>(p.packed->num_bytes());
  } else {  // F16: widened to f32 (the CPU linear kernels read F32 or BF16), part after part
    const int64_t cols = first.cols();
    p.widened.resize(static_cast<size_t>(rows * cols));
    int64_t row = 0;
    for (const WeightView& t : parts) {
      kc::embedding_gather({t.bytes.data(), DType::kF16}, 1, t.rows() * cols, std::vector<int32_t>{0},
                           p.widened.data() + row * cols);
      row += t.rows();
    }
    p.linear_weight = kc::LinearWeight{p.widened.data(), DType::kF32, rows, cols};
    weight_bytes_ += p.widened.size() * sizeof(float);
  }
  for (const WeightView& t : parts) {
    if (t.release) t.release();
  }
  return p;
}

std::vector<CpuOps::QuantizedPart> CpuOps::quantize_parts(std::span<const WeightView> parts) {
  std::vector<QuantizedPart> out;
  if (quantization_ != WeightQuantization::kQ8_0) return out;
  const WeightView& first = parts.front();
  if (first.quantized() || (first.dtype != DType::kF32 && first.dtype != DType::kBF16)) return out;
  if (first.cols() % 32 != 0) {
    spdlog::info("--quantization q8_0: {} stays {} (in_features {} is not a multiple of 32)", first.where(),
                 first.type_name(), first.cols());
    return out;
  }
  out.reserve(parts.size());
  for (const WeightView& t : parts) {
    QuantizedPart& q = out.emplace_back();
    q.blocks.resize(static_cast<size_t>(gguf::q8_0_bytes(t.rows() * t.cols())));
    const int64_t rows = t.rows(), cols = t.cols();
    const size_t row_out = static_cast<size_t>(gguf::q8_0_bytes(cols));
    // Blocks never straddle rows: row ranges quantize independently.
    parallel_rows(rows, cols * 4, [&](int64_t b, int64_t e) {
      const auto n = static_cast<size_t>((e - b) * cols);
      const std::span<std::byte> dst(q.blocks.data() + static_cast<size_t>(b) * row_out, static_cast<size_t>(e - b) * row_out);
      if (t.dtype == DType::kF32) {
        gguf::quantize_row_q8_0({reinterpret_cast<const float*>(t.bytes.data()) + b * cols, n}, dst);
      } else {
        gguf::quantize_row_q8_0({reinterpret_cast<const bf16*>(t.bytes.data()) + b * cols, n}, dst);
      }
    });
    q.view = t;
    q.view.block = gguf::GgmlType::kQ8_0;
    q.view.bytes = q.blocks;
    // The plain source is released after repacking, as a block-typed one is: a GGUF file's mapped
    // pages dropped (a tied LM head's table is the embedding, whose lookups re-read the pages they
    // touch from the file; a huge-page copy has no release), a permuted copy freed.
    q.view.release = t.release;
  }
  return out;
}

WeightId CpuOps::place(std::span<const WeightView> parts, WeightUse use) {
  SPINDLE_CHECK(!parts.empty(), "place: no tensor");
  Placed p;
  const WeightView& first = parts.front();
  switch (use) {
    case WeightUse::kVector:
      SPINDLE_CHECK(parts.size() == 1, "place: a vector weight is one tensor");
      p = place_vector(first);
      break;
    case WeightUse::kBias:
      SPINDLE_CHECK(parts.size() == 1, "place: a bias is one tensor");
      p.bias = weight_to_f32(first);
      weight_bytes_ += p.bias.size() * sizeof(float);
      count_bytes(first);  // (the stored bias too, as the safetensors path always counted it)
      break;
    case WeightUse::kLinear: {
      for (const WeightView& t : parts) check_linear_type(t);
      for (const WeightView& t : parts) {
        // Parts join only in one type (and shape along k).
        if (t.type_name() != first.type_name() || t.cols() != first.cols()) return kNoWeight;
      }
      if (first.dtype == DType::kF8E4M3 && !first.quantized()) {  // W8A16, read in place; parts not joined
        if (parts.size() > 1) return kNoWeight;
        p.fp8_scales = fp8_scales_f32(first);
        p.linear = kc::make_fp8_linear_kernel(fp8_linear_weight(first, p.fp8_scales));
        count_bytes(first);
        weight_bytes_ += p.fp8_scales.size() * sizeof(float);
        break;
      }
      if (std::vector<QuantizedPart> q = quantize_parts(parts); !q.empty()) {
        std::vector<WeightView> views;
        for (const QuantizedPart& part : q) views.push_back(part.view);
        p = place_converted(views);  // repacked as a Q8_0 GGUF weight; `q`'s blocks freed on return
        p.linear = make_linear_(p.linear_weight);
        break;
      }
      if (first.quantized() || first.dtype == DType::kF16) {
        p = place_converted(parts);
        p.linear = make_linear_(p.linear_weight);
        break;
      }
      int64_t rows = 0;
      const std::byte* end = first.bytes.data();
      for (const WeightView& t : parts) {
        // In place, parts join only when they lie back to back in the file (no copy).
        if (t.bytes.data() != end) return kNoWeight;
        end += t.bytes.size();
        rows += t.rows();
      }
      p.linear_weight = kc::LinearWeight{first.bytes.data(), first.dtype, rows, first.cols()};
      p.linear = make_linear_(p.linear_weight);
      for (const WeightView& t : parts) count_bytes(t);
      break;
    }
  }
  placed_.push_back(std::move(p));
  return static_cast<WeightId>(placed_.size()) - 1;
}

LinearGroup CpuOps::place_group(LinearGroupKind kind, std::span<const WeightView> weights,
                                std::span<const WeightView> biases) {
  if (kind == LinearGroupKind::kGateUp) {
    const LinearGroup joined = place_joined(weights, biases);
    if (joined.joined != kNoWeight) return joined;
  }
  return place_each(weights, biases);
}

WeightId CpuOps::place_leading_rows(WeightId linear, int64_t rows) {
  const kc::LinearWeight full = placed(linear).linear_weight;
  // (a repacked or FP8 weight's leading rows: not made yet)
  if (full.quantized() || !placed(linear).fp8_scales.empty()) return kNoWeight;
  SPINDLE_CHECK(full.data != nullptr, "place_leading_rows: weight {} is not a linear weight", linear);
  SPINDLE_CHECK(rows >= 1 && rows <= full.out_features, "place_leading_rows: {} rows of a weight of {}", rows,
                full.out_features);
  Placed p;
  p.linear_weight = full;
  p.linear_weight.out_features = rows;  // row-major [out, in]: the first rows are a prefix of the data
  p.linear = make_linear_(p.linear_weight);
  placed_.push_back(std::move(p));
  return static_cast<WeightId>(placed_.size()) - 1;
}

const CpuOps::Placed& CpuOps::placed(WeightId id) const {
  SPINDLE_CHECK(id >= 0 && id < static_cast<WeightId>(placed_.size()), "weight {} was not placed", id);
  return placed_[static_cast<size_t>(id)];
}

const kernels::cuda::DeviceBatch* CpuOps::upload(const StepBatch& batch, int /*page_size*/, int /*plan_kv_len*/) {
  step_ = batch.view();
  return nullptr;
}

void CpuOps::reserve(int64_t t, int64_t n) {
  const ModelConfig& c = config_;
  auto buffer = [&](Scratch s) -> std::vector<float>& { return scratch_[static_cast<int>(s)]; };
  grow(buffer(Scratch::kHidden), t * c.hidden_size);
  grow(buffer(Scratch::kNormed), t * c.hidden_size);
  grow(buffer(Scratch::kQ), t * c.q_size());
  grow(buffer(Scratch::kK), t * c.kv_size());
  grow(buffer(Scratch::kV), t * c.kv_size());
  grow(buffer(Scratch::kAttention), t * c.q_size());
  grow(buffer(Scratch::kProjection), t * c.hidden_size);
  grow(buffer(Scratch::kGateUp), t * 2 * int64_t{c.intermediate_size});
  grow(buffer(Scratch::kActivation), t * c.intermediate_size);
  grow(buffer(Scratch::kFinalRows), n * c.hidden_size);
  if (c.moe.enabled()) moe_scratch_.reserve(c, t);
}

float* CpuOps::logits_target(float* host) {
  SPINDLE_CHECK(host != nullptr, "forward: cpu cannot keep the logits on the device; give a host buffer");
  return host;
}

void CpuOps::read_final_rows(float* host, int64_t count) {
  const auto& rows = scratch_[static_cast<int>(Scratch::kFinalRows)];
  SPINDLE_CHECK(count >= 0 && static_cast<size_t>(count) <= rows.size(), "read_final_rows: {} floats of {}", count,
                rows.size());
  std::copy_n(rows.data(), count, host);
}

uint64_t CpuOps::workspace_bytes() const {
  uint64_t n = 0;
  for (const auto& b : scratch_) n += b.capacity() * sizeof(float);
  return n + rope_->table_bytes() + moe_scratch_.bytes();
}

void CpuOps::parallel_rows(int64_t rows, int64_t cost_per_row, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t threads = pool_->num_threads();
  if (threads <= 1 || rows < 2 || rows * cost_per_row < kMinParallelWork) {
    fn(0, rows);
    return;
  }
  const int64_t chunks = std::min(rows, threads * 4);
  pool_->parallel_for(chunks, [&](int64_t i) { fn(i * rows / chunks, (i + 1) * rows / chunks); });
}

void CpuOps::embed(WeightId table, const TokenId* ids, int64_t num_ids, int64_t hidden, float* out) {
  const Placed& placed_table = placed(table);
  if (placed_table.table_block) {  // a block-typed table: each looked-up row dequantized
    const gguf::GgmlType type = *placed_table.table_block;
    const size_t row_bytes = static_cast<size_t>(hidden / gguf::ggml_block_elements(type) * gguf::ggml_block_bytes(type));
    parallel_rows(num_ids, hidden * 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        gguf::dequantize_row(type, placed_table.table_bytes.subspan(static_cast<size_t>(ids[i]) * row_bytes, row_bytes),
                             {out + i * hidden, static_cast<size_t>(hidden)});
      }
    });
    return;
  }
  const kc::TypedWeight w = placed_table.vector;
  parallel_rows(num_ids, hidden, [&](int64_t b, int64_t e) {
    kc::embedding_gather(w, config_.vocab_size, hidden, std::span<const TokenId>(ids + b, ids + e), out + b * hidden);
  });
}

void CpuOps::rms_norm(const float* x, float* out, int64_t rows, int64_t cols, WeightId w, const int64_t* row_index) {
  const kc::TypedWeight weight = placed(w).vector;
  parallel_rows(rows, cols, [&](int64_t b, int64_t e) {
    if (row_index == nullptr) {
      kc::rms_norm(x + b * cols, cols, out + b * cols, cols, e - b, cols, weight, eps_);
      return;
    }
    for (int64_t r = b; r < e; ++r) kc::rms_norm(x + row_index[r] * cols, cols, out + r * cols, cols, 1, cols, weight, eps_);
  });
}

void CpuOps::add_rms_norm(float* hidden, const float* delta, float* out, int64_t rows, int64_t cols, WeightId w) {
  const kc::TypedWeight weight = placed(w).vector;
  parallel_rows(rows, cols, [&](int64_t b, int64_t e) {
    kc::add_inplace(hidden + b * cols, delta + b * cols, (e - b) * cols);
    kc::rms_norm(hidden + b * cols, cols, out + b * cols, cols, e - b, cols, weight, eps_);
  });
}

void CpuOps::add(float* y, const float* x, int64_t rows, int64_t cols) {
  parallel_rows(rows, cols, [&](int64_t b, int64_t e) { kc::add_inplace(y + b * cols, x + b * cols, (e - b) * cols); });
}

// In a step of decode-sized sequences only (decodes and speculative verifies) the linear kernel is
// the one for as many rows as the step has sequences (LinearKernel::forward_choosing_for): a verify
// of B sequences then computes each row as a B-row decode step does, bit for bit (on AMX CPUs "auto"
// switches from avx512 to amx at 9 rows, so by row count a 2-sequence verify of 5 tokens each
// would take amx where the decode step takes avx512). Other steps: by the product's rows.
int64_t CpuOps::linear_choose_rows(int64_t rows) const {
  if (step_.num_sequences <= 0 || step_.max_new_tokens > kc::kDecodeSizedMaxNewTokens) return rows;
  return std::min<int64_t>(rows, step_.num_sequences);
}

void CpuOps::linear(const float* x, int64_t rows, std::span<const Product> products) {
  const int64_t choose_rows = linear_choose_rows(rows);
  for (const Product& p : products) {
    const float* bias = p.bias == kNoWeight ? nullptr : placed(p.bias).bias.data();
    placed(p.weight).linear->forward_choosing_for(x, rows, choose_rows, p.y, pool_, bias);
  }
}

void CpuOps::qk_norm_rope(float* q, float* k, int64_t rows, int num_heads, int num_kv_heads, WeightId q_norm,
                          WeightId k_norm, const int64_t* positions) {
  const int64_t d = config_.head_dim;
  const int64_t qs = num_heads * d, ks = num_kv_heads * d;
  const bool norm = q_norm != kNoWeight;
  const kc::TypedWeight qn = norm ? placed(q_norm).vector : kc::TypedWeight{};
  const kc::TypedWeight kn = norm ? placed(k_norm).vector : kc::TypedWeight{};
  parallel_rows(rows, qs + ks, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* qr = q + r * qs;
      float* kr = k + r * ks;
      if (norm) {
        kc::rms_norm(qr, d, qr, d, num_heads, d, qn, eps_);
        kc::rms_norm(kr, d, kr, d, num_kv_heads, d, kn, eps_);
      }
      rope_->apply(qr, num_heads, positions[r]);
      rope_->apply(kr, num_kv_heads, positions[r]);
    }
  });
}

void CpuOps::silu_mul(const float* gate, const float* up, int64_t stride, float* out, int64_t rows, int64_t cols) {
  parallel_rows(rows, cols * 8, [&](int64_t b, int64_t e) {
    kc::silu_mul(gate + b * stride, up + b * stride, stride, out + b * cols, e - b, cols);
  });
}

std::unique_ptr<Transformer> load_cpu_model(const std::filesystem::path& path, const ModelOptions& options) {
  ModelFiles files = open_model_files(path, options.weights_memory, options.quantize_fp8);
  auto ops = std::make_unique<CpuOps>(files.config, options, std::move(files.weights));
  WeightSource& weights = ops->weights();
  return std::make_unique<Transformer>(std::move(files.config), std::move(ops), weights);
}

}  // namespace spindle
