// Internal: the plain launch arguments of the reference kernel, the K/V page writer and the small
// helpers in paged_attention_reference.cu. Every pointer is device memory. C++17 (nvcc's dialect
// here), so nothing from the C++20 host headers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/paged_layer_launch.h"

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
  const void* k_pages = nullptr;  // the rank's first page
  const void* v_pages = nullptr;
  KvGeometry kv;                   // the rank's pages (paged_layer_launch.h)
  const float* k_scales = nullptr;  // FP8 KV: [kv.num_kv_heads], dequantized = fp8 * scale
  const float* v_scales = nullptr;
  int num_rows = 0;
  int num_heads = 0;
  float scale = 1.0f;
  const RowInfo* rows = nullptr;
  const int32_t* page_tables = nullptr;
};

struct KvWriteLaunch {
  const float* k = nullptr;
  const float* v = nullptr;
  void* k_pages = nullptr;        // the rank's first page
  void* v_pages = nullptr;
  KvGeometry kv;                  // the rank's pages; a row is kv.num_kv_heads * kv.head_dim values
  const float* k_scales = nullptr; // FP8 KV: [kv.num_kv_heads]; stored = fp8(x / scale), saturated
  const float* v_scales = nullptr;
  int num_rows = 0;
  const int64_t* slots = nullptr; // per row: page * page_size + position % page_size; < 0: skip
};

void launch_paged_attention_reference(const AttentionLaunch& a, cudaStream_t stream);
void launch_write_kv(const KvWriteLaunch& a, cudaStream_t stream);
// data[i] += value for i in [0, n) (the `wrong` fault of the validation tests).
void launch_add_constant(float* data, int64_t n, float value, cudaStream_t stream);

}  // namespace spindle::kernels::cuda::detail
