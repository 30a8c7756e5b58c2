// Kernels of gemv_mma.h.
//
// Tiling. A block owns 16 * kMT consecutive output features (kMT m16 tiles) for every batch row
// (kNT n8 tiles: rows 1-8 or 9-16); its kWarps warps split `in` between them and their partial
// sums meet in shared memory at the end. Lane (g = lane / 4, t = lane % 4) reads, per group of 32
// input columns, the 16-byte vector t of W's rows g and g + 8 of each m tile, and the same vector
// of x's row g of each n tile.
//
// The K order trick. The dot product sums over the input columns in any order, so W and x only
// have to agree on which physical column sits in which of mma's K slots. A lane's 16-byte vector
// holds physical columns 8t .. 8t + 7 of the group; the m16n8k16 fragments want, per lane, K slots
// {2t, 2t + 1} and {2t + 8, 2t + 9} (mma_utils.cuh). So the vector's words 0, 1 go to slots
// (2t, 2t + 1), (2t + 8, 2t + 9) of a first product and words 2, 3 to the same slots of a second:
// both A (W, rows g and g + 8) and B (x, column g) take their words from the vectors as loaded,
// with no shuffle and no shared-memory staging.
//
// Rows past `rows` (an n tile is 8 wide) and features past `out` read a clamped valid row and
// their sums are dropped; a group of 32 columns past `in` (in % 32 != 0) reads zeros.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemv_mma.h"
#include "kernels/cuda/mma_utils.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/stream_load.cuh"

namespace spindle::kernels::cuda {
namespace {

namespace mma = detail::mma;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;  // groups of 32 columns per warp iteration: 16-byte W loads in flight per row and lane

using detail::load_stream;

// The two m16n8k16 products of one group: W vectors of rows g (lo) and g + 8 (hi), x vector xv.
template <bool kBf16>
__device__ __forceinline__ void mma_group(float (&acc)[4], uint4 lo, uint4 hi, uint4 xv) {
  const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y};
  mma::mma_16816<kBf16>(acc, a0, xv.x, xv.y);
  const uint32_t a1[4] = {lo.z, hi.z, lo.w, hi.w};
  mma::mma_16816<kBf16>(acc, a1, xv.z, xv.w);
}

template <int kMT, int kNT, bool kBf16>
__global__ void __launch_bounds__(kThreads)
    gemv_mma_kernel(const uint16_t* __restrict__ w, const uint16_t* __restrict__ x, int rows, int64_t in, int64_t out,
                    const float* __restrict__ bias, float* __restrict__ y) {
  constexpr int kValues = kMT * kNT * 4;  // accumulators per lane
  __shared__ float4 partial[kWarps][kMT * kNT][32];
  pdl_begin();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * 16 * kMT;
  const int64_t vecs = in / 8;  // 16-byte vectors per row

  const uint4* wrow[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t o = min(m0 + 16 * mt + 8 * h + g, out - 1);
      wrow[mt][h] = reinterpret_cast<const uint4*>(w + o * in) + t;
    }
  }
  const uint4* xrow[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    xrow[nt] = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(min(8 * nt + g, rows - 1)) * in) + t;
  }

  float acc[kMT][kNT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
  }

  // Group i (32 columns = 4 vectors) belongs to warp (i / kUnroll) % kWarps; v0 is the warp's
  // first vector of an iteration (warp-uniform: every lane runs every mma).
  constexpr int64_t kStep = int64_t{4} * kUnroll * kWarps;
  int64_t v0 = int64_t{4} * kUnroll * warp;
  for (; v0 + 4 * kUnroll <= vecs; v0 += kStep) {
    uint4 wv[kUnroll][kMT][2];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        wv[u][mt][0] = load_stream(wrow[mt][0] + v0 + 4 * u);
        wv[u][mt][1] = load_stream(wrow[mt][1] + v0 + 4 * u);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const uint4 xv = __ldg(xrow[nt] + v0 + 4 * u);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) mma_group<kBf16>(acc[mt][nt], wv[u][mt][0], wv[u][mt][1], xv);
      }
    }
  }
  // The last, partial iteration (at most one warp has one): vectors past the row read as zeros.
  if (v0 < vecs) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int u = 0; u < kUnroll && v0 + 4 * u < vecs; ++u) {
      const bool valid = v0 + 4 * u + t < vecs;
      uint4 lo[kMT], hi[kMT];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        lo[mt] = valid ? load_stream(wrow[mt][0] + v0 + 4 * u) : zero;
        hi[mt] = valid ? load_stream(wrow[mt][1] + v0 + 4 * u) : zero;
      }
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const uint4 xv = valid ? __ldg(xrow[nt] + v0 + 4 * u) : zero;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) mma_group<kBf16>(acc[mt][nt], lo[mt], hi[mt], xv);
      }
    }
  }

  // Partial sums of the warps -> shared; then thread i sums value i over the warps and stores it.
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      partial[warp][mt * kNT + nt][lane] = make_float4(acc[mt][nt][0], acc[mt][nt][1], acc[mt][nt][2], acc[mt][nt][3]);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kValues * 32; i += kThreads) {
    // i = ((tile * 32) + lane') * 4 + c, tile = mt * kNT + nt; fragment c of lane' (mma_utils.cuh's C):
    // c0, c1: feature g', rows 2t', 2t' + 1; c2, c3: feature g' + 8, the same rows.
    const int c = i & 3, l = (i >> 2) & 31, tile = i >> 7;
    const int mt = tile / kNT, nt = tile % kNT;
    const int row = 8 * nt + 2 * (l & 3) + (c & 1);
    const int64_t o = m0 + 16 * mt + (l >> 2) + 8 * (c >> 1);
    if (row >= rows || o >= out) continue;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) s += reinterpret_cast<const float*>(&partial[k][tile][l])[c];
    if (bias != nullptr) s += bias[o];
    y[static_cast<int64_t>(row) * out + o] = s;
  }
}

template <int kMT, int kNT>
void launch_tiles(const uint16_t* w, const uint16_t* x, int rows, int64_t in, int64_t out, bool bf16, const float* bias,
                  float* y, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((out + 16 * kMT - 1) / (16 * kMT));
  launch_pdl(bf16 ? gemv_mma_kernel<kMT, kNT, true> : gemv_mma_kernel<kMT, kNT, false>, blocks, kThreads, 0, stream, w,
             x, rows, in, out, bias, y);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Two m tiles per block where the product has enough features to fill the GPU twice over with
// them (x is then read half as often); one where fewer blocks would leave SMs idle.
bool two_m_tiles(int64_t out) { return out >= 16384; }

}  // namespace

bool gemv_mma_supports(int64_t rows, int64_t in, const void* w, const void* x) {
  return rows >= 1 && rows <= kGemvMmaMaxRows && in > 0 && in % 8 == 0 && aligned16(w) && aligned16(x);
}

void launch_gemv_mma(const void* w, const void* x, int64_t rows, int64_t in, int64_t out, bool bf16, const float* bias,
                     float* y, cudaStream_t stream) {
  if (!gemv_mma_supports(rows, in, w, x) || out <= 0 || out > int64_t{16} * 0x7fffffff) {
    throw_cuda_error(cudaErrorInvalidValue, "launch_gemv_mma: unsupported shape or alignment", __FILE__, __LINE__);
  }
  const auto* w16 = static_cast<const uint16_t*>(w);
  const auto* x16 = static_cast<const uint16_t*>(x);
  const int r = static_cast<int>(rows);
  if (two_m_tiles(out)) {
    if (rows <= 8) {
      launch_tiles<2, 1>(w16, x16, r, in, out, bf16, bias, y, stream);
    } else {
      launch_tiles<2, 2>(w16, x16, r, in, out, bf16, bias, y, stream);
    }
  } else if (rows <= 8) {
    launch_tiles<1, 1>(w16, x16, r, in, out, bf16, bias, y, stream);
  } else {
    launch_tiles<1, 2>(w16, x16, r, in, out, bf16, bias, y, stream);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda
