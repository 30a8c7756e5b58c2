// Host side of the CUDA paged attention: the batch upload, launch parameters, checks.
#include "kernels/cuda/paged_attention.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_attention_launch.h"
#include "util/error.h"

namespace spindle::kernels::cuda {

static_assert(kCudaReferenceMaxHeadDim == detail::kMaxHeadDim);

namespace {

template <typename T>
T* upload_vector(DeviceBuffer& buffer, const std::vector<T>& host) {
  if (host.empty()) return nullptr;
  buffer.reserve(host.size() * sizeof(T));
  copy_to_device(buffer.data(), host.data(), host.size() * sizeof(T));
  return buffer.as<T>();
}

}  // namespace

detail::KvType kv_type_of(DType dtype) {
  switch (dtype) {
    case DType::kF32: return detail::KvType::kF32;
    case DType::kBF16: return detail::KvType::kBF16;
    case DType::kF16: return detail::KvType::kF16;
    default: SPINDLE_FAIL("KV dtype {} not supported by CUDA attention (bf16, f16, f32)", dtype_name(dtype));
  }
}

void DeviceBatch::upload(std::span<const cpu::AttentionSequence> sequences, int page_size, bool causal) {
  SPINDLE_CHECK(page_size > 0, "page size {} must be positive", page_size);
  std::vector<detail::DeviceSequence> seqs;
  std::vector<int64_t> slots;
  std::vector<detail::RowInfo> rows;
  host_tables_.clear();
  int64_t next_row = 0;
  int max_new = 0;
  int64_t max_kv = 0;
  for (size_t si = 0; si < sequences.size(); ++si) {
    const auto& s = sequences[si];
    const int64_t total = int64_t{s.num_cached_tokens} + s.num_new_tokens;
    SPINDLE_CHECK(total < (int64_t{1} << 30), "sequence {}: {} tokens is too long", si, total);
    const int64_t table_pages = (total + page_size - 1) / page_size;
    const int offset = static_cast<int>(host_tables_.size());
    if (table_pages > 0) host_tables_.insert(host_tables_.end(), s.page_table, s.page_table + table_pages);
    seqs.push_back({s.query_offset, s.num_new_tokens, s.num_cached_tokens, offset});
    for (int i = 0; i < s.num_new_tokens; ++i) {
      const int64_t pos = int64_t{s.num_cached_tokens} + i;
      slots.push_back(int64_t{s.page_table[pos / page_size]} * page_size + pos % page_size);
      rows.push_back({static_cast<int32_t>(causal ? pos + 1 : total), offset});
    }
    next_row += s.num_new_tokens;
    max_new = std::max(max_new, s.num_new_tokens);
    max_kv = std::max(max_kv, total);
  }
  SPINDLE_CHECK(next_row < (int64_t{1} << 31), "{} query rows exceed the launch grid", next_row);

  view_.sequences = upload_vector(sequences_, seqs);
  view_.page_tables = upload_vector(page_tables_, host_tables_);
  upload_vector(slots_, slots);
  upload_vector(rows_, rows);
  view_.num_sequences = static_cast<int>(seqs.size());
  view_.num_rows = static_cast<int>(next_row);
  view_.max_new_tokens = max_new;
  view_.max_kv_len = static_cast<int>(max_kv);
  view_.causal = causal;
}

detail::PagedLayerLaunch make_layer_launch(const cpu::PagedAttentionParams& p, const DeviceBatch& batch,
                                           int num_sms) {
  detail::PagedLayerLaunch a;
  a.q = p.q;
  a.out = p.out;
  a.k_pages = p.k_pages;
  a.v_pages = p.v_pages;
  a.kv_type = kv_type_of(p.kv_dtype);
  a.num_pages = p.num_pages;
  a.page_size = p.page_size;
  a.num_heads = p.num_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.head_dim = p.head_dim;
  a.scale = p.scale;
  a.batch = batch.view();
  a.num_sms = num_sms;
  return a;
}

void write_kv_pages(const cpu::KvWriteParams& p, const DeviceBatch& batch, cudaStream_t stream) {
  if (batch.view().num_rows == 0) return;
  SPINDLE_CHECK(p.k && p.v && p.k_pages && p.v_pages, "KV write: k/v or pages missing");
  detail::KvWriteLaunch a;
  a.k = p.k;
  a.v = p.v;
  a.k_pages = p.k_pages;
  a.v_pages = p.v_pages;
  a.kv_type = kv_type_of(p.kv_dtype);
  a.num_rows = batch.view().num_rows;
  a.kv_cols = int64_t{p.num_kv_heads} * p.head_dim;
  a.slots = batch.slots();
  detail::launch_write_kv(a, stream);
}

void paged_attention_reference(const cpu::PagedAttentionParams& p, const DeviceBatch& batch, cudaStream_t stream) {
  SPINDLE_CHECK(p.head_dim <= kCudaReferenceMaxHeadDim, "cuda_reference attention supports head_dim up to {} (got {})",
                kCudaReferenceMaxHeadDim, p.head_dim);
  SPINDLE_CHECK(p.num_heads <= 65535, "cuda_reference attention: {} heads exceed the launch grid", p.num_heads);
  if (batch.view().num_rows == 0) return;
  detail::AttentionLaunch a;
  a.q = p.q;
  a.out = p.out;
  a.k_pages = p.k_pages;
  a.v_pages = p.v_pages;
  a.kv_type = kv_type_of(p.kv_dtype);
  a.num_rows = batch.view().num_rows;
  a.num_heads = p.num_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.head_dim = p.head_dim;
  a.page_size = p.page_size;
  a.scale = p.scale;
  a.rows = static_cast<const detail::RowInfo*>(batch.rows());
  a.page_tables = batch.view().page_tables;
  detail::launch_paged_attention_reference(a, stream);
}

void add_constant(float* out, int64_t n, float value, cudaStream_t stream) {
  detail::launch_add_constant(out, n, value, stream);
}

int current_device_sm_count() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace spindle::kernels::cuda
