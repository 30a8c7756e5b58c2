// Internal: the launch contract of the optimized CUDA paged attention kernels (cuda_flash prefill
// and decode, cudnn_sdpa). Plain structs of device pointers, shared by the host code (.cc, C++20)
// and the kernels (.cu, C++17): nothing from the C++20 host headers.
//
// Layouts (the contract of kernels/cpu/paged_attention.h, on the device):
//   q, out      [num_rows, num_heads, head_dim] f32, every sequence's rows concatenated in order
//   k/v pages   [kv.num_pages, kv.page_size, kv.num_kv_heads, kv.head_dim] of kv.dtype (this
//               rank's pages; kernels/kv_geometry.h)
//   Token t of sequence s lives in page page_tables[s.page_table_offset + t / page_size],
//   slot t % page_size. Query row i of sequence s sits at position s.num_cached_tokens + i and
//   attends, when causal, to positions [0, num_cached_tokens + i]; otherwise to all
//   num_cached_tokens + num_new_tokens positions. Query head h reads KV head
//   h / (num_heads / num_kv_heads) (GQA).
//   out = softmax(scale * q . K^T) . V per row and head; every element of out is written.
// The new tokens' K/V are already in the pages when a kernel runs (write_kv_pages ran first).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kv_geometry.h"
#include "kernels/step_batch.h"

namespace spindle::kernels::cuda::detail {

// kFp8: E4M3FN bytes, read as fp8 * scale of the element's KV head (kernels/kv_scales.h).
enum class KvType : int32_t { kF32 = 0, kBF16 = 1, kF16 = 2, kFp8 = 3 };

// The kernels' element type of a geometry's KV dtype. The host accepted the dtype before it built
// the launch (kernels::cuda::kv_type_of(DType) refuses all but bf16, f16, f32 and f8_e4m3).
inline KvType kv_type_of(const KvGeometry& kv) {
  return kv.dtype == DType::kBF16   ? KvType::kBF16
         : kv.dtype == DType::kF16  ? KvType::kF16
         : kv.dtype == DType::kF8E4M3 ? KvType::kFp8
                                    : KvType::kF32;
}

// One sequence of the step, in device memory: the StepBatch's own record (kernels/step_batch.h),
// uploaded as it is once per step and shared by all layers.
using DeviceSequence = ::spindle::StepSequence;

// Causal steps of 2..kRowSequencesMaxRows query rows in all, some sequence with more than one (a
// batch-1 speculative verify, a short chunk): DeviceBatch also uploads each query row as a
// one-token sequence, so the decode kernel can serve them (row r of sequence s: query_offset r,
// num_new_tokens 1, num_cached_tokens = its position, s's page table; logit fields 0). Measured on
// the H200 (bench/results/2026-12-04-h200-verify-attn, 8B shape): a 5-row verify 4.92 vs 5.33 ms
// at 512 keys and 6.37 vs 13.55 ms at 8000; 40 rows (batch 8) 6.27 vs 5.84, slower: each row
// reads its keys itself. 6-39 rows are not measured; the bound stays at what was.
inline constexpr int kRowSequencesMaxRows = 8;

// The step's batch: device arrays plus host-known maxima for sizing grids.
struct PagedBatchView {
  const DeviceSequence* sequences = nullptr;  // [num_sequences]
  const DeviceSequence* row_sequences = nullptr;  // [num_rows] as above, or null (not such a step)
  const int32_t* page_tables = nullptr;       // every sequence's table, concatenated
  int num_sequences = 0;
  int num_rows = 0;                           // sum of num_new_tokens
  int max_new_tokens = 0;                     // max over sequences
  int max_kv_len = 0;                         // max over sequences of cached + new
  bool causal = true;
};

// One layer's launch.
struct PagedLayerLaunch {
  const float* q = nullptr;
  float* out = nullptr;
  const void* k_pages = nullptr;  // the rank's first page (kv.first_page already applied)
  const void* v_pages = nullptr;
  KvGeometry kv;                   // the rank's pages: kv.num_pages, page_size, heads, head_dim, dtype
  const float* k_scales = nullptr;  // FP8 KV: [kv.num_kv_heads] device floats (kernels/kv_scales.h)
  const float* v_scales = nullptr;
  int num_heads = 0;
  float scale = 1.0f;
  PagedBatchView batch;
  int num_sms = 0;                 // multiprocessors of the current device (grid sizing)
  void* workspace = nullptr;       // device scratch of at least the kernel's *_workspace_bytes()
  size_t workspace_bytes = 0;
  // Decode only (launch_flash_decode): not null: out also rounded to 16 bits there, [num_rows,
  // num_heads, head_dim], bf16 when out16_bf16 else f16 (round16.cuh round_16bit).
  void* out16 = nullptr;
  bool out16_bf16 = true;
  // Decode only: true when a sequence's keys before its last may also be this step's (the row
  // sequences of a verify step): then no key is read before the programmatic wait.
  bool new_keys_before_last = false;
};

}  // namespace spindle::kernels::cuda::detail
