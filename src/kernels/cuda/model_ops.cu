// Kernels of model_ops.h. Element-wise ops are grid-stride loops over 64-bit indices; RMSNorm
// runs one warp per row for short rows (per-head q/k norm) and one block per row otherwise, with
// the row in registers where its width and alignment allow (row_norm_vec_kernel).
// Products and sums that the CPU code writes without FMA use the _rn intrinsics, which nvcc
// never contracts, so the results match kernels/cpu/ops.cc bit for bit where the inputs do
// (expf and the f64 cos/sin past the RoPE table may differ in the last bit).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/qkv_rope.cuh"
#include "kernels/cuda/round16.cuh"
#include "kernels/cuda/row_norm.cuh"

namespace spindle::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;
// Rows of at most this many columns (per-head q/k norms) get one warp each, 8 rows per block;
// longer rows (hidden states) one block each.
constexpr int64_t kWarpRowMaxCols = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ __forceinline__ int64_t global_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__device__ __forceinline__ float load_weight(const void* w, WeightType type, int64_t i) {
  switch (type) {
    case WeightType::kF32: return static_cast<const float*>(w)[i];
    case WeightType::kBF16:
      return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(w)[i]) << 16);
    default: return __half2float(__ushort_as_half(static_cast<const uint16_t*>(w)[i]));
  }
}

__global__ void embedding_gather_kernel(const void* table, WeightType type, int64_t hidden, const int32_t* ids,
                                        int64_t n, float* out) {
  pdl_begin();
  for (int64_t e = global_index(); e < n; e += grid_stride()) {
    const int64_t row = e / hidden;
    const int64_t col = e - row * hidden;
    out[e] = load_weight(table, type, static_cast<int64_t>(ids[row]) * hidden + col);
  }
}

// Writes row `r` given its sum of squares; `first`/`step` walk this thread's columns. o16 (when
// not null) receives the same row rounded to 16 bits (Out16's type).
__device__ __forceinline__ void rms_norm_write(const float* xr, float* o, int64_t cols, double sum, const void* weight,
                                               WeightType type, float eps, int first, int step, uint16_t* o16,
                                               bool bf16) {
  const float inv_rms = inverse_rms(sum, cols, eps);
  for (int64_t i = first; i < cols; i += step) {
    const float y = __fmul_rn(__fmul_rn(xr[i], inv_rms), load_weight(weight, type, i));
    o[i] = y;
    if (o16 != nullptr) {
      float unused;
      o16[i] = round_16bit(y, bf16, &unused);
    }
  }
}

__device__ __forceinline__ uint16_t* row_of(const Out16& o, int64_t r, int64_t cols) {
  return o.out == nullptr ? nullptr : static_cast<uint16_t*>(o.out) + r * cols;
}

// One warp per row; blockDim.x == kThreads (kThreads / 32 rows per block).
__global__ void rms_norm_warp_kernel(const float* x, int64_t x_stride, const int64_t* row_index, float* out,
                                     int64_t out_stride, int64_t rows, int64_t cols, const void* weight,
                                     WeightType type, float eps, Out16 out16) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (r >= rows) return;  // whole warps leave together
  const int64_t src = row_index != nullptr ? row_index[r] : r;
  const float* xr = x + src * x_stride;
  double sum = 0.0;
  for (int64_t i = lane; i < cols; i += 32) sum += static_cast<double>(xr[i]) * static_cast<double>(xr[i]);
  sum = warp_sum(sum);
  rms_norm_write(xr, out + r * out_stride, cols, sum, weight, type, eps, lane, 32, row_of(out16, r, cols), out16.bf16);
}

// One block of kThreads per row.
__global__ void rms_norm_block_kernel(const float* x, int64_t x_stride, const int64_t* row_index, float* out,
                                      int64_t out_stride, int64_t cols, const void* weight, WeightType type,
                                      float eps, Out16 out16) {
  pdl_begin();
  __shared__ double partial[kThreads / 32];
  const int64_t r = blockIdx.x;
  const int64_t src = row_index != nullptr ? row_index[r] : r;
  const float* xr = x + src * x_stride;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    sum += static_cast<double>(xr[i]) * static_cast<double>(xr[i]);
  }
  sum = warp_sum(sum);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];  // same order in every thread
  rms_norm_write(xr, out + r * out_stride, cols, total, weight, type, eps, threadIdx.x, kThreads,
                 row_of(out16, r, cols), out16.bf16);
}

// RMSNorm of one row per block with the row held in registers: every load of the row is issued
// before the first sum, so a row costs one round trip to memory instead of one per element a
// thread walks (rms_norm_block_kernel's loop, ~14 us for 4096 columns at batch 1 on an H200).
// Float4 accesses: cols % 4 == 0, strides % 4 == 0, 16-byte aligned rows (row_norm_vec_threads checks).
// With delta, the row is x + delta and written back to x (add_rms_norm; then row_index is null).
// blockDim.x is a multiple of 32 and cols / 4 <= kRowVecs * blockDim.x.
__global__ void row_norm_vec_kernel(float* x, int64_t x_stride, const int64_t* row_index, const float* delta,
                                    float* out, int64_t out_stride, int64_t cols, const void* weight, WeightType type,
                                    float eps, Out16 out16) {
  pdl_begin();
  __shared__ double partial[kRowMaxThreads / 32];
  const int64_t r = blockIdx.x;
  const int64_t src = row_index != nullptr ? row_index[r] : r;
  float4* xr = reinterpret_cast<float4*>(x + src * x_stride);
  const int64_t vecs = cols / 4;
  float4 v[kRowVecs];
  // The norm's weights, loaded with the row (one round trip less than after the sum: -31 / -41 us
  // per 8B decode step at batch 1 / 8 on the H200, util/switches.cc's SPINDLE_CUDA_NORM_WEIGHTS_FIRST).
  float4 w[kRowVecs];
  double sum = 0.0;
#pragma unroll
  for (int j = 0; j < kRowVecs; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < vecs) {
      v[j] = xr[i];
      w[j] = load_weight4(weight, type, 4 * i);
    }
  }
  if (delta != nullptr) {
    const float4* dr = reinterpret_cast<const float4*>(delta + r * cols);
#pragma unroll
    for (int j = 0; j < kRowVecs; ++j) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (i < vecs) {
        v[j] = add4(v[j], dr[i]);
        xr[i] = v[j];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kRowVecs; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < vecs) sum = sum_squares4(sum, v[j]);
  }
  sum = warp_sum(sum);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += partial[w];  // same order in every thread
  const float inv_rms = inverse_rms(total, cols, eps);
  float4* o = reinterpret_cast<float4*>(out + r * out_stride);
  uint2* o16 = out16.out == nullptr ? nullptr : reinterpret_cast<uint2*>(static_cast<uint16_t*>(out16.out) + r * cols);
#pragma unroll
  for (int j = 0; j < kRowVecs; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < vecs) store_normed4(v[j], w[j], inv_rms, i, o, o16, out16.bf16);
  }
}

__global__ void rope_kernel(float* q, float* k, int64_t num_tokens, int num_heads, int num_kv_heads, int head_dim,
                            const int64_t* positions, const float* table, int64_t table_positions,
                            const float* inv_freq) {
  pdl_begin();
  const int half = head_dim / 2;
  const int heads = num_heads + num_kv_heads;
  const int64_t n = num_tokens * heads * half;
  for (int64_t e = global_index(); e < n; e += grid_stride()) {
    const int i = static_cast<int>(e % half);
    const int64_t rest = e / half;
    const int head = static_cast<int>(rest % heads);
    const int64_t token = rest / heads;
    float* x = head < num_heads ? q + (token * num_heads + head) * head_dim
                                : k + (token * num_kv_heads + (head - num_heads)) * head_dim;
    const int64_t p = positions[token];
    float c, s;
    if (p < table_positions) {
      c = table[p * head_dim + i];
      s = table[p * head_dim + half + i];
    } else {
      const float angle = __fmul_rn(inv_freq[i], static_cast<float>(p));
      c = static_cast<float>(cos(static_cast<double>(angle)));
      s = static_cast<float>(sin(static_cast<double>(angle)));
    }
    const float a = x[i];
    const float b = x[i + half];
    x[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    x[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  }
}

// One K or V head row of a token into its page slot (qkv_rope.cuh store_kv_value); the warp's
// lanes split the row.
__device__ __forceinline__ void store_kv_row(void* pages, KvPagesOut::Type type, int64_t offset, const float* x, int n,
                                             int lane) {
  for (int i = lane; i < n; i += 32) store_kv_value(pages, type, offset + i, x[i]);
}

// One warp per (token, head of q, k or v); blockDim.x == kThreads.
__global__ void split_qkv_norm_rope_kernel(const float* qkv, float* q, float* k, float* v, int64_t num_tokens,
                                           int num_heads, int num_kv_heads, int head_dim, const void* q_norm,
                                           const void* k_norm, WeightType norm_type, float eps,
                                           const int64_t* positions, const float* table, int64_t table_positions,
                                           const float* inv_freq, KvPagesOut kv) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int heads = num_heads + 2 * num_kv_heads;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (w >= num_tokens * heads) return;  // whole warps leave together
  const int64_t token = w / heads;
  const int head = static_cast<int>(w % heads);
  const float* src = qkv + (token * heads + head) * head_dim;
  float* dst;
  const void* norm = nullptr;
  if (head < num_heads) {
    dst = q + (token * num_heads + head) * head_dim;
    norm = q_norm;
  } else if (head < num_heads + num_kv_heads) {
    dst = k + (token * num_kv_heads + (head - num_heads)) * head_dim;
    norm = k_norm;
  } else {
    const int kv_head = head - num_heads - num_kv_heads;
    dst = v + (token * num_kv_heads + kv_head) * head_dim;
    for (int i = lane; i < head_dim; i += 32) dst[i] = src[i];
    if (kv.v_pages != nullptr && kv.slots[token] >= 0) {
      store_kv_row(kv.v_pages, kv.kv_type, (kv.slots[token] * num_kv_heads + kv_head) * head_dim, src, head_dim, lane);
    }
    return;
  }
  if (norm != nullptr) {  // rms_norm_warp_kernel's order of sums
    double sum = 0.0;
    for (int i = lane; i < head_dim; i += 32) sum += static_cast<double>(src[i]) * static_cast<double>(src[i]);
    sum = warp_sum(sum);
    rms_norm_write(src, dst, head_dim, sum, norm, norm_type, eps, lane, 32, nullptr, true);
  } else {
    for (int i = lane; i < head_dim; i += 32) dst[i] = src[i];
  }
  __syncwarp();
  const int half = head_dim / 2;
  const int64_t p = positions[token];
  for (int i = lane; i < half; i += 32) {
    float c, s;
    rope_cos_sin(p, i, half, head_dim, table, table_positions, inv_freq, &c, &s);
    rope_rotate(dst[i], dst[i + half], c, s, &dst[i], &dst[i + half]);
  }
  if (head >= num_heads && kv.k_pages != nullptr && kv.slots[token] >= 0) {  // the rotated k row into its page
    __syncwarp();  // every lane's rotated values are visible to the warp
    const int kv_head = head - num_heads;
    store_kv_row(kv.k_pages, kv.kv_type, (kv.slots[token] * num_kv_heads + kv_head) * head_dim, dst, head_dim, lane);
  }
}

// hidden += delta and RMSNorm of the sum, one warp per row (the rms_norm_warp_kernel order).
__global__ void add_rms_norm_warp_kernel(float* hidden, const float* delta, float* out, int64_t rows, int64_t cols,
                                         const void* weight, WeightType type, float eps, Out16 out16) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  float* xr = hidden + r * cols;
  const float* dr = delta + r * cols;
  double sum = 0.0;
  for (int64_t i = lane; i < cols; i += 32) {
    const float x = __fadd_rn(xr[i], dr[i]);
    xr[i] = x;
    sum += static_cast<double>(x) * static_cast<double>(x);
  }
  sum = warp_sum(sum);
  __syncwarp();
  rms_norm_write(xr, out + r * cols, cols, sum, weight, type, eps, lane, 32, row_of(out16, r, cols), out16.bf16);
}

// The same, one block per row (the rms_norm_block_kernel order).
__global__ void add_rms_norm_block_kernel(float* hidden, const float* delta, float* out, int64_t cols,
                                          const void* weight, WeightType type, float eps, Out16 out16) {
  pdl_begin();
  __shared__ double partial[kThreads / 32];
  const int64_t r = blockIdx.x;
  float* xr = hidden + r * cols;
  const float* dr = delta + r * cols;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const float x = __fadd_rn(xr[i], dr[i]);
    xr[i] = x;
    sum += static_cast<double>(x) * static_cast<double>(x);
  }
  sum = warp_sum(sum);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();  // also: every thread's xr writes are visible to the block
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  rms_norm_write(xr, out + r * cols, cols, total, weight, type, eps, threadIdx.x, kThreads, row_of(out16, r, cols),
                 out16.bf16);
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t in_stride, float* out, int64_t rows,
                                int64_t cols, Out16 out16) {
  pdl_begin();
  const int64_t n = rows * cols;
  for (int64_t e = global_index(); e < n; e += grid_stride()) {
    const int64_t r = e / cols;
    const int64_t i = e - r * cols;
    const float g = gate[r * in_stride + i];
    const float u = up[r * in_stride + i];
    const float y = swiglu(g, u);
    out[e] = y;
    if (out16.out != nullptr) {
      float unused;
      static_cast<uint16_t*>(out16.out)[e] = round_16bit(y, out16.bf16, &unused);
    }
  }
}

// silu_mul_kernel four columns per thread, one row per blockIdx.y (no division per element):
// float4 loads and stores, the 16-bit copy as one 8-byte store. cols % 4 == 0, in_stride % 4 ==
// 0, 16-byte aligned gate, up and out, 8-byte aligned out16 (silu_mul_vec_applies checks).
// An 8000-token prefill's silu_mul (8B shape) took 747 us per layer with the scalar kernel
// (2.1 TB/s; bench/results/2026-12-05-h200-norm-epilogue).
__global__ void silu_mul_vec_kernel(const float* __restrict__ gate, const float* __restrict__ up, int64_t in_stride,
                                    float* __restrict__ out, int64_t cols, Out16 out16) {
  pdl_begin();
  const int64_t r = blockIdx.y;
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (4 * v >= cols) return;
  const float4 g = reinterpret_cast<const float4*>(gate + r * in_stride)[v];
  const float4 u = reinterpret_cast<const float4*>(up + r * in_stride)[v];
  const float4 y = make_float4(swiglu(g.x, u.x), swiglu(g.y, u.y), swiglu(g.z, u.z), swiglu(g.w, u.w));
  reinterpret_cast<float4*>(out + r * cols)[v] = y;
  if (out16.out != nullptr) {
    float unused;
    const uint32_t a = round_16bit(y.x, out16.bf16, &unused), b = round_16bit(y.y, out16.bf16, &unused);
    const uint32_t c = round_16bit(y.z, out16.bf16, &unused), d = round_16bit(y.w, out16.bf16, &unused);
    reinterpret_cast<uint2*>(static_cast<uint16_t*>(out16.out) + r * cols)[v] =
        make_uint2(a | (b << 16), c | (d << 16));
  }
}

__global__ void add_inplace_kernel(float* y, const float* x, int64_t n) {
  pdl_begin();
  for (int64_t e = global_index(); e < n; e += grid_stride()) y[e] = __fadd_rn(y[e], x[e]);
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t rows, int64_t cols) {
  pdl_begin();
  const int64_t n = rows * cols;
  for (int64_t e = global_index(); e < n; e += grid_stride()) y[e] = __fadd_rn(y[e], bias[e % cols]);
}

__global__ void sum_halves_kernel(const float* c, const float* bias, int64_t rows, int64_t cols, float* y) {
  pdl_begin();
  const int64_t n = rows * cols;
  for (int64_t e = global_index(); e < n; e += grid_stride()) {
    float v = __fadd_rn(c[e], c[n + e]);
    if (bias != nullptr) v = __fadd_rn(v, bias[e % cols]);
    y[e] = v;
  }
}

// trigger_first: pdl_begin(true) (pdl.cuh): the product reading `out` may launch at once (the
// conversion sits between the attention and the output projection).
__global__ void f32_to_16bit_kernel(const float* x, int64_t n, bool bf16, uint16_t* out, bool trigger_first) {
  pdl_begin(trigger_first);
  for (int64_t e = global_index(); e < n; e += grid_stride()) {
    float unused;
    out[e] = round_16bit(x[e], bf16, &unused);
  }
}

__global__ void split_to_16bit_kernel(const float* x, int64_t n, bool bf16, uint16_t* out) {
  pdl_begin();
  for (int64_t e = global_index(); e < n; e += grid_stride()) {
    float hi;
    out[e] = round_16bit(x[e], bf16, &hi);
    float unused;
    out[n + e] = round_16bit(__fsub_rn(x[e], hi), bf16, &unused);
  }
}

}  // namespace

void launch_embedding_gather(const void* table, WeightType type, int64_t hidden, const int32_t* ids,
                             int64_t num_ids, float* out, cudaStream_t stream) {
  const int64_t n = num_ids * hidden;
  if (n <= 0) return;
  launch_pdl(embedding_gather_kernel, blocks_for(n), kThreads, 0, stream, table, type, hidden, ids, n, out);
  CUDA_CHECK_LAUNCH();
}

namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Threads for row_norm_vec_kernel over `cols`, or 0 where it does not apply (short rows take
// the warp kernels; unaligned or too long rows the block kernels).
int row_norm_vec_threads(const void* x, int64_t x_stride, const void* delta, const void* out, int64_t out_stride,
                         int64_t cols, const void* weight, WeightType type, const Out16& out16) {
  if (cols <= kWarpRowMaxCols || cols % 4 != 0 || x_stride % 4 != 0 || out_stride % 4 != 0) return 0;
  if (!aligned16(x) || !aligned16(out) || (delta != nullptr && !aligned16(delta))) return 0;
  if (reinterpret_cast<uintptr_t>(weight) % (type == WeightType::kF32 ? 16 : 8) != 0) return 0;
  if (out16.out != nullptr && reinterpret_cast<uintptr_t>(out16.out) % 8 != 0) return 0;
  const int64_t vecs = cols / 4;
  const int64_t threads = std::min<int64_t>(kRowMaxThreads, (vecs + 31) / 32 * 32);
  return vecs <= kRowVecs * threads ? static_cast<int>(threads) : 0;
}

}  // namespace

void launch_rms_norm(const float* x, int64_t x_stride, const int64_t* row_index, float* out, int64_t out_stride,
                     int64_t rows, int64_t cols, const void* weight, WeightType weight_type, float eps,
                     cudaStream_t stream, Out16 out16) {
  if (rows <= 0 || cols <= 0) return;
  if (cols <= kWarpRowMaxCols) {
    const int64_t rows_per_block = kThreads / 32;
    const auto blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
    launch_pdl(rms_norm_warp_kernel, blocks, kThreads, 0, stream, x, x_stride, row_index, out, out_stride, rows, cols,
               weight, weight_type, eps, out16);
  } else if (const int threads =
                 row_norm_vec_threads(x, x_stride, nullptr, out, out_stride, cols, weight, weight_type, out16)) {
    launch_pdl(row_norm_vec_kernel, static_cast<unsigned>(rows), threads, 0, stream, const_cast<float*>(x), x_stride,
               row_index, nullptr, out, out_stride, cols, weight, weight_type, eps, out16);
  } else {
    launch_pdl(rms_norm_block_kernel, static_cast<unsigned>(rows), kThreads, 0, stream, x, x_stride, row_index, out,
               out_stride, cols, weight, weight_type, eps, out16);
  }
  CUDA_CHECK_LAUNCH();
}

void launch_rope(float* q, float* k, int64_t num_tokens, int num_heads, int num_kv_heads, int head_dim,
                 const int64_t* positions, const float* table, int64_t table_positions, const float* inv_freq,
                 cudaStream_t stream) {
  const int64_t n = num_tokens * (num_heads + num_kv_heads) * (head_dim / 2);
  if (n <= 0) return;
  launch_pdl(rope_kernel, blocks_for(n), kThreads, 0, stream, q, k, num_tokens, num_heads, num_kv_heads, head_dim,
             positions, table, table_positions, inv_freq);
  CUDA_CHECK_LAUNCH();
}

void launch_add_rms_norm(float* hidden, const float* delta, float* out, int64_t rows, int64_t cols,
                         const void* weight, WeightType weight_type, float eps, cudaStream_t stream, Out16 out16) {
  if (rows <= 0 || cols <= 0) return;
  if (cols <= kWarpRowMaxCols) {
    const int64_t rows_per_block = kThreads / 32;
    const auto blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
    launch_pdl(add_rms_norm_warp_kernel, blocks, kThreads, 0, stream, hidden, delta, out, rows, cols, weight,
               weight_type, eps, out16);
  } else if (const int threads = row_norm_vec_threads(hidden, cols, delta, out, cols, cols, weight, weight_type, out16)) {
    launch_pdl(row_norm_vec_kernel, static_cast<unsigned>(rows), threads, 0, stream, hidden, cols, nullptr, delta, out,
               cols, cols, weight, weight_type, eps, out16);
  } else {
    launch_pdl(add_rms_norm_block_kernel, static_cast<unsigned>(rows), kThreads, 0, stream, hidden, delta, out, cols,
               weight, weight_type, eps, out16);
  }
  CUDA_CHECK_LAUNCH();
}

void launch_split_qkv_norm_rope(const float* qkv, float* q, float* k, float* v, int64_t num_tokens, int num_heads,
                                int num_kv_heads, int head_dim, const void* q_norm, const void* k_norm,
                                WeightType norm_type, float eps, const int64_t* positions, const float* table,
                                int64_t table_positions, const float* inv_freq, cudaStream_t stream, KvPagesOut kv) {
  const int64_t warps = num_tokens * (num_heads + 2 * num_kv_heads);
  if (warps <= 0) return;
  const int64_t per_block = kThreads / 32;
  launch_pdl(split_qkv_norm_rope_kernel, static_cast<unsigned>((warps + per_block - 1) / per_block), kThreads, 0,
             stream, qkv, q, k, v, num_tokens, num_heads, num_kv_heads, head_dim, q_norm, k_norm, norm_type, eps,
             positions, table, table_positions, inv_freq, kv);
  CUDA_CHECK_LAUNCH();
}

void launch_silu_mul(const float* gate, const float* up, int64_t in_stride, float* out, int64_t rows, int64_t cols,
                     cudaStream_t stream, Out16 out16) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  const bool vec = cols % 4 == 0 && in_stride % 4 == 0 && rows <= 65535 && aligned16(gate) && aligned16(up) &&
                   aligned16(out) && reinterpret_cast<uintptr_t>(out16.out) % 8 == 0;
  if (vec) {
    const dim3 grid(static_cast<unsigned>((cols / 4 + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
    launch_pdl(silu_mul_vec_kernel, grid, kThreads, 0, stream, gate, up, in_stride, out, cols, out16);
  } else {
    launch_pdl(silu_mul_kernel, blocks_for(n), kThreads, 0, stream, gate, up, in_stride, out, rows, cols, out16);
  }
  CUDA_CHECK_LAUNCH();
}

void launch_add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch_pdl(add_inplace_kernel, blocks_for(n), kThreads, 0, stream, y, x, n);
  CUDA_CHECK_LAUNCH();
}

void launch_add_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  launch_pdl(add_bias_kernel, blocks_for(n), kThreads, 0, stream, y, bias, rows, cols);
  CUDA_CHECK_LAUNCH();
}

void launch_sum_halves(const float* c, const float* bias, int64_t rows, int64_t cols, float* y, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  launch_pdl(sum_halves_kernel, blocks_for(n), kThreads, 0, stream, c, bias, rows, cols, y);
  CUDA_CHECK_LAUNCH();
}

void launch_f32_to_16bit(const float* x, int64_t n, WeightType type, void* out, cudaStream_t stream) {
  if (n <= 0) return;
  launch_pdl(f32_to_16bit_kernel, blocks_for(n), kThreads, 0, stream, x, n, type == WeightType::kBF16,
             static_cast<uint16_t*>(out), pdl_enabled());
  CUDA_CHECK_LAUNCH();
}

void launch_split_to_16bit(const float* x, int64_t rows, int64_t cols, WeightType type, void* out,
                           cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  launch_pdl(split_to_16bit_kernel, blocks_for(n), kThreads, 0, stream, x, n, type == WeightType::kBF16,
             static_cast<uint16_t*>(out));
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda
