// Host side of the CUDA paged attention: the batch upload, launch parameters, checks.
#include "kernels/cuda/paged_attention.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_attention_launch.h"
#include "util/error.h"

namespace spindle::kernels::cuda {

static_assert(kCudaReferenceMaxHeadDim == detail::kMaxHeadDim);

namespace {

constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

detail::KvType kv_type_of(DType dtype) {
  switch (dtype) {
    case DType::kF32: return detail::KvType::kF32;
    case DType::kBF16: return detail::KvType::kBF16;
    case DType::kF16: return detail::KvType::kF16;
    case DType::kF8E4M3: return detail::KvType::kFp8;
    default: SPINDLE_FAIL("KV dtype {} not supported by CUDA attention (bf16, fp16, f32, fp8_e4m3)",
                          kv_cache_dtype_name(dtype));
  }
}

namespace {
// The geometry a launch carries, once its dtype is one the kernels read (kv_type_of throws otherwise).
KvGeometry checked_kv(const KvGeometry& kv) {
  kv_type_of(kv.dtype);
  return kv;
}
}  // namespace

DeviceBatch::~DeviceBatch() {
  if (copied_ != nullptr) cudaEventDestroy(copied_);
  if (staging_ != nullptr) cudaFreeHost(staging_);
}

namespace {

// The upload's arrays in buffer order; the page tables, whose size varies from step to step at
// equal counts, last.
enum Part { kTokens, kPositions, kSequences, kLogitRows, kSlots, kRows, kRowSequences, kPageTables, kNumParts };

struct Layout {
  size_t offset[kNumParts] = {};
  size_t bytes[kNumParts] = {};
  size_t total = 0;
};

Layout layout_for(int64_t rows, int64_t sequences, int64_t logit_rows, int64_t page_entries) {
  Layout l;
  l.bytes[kTokens] = static_cast<size_t>(rows) * sizeof(TokenId);
  l.bytes[kPositions] = static_cast<size_t>(rows) * sizeof(int64_t);
  l.bytes[kSequences] = static_cast<size_t>(sequences) * sizeof(StepSequence);
  l.bytes[kLogitRows] = static_cast<size_t>(logit_rows) * sizeof(int64_t);
  l.bytes[kSlots] = static_cast<size_t>(rows) * sizeof(int64_t);
  l.bytes[kRows] = static_cast<size_t>(rows) * sizeof(detail::RowInfo);
  l.bytes[kRowSequences] = static_cast<size_t>(rows) * sizeof(StepSequence);  // copied only when used
  l.bytes[kPageTables] = static_cast<size_t>(page_entries) * sizeof(int32_t);
  for (int i = 0; i < kNumParts; ++i) {
    l.offset[i] = l.total;
    l.total += aligned(l.bytes[i]);
  }
  l.total = std::max<size_t>(l.total, kAlign);
  return l;
}

}  // namespace

void DeviceBatch::grow_staging(size_t bytes) {
  if (bytes <= staging_bytes_) return;
  if (copied_ != nullptr) CUDA_CHECK(cudaEventSynchronize(copied_));
  if (staging_ != nullptr) CUDA_CHECK(cudaFreeHost(staging_));
  staging_ = nullptr;
  staging_bytes_ = 0;
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging_), bytes));
  staging_bytes_ = bytes;
}

void DeviceBatch::reserve(int64_t max_rows, int64_t max_sequences, int64_t max_page_entries) {
  const Layout l = layout_for(max_rows, max_sequences, max_rows, max_page_entries);
  if (l.total > buffer_.size()) {
    CUDA_CHECK(cudaDeviceSynchronize());  // kernels of the last step may still read the old buffer
    buffer_.reserve(l.total);
  }
  grow_staging(l.total);
}

void DeviceBatch::upload(const StepBatch& batch, int page_size, cudaStream_t stream, int plan_kv_len) {
  SPINDLE_CHECK(page_size > 0, "page size {} must be positive", page_size);
  SPINDLE_CHECK(batch.num_padding_sequences >= 0 && batch.num_padding_sequences <= batch.num_sequences(),
                "{} padding sequences in a batch of {}", batch.num_padding_sequences, batch.num_sequences());
  slots_host_.clear();
  rows_host_.clear();
  row_sequences_host_.clear();
  const bool row_sequences =
      batch.causal && batch.max_new_tokens > 1 && batch.num_tokens() <= detail::kRowSequencesMaxRows;
  const size_t first_padding = static_cast<size_t>(batch.num_real_sequences());
  int64_t next_row = 0;
  for (size_t si = 0; si < batch.sequences.size(); ++si) {
    const StepSequence& s = batch.sequences[si];
    const int64_t total = int64_t{s.num_cached_tokens} + s.num_new_tokens;
    SPINDLE_CHECK(total < (int64_t{1} << 30), "sequence {}: {} tokens is too long", si, total);
    SPINDLE_CHECK(int64_t{s.num_pages} * page_size >= total && s.page_table_offset >= 0 &&
                      size_t(s.page_table_offset) + size_t(s.num_pages) <= batch.page_tables.size(),
                  "sequence {}: page table of {} pages cannot hold {} tokens (page size {})", si, s.num_pages, total,
                  page_size);
    const int32_t* table = batch.page_table(s);
    const bool padding = si >= first_padding;
    for (int i = 0; i < s.num_new_tokens; ++i) {
      const int64_t pos = int64_t{s.num_cached_tokens} + i;
      slots_host_.push_back(padding ? -1 : int64_t{table[pos / page_size]} * page_size + pos % page_size);
      rows_host_.push_back({static_cast<int32_t>(batch.causal ? pos + 1 : total), s.page_table_offset});
      if (row_sequences) {
        StepSequence row;
        row.query_offset = s.query_offset + i;
        row.num_new_tokens = 1;
        row.num_cached_tokens = static_cast<int32_t>(pos);
        row.page_table_offset = s.page_table_offset;
        row.num_pages = s.num_pages;
        row_sequences_host_.push_back(row);
      }
    }
    next_row += s.num_new_tokens;
  }
  SPINDLE_CHECK(next_row < (int64_t{1} << 31), "{} query rows exceed the launch grid", next_row);

  const void* host[kNumParts] = {};
  host[kTokens] = batch.token_ids.data();
  host[kPositions] = batch.positions.data();
  host[kSequences] = batch.sequences.data();
  host[kLogitRows] = batch.logit_rows.data();
  host[kSlots] = slots_host_.data();
  host[kRows] = rows_host_.data();
  host[kRowSequences] = row_sequences_host_.data();
  host[kPageTables] = batch.page_tables.data();
  const Layout l = layout_for(batch.num_tokens(), batch.num_sequences(), batch.num_logit_rows(),
                              static_cast<int64_t>(batch.page_tables.size()));
  if (copied_ == nullptr) CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventSynchronize(copied_));  // the staging's last copy has been read
  grow_staging(l.total);
  if (l.total > buffer_.size()) {
    CUDA_CHECK(cudaDeviceSynchronize());  // kernels of the last step may still read the old buffer
    buffer_.reserve(std::max(l.total, buffer_.size() * 2));
  }
  for (int i = 0; i < kNumParts; ++i) {
    if (i == kRowSequences && !row_sequences) continue;  // its space stays (stale): offsets depend on counts only
    if (l.bytes[i] > 0) std::memcpy(staging_ + l.offset[i], host[i], l.bytes[i]);
  }
  stream_ = stream;
  CUDA_CHECK(cudaMemcpyAsync(buffer_.data(), staging_, l.total, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaEventRecord(copied_, stream));

  auto* base = buffer_.as<std::byte>();
  auto at = [&](int i) -> const void* { return l.bytes[i] > 0 ? base + l.offset[i] : nullptr; };
  step_ = batch.view();
  step_.token_ids = static_cast<const TokenId*>(at(kTokens));
  step_.positions = static_cast<const int64_t*>(at(kPositions));
  step_.sequences = static_cast<const StepSequence*>(at(kSequences));
  step_.page_tables = static_cast<const int32_t*>(at(kPageTables));
  step_.logit_rows = static_cast<const int64_t*>(at(kLogitRows));
  slots_ = static_cast<const int64_t*>(at(kSlots));
  rows_ = at(kRows);

  view_.sequences = step_.sequences;
  view_.row_sequences = row_sequences ? static_cast<const StepSequence*>(at(kRowSequences)) : nullptr;
  view_.page_tables = step_.page_tables;
  view_.num_sequences = step_.num_sequences;
  view_.num_rows = static_cast<int>(next_row);
  view_.max_new_tokens = batch.max_new_tokens;
  view_.max_kv_len = std::max(batch.max_kv_len, plan_kv_len);
  view_.causal = batch.causal;
}

detail::PagedLayerLaunch make_layer_launch(const cpu::PagedAttentionParams& p, const DeviceBatch& batch,
                                           int num_sms) {
  detail::PagedLayerLaunch a;
  a.q = p.q;
  a.out = p.out;
  a.k_pages = p.k_pages;
  a.v_pages = p.v_pages;
  a.kv = checked_kv(p.kv);
  a.k_scales = p.k_scales;
  a.v_scales = p.v_scales;
  a.num_heads = p.num_heads;
  a.scale = p.scale;
  a.batch = batch.view();
  a.num_sms = num_sms;
  return a;
}

void write_kv_pages(const cpu::KvWriteParams& p, const DeviceBatch& batch) {
  cudaStream_t stream = batch.stream();
  if (batch.view().num_rows == 0) return;
  SPINDLE_CHECK(p.k && p.v && p.k_pages && p.v_pages, "KV write: k/v or pages missing");
  detail::KvWriteLaunch a;
  a.k = p.k;
  a.v = p.v;
  a.k_pages = p.k_pages;
  a.v_pages = p.v_pages;
  a.kv = checked_kv(p.kv);
  cpu::check_kv_scales(p.kv.dtype, p.k_scales, p.v_scales, 0);  // (device pointers: presence only)
  a.k_scales = p.k_scales;
  a.v_scales = p.v_scales;
  a.num_rows = batch.view().num_rows;
  a.slots = batch.slots();
  detail::launch_write_kv(a, stream);
}

void paged_attention_reference(const cpu::PagedAttentionParams& p, const DeviceBatch& batch) {
  cudaStream_t stream = batch.stream();
  SPINDLE_CHECK(p.kv.head_dim <= kCudaReferenceMaxHeadDim,
                "cuda_reference attention supports head_dim up to {} (got {})", kCudaReferenceMaxHeadDim, p.kv.head_dim);
  SPINDLE_CHECK(p.num_heads <= 65535, "cuda_reference attention: {} heads exceed the launch grid", p.num_heads);
  if (batch.view().num_rows == 0) return;
  detail::AttentionLaunch a;
  a.q = p.q;
  a.out = p.out;
  a.k_pages = p.k_pages;
  a.v_pages = p.v_pages;
  a.kv = checked_kv(p.kv);
  cpu::check_kv_scales(p.kv.dtype, p.k_scales, p.v_scales, 0);  // (device pointers: presence only)
  a.k_scales = p.k_scales;
  a.v_scales = p.v_scales;
  a.num_rows = batch.view().num_rows;
  a.num_heads = p.num_heads;
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
