// Kernels of cudnn_sdpa_convert.h: one block per sequence (prepare) or per scratch row (convert);
// the conversions move 4 elements per thread when the f32 side is 16-byte aligned.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cudnn_sdpa_convert.h"
#include "kernels/cuda/pdl.cuh"

namespace spindle::kernels::cuda::detail {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) prepare_kernel(CudnnSdpaPrepareParams p) {
  pdl_begin();
  const int s = blockIdx.x;
  int q_len = 1;  // padding sequence: 1 query token attending to slot 0 of page 0
  int kv_len = 1;
  int num_pages = 0;
  int table_offset = 0;
  int64_t first_row = int64_t{p.num_rows} + (s - p.num_sequences);
  if (s < p.num_sequences) {
    const DeviceSequence seq = p.sequences[s];
    q_len = seq.num_new_tokens;
    kv_len = seq.num_cached_tokens + seq.num_new_tokens;
    num_pages = (kv_len + p.page_size - 1) / p.page_size;
    table_offset = seq.page_table_offset;
    first_row = seq.query_offset;
  }
  if (threadIdx.x == 0) {
    p.seq_len_q[s] = q_len;
    p.seq_len_kv[s] = kv_len;
    if (p.ragged_offsets != nullptr) {
      p.ragged_offsets[s] = static_cast<int32_t>(first_row * p.row_elems);
      if (s == p.batch - 1) {
        const int64_t total_rows = int64_t{p.num_rows} + (p.batch - p.num_sequences);
        p.ragged_offsets[p.batch] = static_cast<int32_t>(total_rows * p.row_elems);
      }
    }
  }
  int32_t* table = p.page_table + int64_t{s} * p.table_width;
  for (int j = threadIdx.x; j < p.table_width; j += kThreads) {
    table[j] = j < num_pages ? p.page_tables[table_offset + j] : 0;
  }
}

// The q / out row of scratch row r, or -1 when none maps to it.
__device__ __forceinline__ int64_t q_row_of(const CudnnSdpaConvertParams& p, int64_t r) {
  if (p.padded_q_len == 0) return r < p.num_rows ? r : -1;
  const int64_t s = r / p.padded_q_len;
  const int i = static_cast<int>(r % p.padded_q_len);
  if (s >= p.num_sequences) return -1;
  const DeviceSequence seq = p.sequences[s];
  return i < seq.num_new_tokens ? int64_t{seq.query_offset} + i : -1;
}

__device__ __forceinline__ void store_io(__nv_bfloat16* dst, float v) { *dst = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_io(__half* dst, float v) { *dst = __float2half_rn(v); }
__device__ __forceinline__ float load_io(const __nv_bfloat16* src) { return __bfloat162float(*src); }
__device__ __forceinline__ float load_io(const __half* src) { return __half2float(*src); }

__device__ __forceinline__ void store_io4(__nv_bfloat16* dst, float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 bits;
  bits.x = *reinterpret_cast<const uint32_t*>(&lo);
  bits.y = *reinterpret_cast<const uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(dst) = bits;
}
__device__ __forceinline__ void store_io4(__half* dst, float4 v) {
  const __half2 lo = __floats2half2_rn(v.x, v.y);
  const __half2 hi = __floats2half2_rn(v.z, v.w);
  uint2 bits;
  bits.x = *reinterpret_cast<const uint32_t*>(&lo);
  bits.y = *reinterpret_cast<const uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(dst) = bits;
}
__device__ __forceinline__ float4 load_io4(const __nv_bfloat16* src) {
  const uint2 bits = *reinterpret_cast<const uint2*>(src);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ float4 load_io4(const __half* src) {
  const uint2 bits = *reinterpret_cast<const uint2*>(src);
  const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&bits.x));
  const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&bits.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// Block r writes scratch row r. vec4: q is 16-byte aligned (row_elems is a multiple of 8).
template <typename T>
__global__ void __launch_bounds__(kThreads) q_to_io_kernel(CudnnSdpaConvertParams p, const float* q, T* q_io,
                                                           bool vec4) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const int64_t src = q_row_of(p, r);
  T* dst = q_io + r * p.row_elems;
  const float* in = src >= 0 ? q + src * p.row_elems : nullptr;
  if (vec4) {
    for (int64_t e = int64_t{threadIdx.x} * 4; e < p.row_elems; e += kThreads * 4) {
      const float4 v = in != nullptr ? *reinterpret_cast<const float4*>(in + e) : make_float4(0.f, 0.f, 0.f, 0.f);
      store_io4(dst + e, v);
    }
  } else {
    for (int64_t e = threadIdx.x; e < p.row_elems; e += kThreads) store_io(dst + e, in != nullptr ? in[e] : 0.0f);
  }
}

// Block r reads scratch row r into its out row (if any).
template <typename T>
__global__ void __launch_bounds__(kThreads) o_to_f32_kernel(CudnnSdpaConvertParams p, const T* o_io, float* out,
                                                            bool vec4) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const int64_t dst_row = q_row_of(p, r);
  if (dst_row < 0) return;
  const T* src = o_io + r * p.row_elems;
  float* dst = out + dst_row * p.row_elems;
  if (vec4) {
    for (int64_t e = int64_t{threadIdx.x} * 4; e < p.row_elems; e += kThreads * 4) {
      *reinterpret_cast<float4*>(dst + e) = load_io4(src + e);
    }
  } else {
    for (int64_t e = threadIdx.x; e < p.row_elems; e += kThreads) dst[e] = load_io(src + e);
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

void launch_cudnn_sdpa_prepare(const CudnnSdpaPrepareParams& p, cudaStream_t stream) {
  if (p.batch == 0) return;
  launch_pdl(prepare_kernel, p.batch, kThreads, 0, stream, p);
  CUDA_CHECK_LAUNCH();
}

void launch_cudnn_sdpa_q_to_io(const CudnnSdpaConvertParams& p, const float* q, void* q_io, cudaStream_t stream) {
  const int64_t rows = cudnn_sdpa_scratch_rows(p);
  if (rows == 0) return;
  const bool vec4 = aligned16(q) && aligned16(q_io) && p.row_elems % 4 == 0;
  if (p.io_type == KvType::kF16) {
    launch_pdl(q_to_io_kernel<__half>, static_cast<unsigned>(rows), kThreads, 0, stream, p, q,
               static_cast<__half*>(q_io), vec4);
  } else {
    launch_pdl(q_to_io_kernel<__nv_bfloat16>, static_cast<unsigned>(rows), kThreads, 0, stream, p, q,
               static_cast<__nv_bfloat16*>(q_io), vec4);
  }
  CUDA_CHECK_LAUNCH();
}

void launch_cudnn_sdpa_o_to_f32(const CudnnSdpaConvertParams& p, const void* o_io, float* out,
                                cudaStream_t stream) {
  // Packed: only the first num_rows scratch rows map to out rows.
  const int64_t rows = p.padded_q_len == 0 ? p.num_rows : cudnn_sdpa_scratch_rows(p);
  if (rows == 0) return;
  const bool vec4 = aligned16(out) && aligned16(o_io) && p.row_elems % 4 == 0;
  if (p.io_type == KvType::kF16) {
    launch_pdl(o_to_f32_kernel<__half>, static_cast<unsigned>(rows), kThreads, 0, stream, p,
               static_cast<const __half*>(o_io), out, vec4);
  } else {
    launch_pdl(o_to_f32_kernel<__nv_bfloat16>, static_cast<unsigned>(rows), kThreads, 0, stream, p,
               static_cast<const __nv_bfloat16*>(o_io), out, vec4);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda::detail
