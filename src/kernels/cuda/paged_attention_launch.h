// Internal: the plain launch arguments shared by paged_attention.cc (host checks, metadata) and
// paged_attention_reference.cu (kernels). Every pointer is device memory. C++17 (nvcc's dialect
// here), so nothing from the C++20 host headers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace spindle::kernels::cuda::detail {

// The largest head_dim the reference kernel handles (its per-thread accumulators are sized for it).
inline constexpr int kMaxHeadDim = 256;

struct RowInfo {
  int32_t kv_len = 0;             // keys this query row attends to: positions [0, kv_len)
  int32_t page_table_offset = 0;  // where its sequence's page table starts in page_tables
};

struct AttentionLaunch {
  const float* q = nullptr;
  float* out = nullptr;
  const void* k_pages = nullptr;
  const void* v_pages = nullptr;
  bool bf16 = false;  // else f32
  int num_rows = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
  float scale = 1.0f;
  const RowInfo* rows = nullptr;
  const int32_t* page_tables = nullptr;
};

struct KvWriteLaunch {
  const float* k = nullptr;
  const float* v = nullptr;
  void* k_pages = nullptr;
  void* v_pages = nullptr;
  bool bf16 = false;
  int num_rows = 0;
  int64_t kv_cols = 0;            // num_kv_heads * head_dim
  const int64_t* slots = nullptr; // per row: page * page_size + position % page_size
};

void launch_paged_attention_reference(const AttentionLaunch& a, cudaStream_t stream);
void launch_write_kv(const KvWriteLaunch& a, cudaStream_t stream);

}  // namespace spindle::kernels::cuda::detail
