// cuda_reference paged attention: one thread block per (query row, head), float accumulation,
// online softmax with a running max, keys in tiles of kThreads. Plus the K/V page writer. Reads
// and writes bf16, f16, f32 and FP8 (E4M3FN, scaled per KV head) pages.
// Correctness first: each thread computes one key's score per tile (uncoalesced K reads); the
// P.V product is coalesced over head_dim.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_attention_launch.h"
#include "kernels/cuda/pdl.cuh"

namespace spindle::kernels::cuda::detail {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kAccPerThread = (kMaxHeadDim + kThreads - 1) / kThreads;

// Element `index` of the pages as f32; FP8 bytes without their scale (the caller applies it).
template <KvType kKv>
__device__ __forceinline__ float load_kv(const void* base, int64_t index) {
  if constexpr (kKv == KvType::kFp8) {
    const __nv_fp8_storage_t byte = static_cast<const __nv_fp8_storage_t*>(base)[index];
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(byte, __NV_E4M3)));  // exact: E4M3 is inside f16
  } else if constexpr (kKv == KvType::kBF16) {
    const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(base)[index]) << 16;
    return __uint_as_float(bits);
  } else if constexpr (kKv == KvType::kF16) {
    return __half2float(static_cast<const __half*>(base)[index]);
  } else {
    return static_cast<const float*>(base)[index];
  }
}

// Same rounding as util/half.h float_to_bf16_bits (nearest even; NaN kept quiet).
__device__ __forceinline__ uint16_t float_to_bf16_bits(float value) {
  const uint32_t u = __float_as_uint(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}

// Every thread gets the block-wide max (is_max) or sum. `red` holds kWarps floats.
__device__ __forceinline__ float block_reduce(float v, float* red, bool is_max) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  __syncthreads();  // earlier readers of red are done
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < kWarps; ++w) v = is_max ? fmaxf(v, red[w]) : v + red[w];
  return v;
}

template <KvType kKv>
__global__ void __launch_bounds__(kThreads) paged_attention_reference_kernel(AttentionLaunch a) {
  pdl_begin();
  extern __shared__ float smem[];
  float* q_s = smem;                // [head_dim]
  float* p_s = smem + a.kv.head_dim;   // [kThreads]
  __shared__ float red[kWarps];

  const int row = blockIdx.x;
  const int head = blockIdx.y;
  const int tid = threadIdx.x;
  const RowInfo info = a.rows[row];
  const int kv_head = head / (a.num_heads / a.kv.num_kv_heads);
  const int64_t kv_cols = int64_t{a.kv.num_kv_heads} * a.kv.head_dim;
  const int64_t q_index = (int64_t{row} * a.num_heads + head) * a.kv.head_dim;
  const int32_t* table = a.page_tables + info.page_table_offset;
  // FP8 KV: K's scale folds into the scores, V's into the output (both linear).
  const float k_scale = kKv == KvType::kFp8 ? a.k_scales[kv_head] : 1.0f;
  const float v_scale = kKv == KvType::kFp8 ? a.v_scales[kv_head] : 1.0f;

  for (int d = tid; d < a.kv.head_dim; d += kThreads) q_s[d] = a.q[q_index + d];
  __syncthreads();

  float running_max = -INFINITY;
  float running_sum = 0.0f;
  float acc[kAccPerThread];
  for (int c = 0; c < kAccPerThread; ++c) acc[c] = 0.0f;

  for (int start = 0; start < info.kv_len; start += kThreads) {
    const int j = start + tid;
    float score = -INFINITY;
    if (j < info.kv_len) {
      const int64_t slot = int64_t{table[j / a.kv.page_size]} * a.kv.page_size + j % a.kv.page_size;
      const int64_t base = slot * kv_cols + int64_t{kv_head} * a.kv.head_dim;
      float dot = 0.0f;
      for (int d = 0; d < a.kv.head_dim; ++d) dot += q_s[d] * load_kv<kKv>(a.k_pages, base + d);
      score = dot * a.scale * k_scale;
    }
    const float tile_max = block_reduce(score, red, true);
    const float new_max = fmaxf(running_max, tile_max);  // finite: the tile has a valid key
    const float p = j < info.kv_len ? expf(score - new_max) : 0.0f;
    p_s[tid] = p;
    const float tile_sum = block_reduce(p, red, false);  // its barriers also publish p_s
    const float alpha = expf(running_max - new_max);     // 0 on the first tile
    running_sum = running_sum * alpha + tile_sum;
    running_max = new_max;

    const int n = min(kThreads, info.kv_len - start);
    for (int c = 0; c < kAccPerThread; ++c) {
      const int d = tid + c * kThreads;
      if (d >= a.kv.head_dim) break;
      float sum = acc[c] * alpha;
      for (int jj = 0; jj < n; ++jj) {
        const int pos = start + jj;
        const int64_t slot = int64_t{table[pos / a.kv.page_size]} * a.kv.page_size + pos % a.kv.page_size;
        sum += p_s[jj] * load_kv<kKv>(a.v_pages, slot * kv_cols + int64_t{kv_head} * a.kv.head_dim + d);
      }
      acc[c] = sum;
    }
    __syncthreads();  // p_s is rewritten by the next tile
  }

  const float inv = v_scale / running_sum;
  for (int c = 0; c < kAccPerThread; ++c) {
    const int d = tid + c * kThreads;
    if (d < a.kv.head_dim) a.out[q_index + d] = acc[c] * inv;
  }
}

template <KvType kKv>
__global__ void write_kv_kernel(KvWriteLaunch a) {
  pdl_begin();
  const int row = blockIdx.x;
  if (a.slots[row] < 0) return;  // a padding row (DeviceBatch): nothing to keep
  const int64_t kv_cols = int64_t{a.kv.num_kv_heads} * a.kv.head_dim;  // one token's K (or V)
  const int64_t dst = a.slots[row] * kv_cols;
  const int64_t src = int64_t{row} * kv_cols;
  for (int64_t e = threadIdx.x; e < kv_cols; e += blockDim.x) {
    if constexpr (kKv == KvType::kFp8) {
      // x / scale of the element's head, nearest even, saturated at +-448, NaN kept: as
      // cpu::write_kv_pages (util/fp8.h), bit for bit.
      const int head = static_cast<int>(e / a.kv.head_dim);
      static_cast<__nv_fp8_storage_t*>(a.k_pages)[dst + e] =
          __nv_cvt_float_to_fp8(a.k[src + e] / a.k_scales[head], __NV_SATFINITE, __NV_E4M3);
      static_cast<__nv_fp8_storage_t*>(a.v_pages)[dst + e] =
          __nv_cvt_float_to_fp8(a.v[src + e] / a.v_scales[head], __NV_SATFINITE, __NV_E4M3);
    } else if constexpr (kKv == KvType::kBF16) {
      static_cast<uint16_t*>(a.k_pages)[dst + e] = float_to_bf16_bits(a.k[src + e]);
      static_cast<uint16_t*>(a.v_pages)[dst + e] = float_to_bf16_bits(a.v[src + e]);
    } else if constexpr (kKv == KvType::kF16) {
      // Round to nearest even, as util/half.h float_to_fp16_bits.
      static_cast<__half*>(a.k_pages)[dst + e] = __float2half_rn(a.k[src + e]);
      static_cast<__half*>(a.v_pages)[dst + e] = __float2half_rn(a.v[src + e]);
    } else {
      static_cast<float*>(a.k_pages)[dst + e] = a.k[src + e];
      static_cast<float*>(a.v_pages)[dst + e] = a.v[src + e];
    }
  }
}

__global__ void add_constant_kernel(float* data, int64_t n, float value) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    data[i] += value;
  }
}

}  // namespace

void launch_paged_attention_reference(const AttentionLaunch& a, cudaStream_t stream) {
  if (a.num_rows == 0) return;
  const dim3 grid(static_cast<unsigned>(a.num_rows), static_cast<unsigned>(a.num_heads));
  const size_t shared = sizeof(float) * (static_cast<size_t>(a.kv.head_dim) + kThreads);
  switch (kv_type_of(a.kv)) {
    case KvType::kBF16:
      launch_pdl(paged_attention_reference_kernel<KvType::kBF16>, grid, kThreads, shared, stream, a);
      break;
    case KvType::kF16:
      launch_pdl(paged_attention_reference_kernel<KvType::kF16>, grid, kThreads, shared, stream, a);
      break;
    case KvType::kF32:
      launch_pdl(paged_attention_reference_kernel<KvType::kF32>, grid, kThreads, shared, stream, a);
      break;
    case KvType::kFp8:
      launch_pdl(paged_attention_reference_kernel<KvType::kFp8>, grid, kThreads, shared, stream, a);
      break;
  }
  CUDA_CHECK_LAUNCH();
}

void launch_write_kv(const KvWriteLaunch& a, cudaStream_t stream) {
  if (a.num_rows == 0) return;
  constexpr int kWriteThreads = 256;
  switch (kv_type_of(a.kv)) {
    case KvType::kBF16:
      launch_pdl(write_kv_kernel<KvType::kBF16>, a.num_rows, kWriteThreads, 0, stream, a);
      break;
    case KvType::kF16:
      launch_pdl(write_kv_kernel<KvType::kF16>, a.num_rows, kWriteThreads, 0, stream, a);
      break;
    case KvType::kF32:
      launch_pdl(write_kv_kernel<KvType::kF32>, a.num_rows, kWriteThreads, 0, stream, a);
      break;
    case KvType::kFp8:
      launch_pdl(write_kv_kernel<KvType::kFp8>, a.num_rows, kWriteThreads, 0, stream, a);
      break;
  }
  CUDA_CHECK_LAUNCH();
}

void launch_add_constant(float* data, int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  launch_pdl(add_constant_kernel, 256, 256, 0, stream, data, n, value);
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda::detail
