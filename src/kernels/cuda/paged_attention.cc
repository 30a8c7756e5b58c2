// Host side of the CUDA paged attention: shape checks before any launch, per-row metadata, device
// buffers.
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/paged_attention_launch.h"
#include "util/error.h"

namespace spindle::kernels::cuda {

static_assert(kCudaReferenceMaxHeadDim == detail::kMaxHeadDim);

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);  // no throw from a destructor
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return;
  if (data_ != nullptr) {
    CUDA_CHECK(cudaFree(data_));
    data_ = nullptr;
    bytes_ = 0;
  }
  CUDA_CHECK(cudaMalloc(&data_, bytes));
  bytes_ = bytes;
}

namespace {

template <typename T>
T* upload(DeviceBuffer& buffer, const std::vector<T>& host, cudaStream_t stream) {
  if (host.empty()) return nullptr;
  buffer.reserve(host.size() * sizeof(T));
  // Pageable source: returns once the data is staged, so `host` may go away afterwards.
  CUDA_CHECK(cudaMemcpyAsync(buffer.data(), host.data(), host.size() * sizeof(T),
                             cudaMemcpyHostToDevice, stream));
  return buffer.as<T>();
}

}  // namespace

void paged_attention_reference(const cpu::PagedAttentionParams& p, AttentionScratch& scratch,
                               cudaStream_t stream) {
  const int64_t num_rows = cpu::count_query_rows(p.sequences);
  cpu::check_paged_attention_params(p, num_rows);
  SPINDLE_CHECK(p.head_dim <= kCudaReferenceMaxHeadDim,
                "cuda_reference attention supports head_dim up to {} (got {})",
                kCudaReferenceMaxHeadDim, p.head_dim);
  SPINDLE_CHECK(num_rows < (int64_t{1} << 31) && p.num_heads <= 65535,
                "cuda_reference attention: {} rows x {} heads exceed the launch grid", num_rows,
                p.num_heads);
  if (num_rows == 0) return;

  std::vector<detail::RowInfo> rows;
  std::vector<int32_t> tables;
  rows.reserve(num_rows);
  for (const auto& s : p.sequences) {
    const int64_t total = int64_t{s.num_cached_tokens} + s.num_new_tokens;
    SPINDLE_CHECK(total < (int64_t{1} << 31), "sequence of {} tokens is too long", total);
    const int offset = static_cast<int>(tables.size());
    const int64_t table_pages = (total + p.page_size - 1) / p.page_size;
    if (table_pages > 0) tables.insert(tables.end(), s.page_table, s.page_table + table_pages);
    for (int i = 0; i < s.num_new_tokens; ++i) {
      const int64_t position = int64_t{s.num_cached_tokens} + i;
      rows.push_back({static_cast<int32_t>(p.causal ? position + 1 : total), offset});
    }
  }

  detail::AttentionLaunch a;
  a.q = p.q;
  a.out = p.out;
  a.k_pages = p.k_pages;
  a.v_pages = p.v_pages;
  a.bf16 = p.kv_dtype == DType::kBF16;
  a.num_rows = static_cast<int>(num_rows);
  a.num_heads = p.num_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.head_dim = p.head_dim;
  a.page_size = p.page_size;
  a.scale = p.scale;
  a.rows = upload(scratch.rows, rows, stream);
  a.page_tables = upload(scratch.page_tables, tables, stream);
  detail::launch_paged_attention_reference(a, stream);
}

void write_kv_pages(const cpu::KvWriteParams& p, AttentionScratch& scratch, cudaStream_t stream) {
  SPINDLE_CHECK(p.kv_dtype == DType::kF32 || p.kv_dtype == DType::kBF16,
                "KV dtype {} not supported by CUDA attention (f32 or bf16)", dtype_name(p.kv_dtype));
  SPINDLE_CHECK(p.num_kv_heads > 0 && p.head_dim > 0 && p.page_size > 0 && p.num_pages > 0,
                "KV write sizes must be positive (kv heads {}, head_dim {}, page_size {}, pages {})",
                p.num_kv_heads, p.head_dim, p.page_size, p.num_pages);
  const int64_t num_rows = cpu::count_query_rows(p.sequences);
  if (num_rows == 0) return;
  SPINDLE_CHECK(p.k && p.v && p.k_pages && p.v_pages, "KV write: k/v or pages missing");
  std::vector<int64_t> slots(num_rows, -1);
  for (size_t si = 0; si < p.sequences.size(); ++si) {
    const auto& s = p.sequences[si];
    for (int i = 0; i < s.num_new_tokens; ++i) {
      const int64_t row = int64_t{s.query_offset} + i;
      const int64_t pos = int64_t{s.num_cached_tokens} + i;
      SPINDLE_CHECK(row >= 0 && row < num_rows && slots[row] < 0,
                    "sequence {}: query rows overlap or leave [0, {})", si, num_rows);
      SPINDLE_CHECK(s.page_table != nullptr, "sequence {}: no page table", si);
      const int32_t page = s.page_table[pos / p.page_size];
      SPINDLE_CHECK(page >= 0 && page < p.num_pages, "sequence {}: page {} outside [0, {})", si,
                    page, p.num_pages);
      slots[row] = int64_t{page} * p.page_size + pos % p.page_size;
    }
  }

  detail::KvWriteLaunch a;
  a.k = p.k;
  a.v = p.v;
  a.k_pages = p.k_pages;
  a.v_pages = p.v_pages;
  a.bf16 = p.kv_dtype == DType::kBF16;
  a.num_rows = static_cast<int>(num_rows);
  a.kv_cols = int64_t{p.num_kv_heads} * p.head_dim;
  a.slots = upload(scratch.slots, slots, stream);
  detail::launch_write_kv(a, stream);
}

}  // namespace spindle::kernels::cuda
