// Paged attention on the CPU: the kernel contract shared by every ISA.
//
// KV layout, per layer: k_pages and v_pages are each [kv.num_pages, kv.page_size, kv.num_kv_heads,
// kv.head_dim] of kv.dtype (kF32 or kBF16; kF16 for the reference and the CUDA kernels), row-major:
// the rank's pages of the bound geometry (kernels/kv_geometry.h). Token t of
// sequence s lives in page page_tables[s.page_table_offset + t / page_size], slot t % page_size
// (the StepBatch layout, kernels/step_batch.h).
//
// Queries and outputs are f32, [num_tokens, num_heads, head_dim], the rows of all sequences
// concatenated in batch order. Query head h reads KV head h / (num_heads / num_kv_heads) (GQA).
//
// Sequence s has num_cached_tokens already in its pages and num_new_tokens new ones (whose K/V the
// caller has already written into the pages, see write_kv_pages). Its query row i sits at
// position num_cached_tokens + i and attends, when causal, to positions [0, num_cached_tokens + i];
// otherwise to all num_cached_tokens + num_new_tokens positions.
//
// FP8 KV (kF8E4M3, E4M3FN bytes): element d of KV head h reads fp8_e4m3_to_float(byte) *
// k_scales[h] (V: v_scales[h]); the writer stores float_to_fp8_e4m3(x / scale) (util/fp8.h,
// saturating at +-448; kernels/kv_scales.h). Other dtypes ignore the scales.
//
// out = softmax(scale * q . K^T) . V per query row and head. Every output element is written.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/kv_geometry.h"
#include "kernels/step_batch.h"
#include "util/dtype.h"

namespace spindle {
class ThreadPool;
}

namespace spindle::kernels::cpu {

struct PagedAttentionParams {
  const float* q = nullptr;       // [num_tokens, num_heads, head_dim]
  float* out = nullptr;           // [num_tokens, num_heads, head_dim]
  const void* k_pages = nullptr;  // [kv.num_pages, kv.page_size, kv.num_kv_heads, kv.head_dim]
  const void* v_pages = nullptr;  // same layout as k_pages
  // The rank's KV geometry (dtype kF32, kBF16, kF8E4M3, or kF16 for the reference only); head_dim
  // is the queries' too.
  KvGeometry kv;
  // FP8 KV only (else ignored): [kv.num_kv_heads] dequantization scales of this layer's K and V,
  // positive and finite, host memory (device memory in the CUDA launches).
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  int num_heads = 0;
  float scale = 1.0f;
  bool causal = true;
  // The step's sequences and their page tables (StepBatch, kernels/step_batch.h), host memory.
  std::span<const StepSequence> sequences;
  const int32_t* page_tables = nullptr;
  ThreadPool* pool = nullptr;     // null: run on the calling thread
};

// New tokens' K/V into their pages: k, v are [num_tokens, num_kv_heads, head_dim] f32, rows in the
// same order as q. Converts to kv.dtype (bf16, f16: round to nearest even; f8_e4m3: x / scale of
// its head, rounded to nearest even and saturated at +-448, NaN kept: util/fp8.h).
struct KvWriteParams {
  const float* k = nullptr;
  const float* v = nullptr;
  void* k_pages = nullptr;
  void* v_pages = nullptr;
  KvGeometry kv;  // as in PagedAttentionParams
  const float* k_scales = nullptr;  // as in PagedAttentionParams (FP8 KV only)
  const float* v_scales = nullptr;
  std::span<const StepSequence> sequences;  // as in PagedAttentionParams
  const int32_t* page_tables = nullptr;
};

// Host-side checks shared by every kernel: sizes positive, dtype supported, head counts divide,
// query rows contiguous and in range, every page index inside [0, num_pages). Throws spindle::Error.
void check_paged_attention_params(const PagedAttentionParams& p, int64_t num_tokens);
// For dtype kF8E4M3: both scale arrays present, and their first num_kv_heads values (host memory;
// 0: presence only) positive and finite. Throws spindle::Error naming the head.
void check_kv_scales(DType dtype, const float* k_scales, const float* v_scales, int num_kv_heads);
// The batch part of that check: rows contiguous in sequence order adding up to num_tokens, page
// tables long enough, every page id inside [0, num_pages).
void check_sequences(std::span<const StepSequence> sequences, const int32_t* page_tables, int page_size,
                     int num_pages, int64_t num_tokens);
void write_kv_pages(const KvWriteParams& p);

// head_dim the optimized kernels (avx2, avx512, amx) accept: a positive multiple of this. The
// reference takes any head_dim.
inline constexpr int kCpuAttentionHeadDimMultiple = 8;
inline bool cpu_attention_head_dim_supported(int head_dim) {
  return head_dim > 0 && head_dim % kCpuAttentionHeadDimMultiple == 0;
}

// head_dims the optimized CPU backends are offered for: every multiple of 16 from 32 to 256, the
// sizes tests/kernels/paged_attention_test.cc validates against the reference (its grid). Other
// head_dims (which the kernels would still compute) are reported unsupported by the backends.
inline constexpr int kCpuBackendMinHeadDim = 32;
inline constexpr int kCpuBackendMaxHeadDim = 256;
inline constexpr int kCpuBackendHeadDimStep = 16;
inline bool cpu_backend_head_dim_supported(int head_dim) {
  return head_dim >= kCpuBackendMinHeadDim && head_dim <= kCpuBackendMaxHeadDim &&
         head_dim % kCpuBackendHeadDimStep == 0;
}

// Sequences of at most this many new tokens are decode- or verify-sized (a speculative verify is at
// most 16 drafts + 1). Each of their rows must get the bits it would get in a one-token decode step,
// whatever else the step holds, so that greedy speculation gives plain decoding's tokens: the CPU
// attention kernels split such a sequence's keys at fixed multiples (paged_attention_tiled.h), and
// CpuOps picks the linear kernels of steps made only of them by the step's sequence count.
inline constexpr int kDecodeSizedMaxNewTokens = 17;

// The ground truth: plain loops, float64 accumulation. Slow.
void paged_attention_reference(const PagedAttentionParams& p);
// Tiled online softmax (flash-style) with AVX2 + FMA + F16C. Caller ensures the CPU has them.
// Decode tasks (one new token) at head_dim <= kAvx2SmallDecodeMaxHeadDim run the small-head_dim
// decode path (every head of a token row in one pass, keys in blocks of 256; bf16 K/V widened 16
// elements at a time in a paired layout).
void paged_attention_avx2(const PagedAttentionParams& p);
inline constexpr int kAvx2SmallDecodeMaxHeadDim = 64;

// The same kernel with the decode path forced (tests, benchmarks): kAuto as above, kGeneric never
// the small-head_dim path, kSmallHeadDim wherever it applies (one new token, not FP8 KV; bf16 KV needs head_dim
// % 16 == 0), at any head_dim.
enum class Avx2DecodePath { kAuto, kGeneric, kSmallHeadDim };
void paged_attention_avx2_path(const PagedAttentionParams& p, Avx2DecodePath path);
// AVX-512F/BW; avx512_bf16 dot products when use_bf16_dot (bf16 KV only).
void paged_attention_avx512(const PagedAttentionParams& p, bool use_bf16_dot);
// AMX-BF16 tiles for Q.K^T and P.V (bf16 KV only); caller has obtained the tile permission.
// Needs AVX-512F/BW/BF16 too. f32 KV and decode-sized tasks (few rows) run the avx512 bf16-dot path.
void paged_attention_amx(const PagedAttentionParams& p);

// Total query rows of a batch (the sum of num_new_tokens).
int64_t count_query_rows(std::span<const StepSequence> sequences);

}  // namespace spindle::kernels::cpu
