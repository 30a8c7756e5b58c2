#include "attn/paged_backend.h"

#include "util/error.h"

namespace spindle::attn {

namespace kc = kernels::cpu;

PagedBackend::PagedBackend(std::string name, Device device, const AttentionShape& shape, const DpConfig& dp)
    : name_(std::move(name)), device_(device), shape_(shape), dp_(dp), fault_(fault_for(name_, dp.dp_rank)) {}

void PagedBackend::prepare(const StepBatch& batch, const kernels::cuda::DeviceBatch* uploaded) {
  batch_ = &batch;
  num_tokens_ = batch.num_tokens();
  checked_ = false;
  // Checked now against the bound pages (a step whose layers replay a CUDA graph calls no
  // forward), else at the step's first forward.
  if (!layers_.empty()) {
    kc::check_sequences(batch.sequences, batch.page_tables.data(), geometry_.page_size, geometry_.num_pages,
                        num_tokens_);
    checked_ = true;
  }
  on_prepare(uploaded);
}

void PagedBackend::bind_kv_caches(std::span<const LayerKvCache> layers) {
  const KvGeometry want = shape_.kv_geometry(0, 0);
  for (size_t i = 0; i < layers.size(); ++i) {
    const KvGeometry& kv = layers[i].kv;
    SPINDLE_CHECK(kv.same_page_layout(want),
                  "layer {} KV cache ({} kv heads, head_dim {}, page {}, {}) does not match the backend shape {}", i,
                  kv.num_kv_heads, kv.head_dim, kv.page_size, dtype_name(kv.dtype), shape_.to_string());
    SPINDLE_CHECK(layers[i].device == device_, "layer {}: {} needs its KV pages in {} memory, they are in {} memory",
                  i, name_, device_name(device_), device_name(layers[i].device));
    SPINDLE_CHECK(kv.num_pages >= dp_.dp_size, "layer {}: {} pages cannot be split over {} DP ranks", i, kv.num_pages,
                  dp_.dp_size);
    SPINDLE_CHECK(kv.num_pages == layers.front().kv.num_pages, "layer {} has {} KV pages, layer 0 has {}", i,
                  kv.num_pages, layers.front().kv.num_pages);
    SPINDLE_CHECK(kv.dtype != DType::kF8E4M3 || (layers[i].k_scales != nullptr && layers[i].v_scales != nullptr),
                  "layer {}: FP8 (fp8_e4m3) KV pages bound without their K and V scales", i);
  }
  layers_.assign(layers.begin(), layers.end());
  const int pool_pages = layers.empty() ? 0 : layers.front().kv.num_pages;
  const PageRange range = rank_page_range(pool_pages, dp_.dp_size, dp_.dp_rank);  // (no pages: {0, 0})
  geometry_ = shape_.kv_geometry(static_cast<int>(layers.size()), range.count, range.first);
  checked_ = false;
  on_bind();
}

PagedBackend::RankPages PagedBackend::rank_pages(const LayerKvCache& cache) const {
  const uint64_t offset = geometry_.layer_page_bytes() * uint64_t(geometry_.first_page);
  RankPages r;
  r.k = static_cast<std::byte*>(cache.k_pages) + offset;
  r.v = static_cast<std::byte*>(cache.v_pages) + offset;
  return r;
}

const LayerKvCache& PagedBackend::layer_cache(int layer) const {
  SPINDLE_CHECK(layer >= 0 && layer < static_cast<int>(layers_.size()), "layer {} has no bound KV cache ({} bound)",
                layer, layers_.size());
  return layers_[static_cast<size_t>(layer)];
}

void PagedBackend::forward(int layer, ConstTensor q, ConstTensor k, ConstTensor v, Tensor out, bool kv_written) {
  SPINDLE_CHECK(batch_ != nullptr, "forward: no step prepared (prepare)");
  SPINDLE_CHECK(layer >= 0 && layer < static_cast<int>(layers_.size()), "layer {} has no bound KV cache ({} bound)",
                layer, layers_.size());
  const int64_t q_cols = int64_t{shape_.num_heads} * shape_.head_dim;
  const int64_t kv_cols = int64_t{shape_.num_kv_heads} * shape_.head_dim;
  SPINDLE_CHECK(q.rows == num_tokens_ && out.rows == num_tokens_ && k.rows == num_tokens_ && v.rows == num_tokens_,
                "forward: tensors have {}/{}/{}/{} rows (q/k/v/out) but the prepared batch has {}", q.rows, k.rows,
                v.rows, out.rows, num_tokens_);
  SPINDLE_CHECK(q.cols == q_cols && out.cols == q_cols && k.cols == kv_cols && v.cols == kv_cols,
                "forward: q/out need {} columns and k/v {}", q_cols, kv_cols);
  SPINDLE_CHECK(num_tokens_ == 0 || (q.data && k.data && v.data && out.data), "forward: q/k/v/out data missing");
  SPINDLE_CHECK(!kv_written || static_cast<bool>(kv_write_target(layer)),
                "forward: {} offers no K/V write target, so the caller cannot have written the K/V", name_);
  act_out_fatal_fault(fault_);

  const LayerKvCache& cache = layers_[layer];
  const RankPages pages = rank_pages(cache);

  kc::PagedAttentionParams p;
  p.q = q.data;
  p.out = out.data;
  p.k_pages = pages.k;
  p.v_pages = pages.v;
  p.kv = geometry_;
  p.num_heads = shape_.num_heads;
  p.scale = shape_.scale;
  p.causal = batch_->causal;
  p.sequences = batch_->sequences;
  p.page_tables = batch_->page_tables.data();
  p.k_scales = cache.k_scales;
  p.v_scales = cache.v_scales;
  // Every layer of a step shares the batch and the geometry: its sequences and page tables are
  // checked against the rank's pages once per step, not per layer.
  if (!checked_) {
    kc::check_paged_attention_params(p, num_tokens_);
    checked_ = true;
  }
  if (num_tokens_ == 0) return;

  kc::KvWriteParams w;
  w.k = k.data;
  w.v = v.data;
  w.k_pages = pages.k;
  w.v_pages = pages.v;
  w.kv = geometry_;
  w.sequences = batch_->sequences;
  w.page_tables = batch_->page_tables.data();
  w.k_scales = cache.k_scales;
  w.v_scales = cache.v_scales;

  run_layer(layer, kv_written ? nullptr : &w, p);
  if (fault_ == FaultMode::kWrong) corrupt_output(out);
}

void PagedBackend::corrupt_output(Tensor out) {
  for (int64_t i = 0; i < out.rows * out.cols; ++i) out.data[i] += 0.5f;
}

}  // namespace spindle::attn
