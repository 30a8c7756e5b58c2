// Kernels of gemv_fp8.h. Block = kWarps warps; warp w of block b computes output row
// o = b * kWarps + w for every batch row: lane l reads the 16-byte W vectors l, l + 32, ... of row
// o (kUnroll of them issued before the first is used), converts each to 16 f32 values through
// f16x2 (exact for e4m3), multiplies them with the same 16 bf16 values of each x row (two 16-byte
// loads through the cache), accumulates in f32, and the warp sums its lanes at the end.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemv_fp8.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/row_dispatch.cuh"
#include "kernels/cuda/stream_load.cuh"

namespace spindle::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;

using detail::aligned16;
using detail::load_stream;
using detail::with_rows;

// Two e4m3 weights (low byte first) as f32.
__device__ __forceinline__ float2 fp8x2_to_float2(uint16_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// Two bf16 values of one word as f32 (low half first).
__device__ __forceinline__ float2 bf16x2_to_float2(uint32_t word) {
  return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xffff0000u));
}

// sum_{e < 16} w[e] * x[e]: w one 16-byte vector of e4m3, x two 16-byte vectors of bf16 (elements
// 0-7, 8-15), added to acc in element order.
__device__ __forceinline__ float dot16(float acc, uint4 w, uint4 x0, uint4 x1) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const uint32_t xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // word i: weights 4i .. 4i + 3
    const float2 wa = fp8x2_to_float2(static_cast<uint16_t>(ws[i] & 0xffffu));
    const float2 wb = fp8x2_to_float2(static_cast<uint16_t>(ws[i] >> 16));
    const float2 xa = bf16x2_to_float2(xs[2 * i]);
    const float2 xb = bf16x2_to_float2(xs[2 * i + 1]);
    acc = fmaf(wa.x, xa.x, acc);
    acc = fmaf(wa.y, xa.y, acc);
    acc = fmaf(wb.x, xb.x, acc);
    acc = fmaf(wb.y, xb.y, acc);
  }
  return acc;
}

// One W vector v of the row against every x row: acc[r] += (block scale) * dot16.
template <int kRows, Fp8Scale kMode>
__device__ __forceinline__ void fma_vector(uint4 wv, const uint4* __restrict__ xr, int64_t xvecs, int64_t v,
                                           const float* __restrict__ block_scales, float (&acc)[kRows]) {
  if constexpr (kMode == Fp8Scale::kBlock128) {
    const float s = __ldg(block_scales + (v * 16) / kFp8ScaleBlock);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float part = dot16(0.0f, wv, __ldg(xr + r * xvecs + 2 * v), __ldg(xr + r * xvecs + 2 * v + 1));
      acc[r] = fmaf(part, s, acc[r]);
    }
  } else {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      acc[r] = dot16(acc[r], wv, __ldg(xr + r * xvecs + 2 * v), __ldg(xr + r * xvecs + 2 * v + 1));
  }
}

template <int kRows, Fp8Scale kMode>
__global__ void __launch_bounds__(kThreads)
    gemv_fp8_kernel(const uint8_t* __restrict__ w, const float* __restrict__ scale, const uint16_t* __restrict__ x,
                    int64_t in, int64_t out, const float* __restrict__ bias, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  pdl_begin();
  if (o >= out) return;  // whole warps leave together
  const uint4* wr = reinterpret_cast<const uint4*>(w + o * in);
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  const int64_t wvecs = in / 16;  // 16 weights per W vector
  const int64_t xvecs = in / 8;   // 8 activations per x vector
  const int64_t blocks_per_row = (in + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  const float* block_scales = kMode == Fp8Scale::kBlock128 ? scale + (o / kFp8ScaleBlock) * blocks_per_row : nullptr;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  int64_t v = lane;
  for (; v + 32 * (kUnroll - 1) < wvecs; v += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + v + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fma_vector<kRows, kMode>(wv[u], xr, xvecs, v + 32 * u, block_scales, acc);
  }
  for (; v < wvecs; v += 32) fma_vector<kRows, kMode>(load_stream(wr + v), xr, xvecs, v, block_scales, acc);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    for (int offset = 16; offset > 0; offset /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
  }
  if (lane != 0) return;
  float s = 1.0f;
  if constexpr (kMode == Fp8Scale::kPerTensor) s = scale[0];
  if constexpr (kMode == Fp8Scale::kPerChannel) s = scale[o];
  const float b = bias != nullptr ? bias[o] : 0.0f;
#pragma unroll
  for (int r = 0; r < kRows; ++r) y[r * out + o] = (kMode == Fp8Scale::kBlock128 ? acc[r] : acc[r] * s) + b;
}

template <int kRows>
void launch_rows(const uint8_t* w, const float* scale, Fp8Scale mode, const uint16_t* x, int64_t in, int64_t out,
                 const float* bias, float* y, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((out + kWarps - 1) / kWarps);
  switch (mode) {
    case Fp8Scale::kPerTensor:
      launch_pdl(gemv_fp8_kernel<kRows, Fp8Scale::kPerTensor>, blocks, kThreads, 0, stream, w, scale, x, in, out, bias, y);
      break;
    case Fp8Scale::kPerChannel:
      launch_pdl(gemv_fp8_kernel<kRows, Fp8Scale::kPerChannel>, blocks, kThreads, 0, stream, w, scale, x, in, out, bias,
                 y);
      break;
    case Fp8Scale::kBlock128:
      launch_pdl(gemv_fp8_kernel<kRows, Fp8Scale::kBlock128>, blocks, kThreads, 0, stream, w, scale, x, in, out, bias, y);
      break;
  }
}


}  // namespace

int64_t fp8_scale_count(Fp8Scale mode, int64_t out, int64_t in) {
  switch (mode) {
    case Fp8Scale::kPerTensor:
      return 1;
    case Fp8Scale::kPerChannel:
      return out;
    case Fp8Scale::kBlock128:
      return ((out + kFp8ScaleBlock - 1) / kFp8ScaleBlock) * ((in + kFp8ScaleBlock - 1) / kFp8ScaleBlock);
  }
  return 0;
}

bool gemv_fp8_supports(int64_t rows, int64_t in, const void* w, const void* x) {
  return rows >= 1 && rows <= kGemvFp8MaxRows && in > 0 && in % 16 == 0 && aligned16(w) && aligned16(x);
}

void launch_gemv_fp8(const uint8_t* w, const float* scale, Fp8Scale mode, const uint16_t* x_bf16, int64_t rows,
                     int64_t in, int64_t out, const float* bias, float* y, cudaStream_t stream) {
  if (!gemv_fp8_supports(rows, in, w, x_bf16) || out <= 0 || out > int64_t{kWarps} * 0x7fffffff || scale == nullptr) {
    throw_cuda_error(cudaErrorInvalidValue, "launch_gemv_fp8: unsupported shape, alignment or missing scale", __FILE__,
                     __LINE__);
  }
  with_rows<kGemvFp8MaxRows>(
      rows, [&](auto r) { launch_rows<decltype(r)::value>(w, scale, mode, x_bf16, in, out, bias, y, stream); });
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda
