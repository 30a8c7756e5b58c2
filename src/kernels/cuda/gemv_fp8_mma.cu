// launch_gemv_fp8_mma (gemv_fp8.h): FP8-weight products of 1..32 rows on the bf16 tensor cores.
//
// kLanePieces, kRowSpans: block = kWarps warps = 64 outputs; grid (ceil(out / 64), splits) (the
// block pipelines kBlockStages / kBlockPairs: 128 outputs, x in shared memory: gemv_fp8_mma_block.cu).
// Warp w of block (b, s) owns the outputs o0 .. o0 + 15, o0 = 64 b + 16 w (rows past `out` read row
// out - 1 and store nothing), over
// the 128-column units [s U / S, (s + 1) U / S) of the input, U = ceil(in / 128). Each lane copies
// its weight pieces of a unit (64 bytes) with cp.async (L2 only) into its own slots of the warp's
// shared-memory ring, kStages - 1 units ahead of the unit it multiplies (6 KiB in flight per warp,
// no registers held), and reads them back after cp.async.wait_group; x is read through L1 (the
// block's 4 warps read the same columns of x).
//
// The k order inside a 64-column chunk is permuted so that every lane reads contiguous bytes (a sum
// over k may take any order as long as A and B agree). With g = lane / 4 and q = lane % 4, lane
// (g, q) loads the 16 weight bytes [16 q, 16 q + 16) of the chunk from rows o0 + g and o0 + g + 8,
// and the 16 bf16 values of the same columns from x row 8 t + g of each n-tile t. mma step s
// (0..3) of the chunk then uses the columns 16 q + 4 s + {0, 1, 2, 3} of lane (g, q) as the logical
// k indices {2q, 2q + 1, 8 + 2q, 9 + 2q} that mma.m16n8k16 gives that lane (mma_utils.cuh):
//   a0 = W[o0 + g][16q + 4s + 0, 1]   a2 = W[o0 + g][16q + 4s + 2, 3]   (a1, a3: row o0 + g + 8)
//   b0 = x[8t + g][16q + 4s + 0, 1]   b1 = x[8t + g][16q + 4s + 2, 3]
// so word s of the lane's weight vector gives a0/a2 (a1/a3), and words 2s, 2s + 1 of its x vectors
// give b0, b1. Every column of the chunk is used exactly once (q, s, and the 4 columns of a step).
// Columns past `in` (in % 128 != 0: the last unit is partial; in % 16 == 0, so a 16-byte piece is
// all in or all out) read nothing and count as 0 in both operands.
//
// e4m3 -> bf16 in registers: the byte b placed as (b & 0x80) << 8 | (b & 0x7F) << 4 is a bf16 with
// the e4m3 exponent field in the low bits of bf16's and the 3 mantissa bits on top of bf16's 7,
// i.e. the e4m3 value times 2^-120 (the e4m3 subnormals land on bf16 subnormals, exactly); one
// bf16x2 multiply by 2^120 (mul.rn.bf16x2: exact, subnormal inputs supported) gives the value.
//
// Why these two loads read W at 33-45% of the copy bandwidth on an H200, and the block pipelines
// that answer it: gemv_fp8_mma_block.cu.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemv_fp8.h"
#include "kernels/cuda/gemv_fp8_mma.cuh"
#include "kernels/cuda/mma_utils.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/row_dispatch.cuh"

namespace spindle::kernels::cuda {
namespace {

using namespace detail::fp8_mma;  // NOLINT (this file's kernels are built from its pieces)

constexpr int kStages = 4;                   // units of weights per warp in flight or ready (shared memory)
constexpr int64_t kMaxSplits = 64;  // (the automatic choice; a forced one may exceed it)
constexpr size_t kAlign = 256;

using detail::aligned16;

// One 64-column chunk (columns k .. k + 63 of the lane's pieces start at k + 16 q) with x read
// from global memory (through L1).
template <int kTiles>
__device__ __forceinline__ void chunk_mma(const uint4& wg, const uint4& wh, const uint16_t* __restrict__ x,
                                          int64_t rows, int64_t in, int64_t k, bool valid, int g,
                                          float (&d)[kTiles][4]) {
  uint4 xv[kTiles][2];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const int64_t r = 8 * t + g;
    if (valid && r < rows) {
      const uint4* p = reinterpret_cast<const uint4*>(x + r * in + k);
      xv[t][0] = __ldg(p);
      xv[t][1] = __ldg(p + 1);
    } else {
      xv[t][0] = make_uint4(0, 0, 0, 0);
      xv[t][1] = make_uint4(0, 0, 0, 0);
    }
  }
  chunk_mma_core<kTiles>(wg, wh, xv, d);
}

// d += unit u's product from the lane's weight pieces (chunk 0 and 1 of rows o0 + g, o0 + g + 8),
// times the unit's block scale in kBlock128.
template <int kTiles, Fp8Scale kMode>
__device__ __forceinline__ void unit_mma(const Args& a, const uint4& w0g, const uint4& w0h, const uint4& w1g,
                                         const uint4& w1h, int64_t u, const float* block_scales,
                                         float (&d)[kTiles][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int64_t k0 = u * kUnit + 16 * q, k1 = k0 + 64;
  if constexpr (kMode == Fp8Scale::kBlock128) {
    float part[kTiles][4];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) part[t][0] = part[t][1] = part[t][2] = part[t][3] = 0.0f;
    chunk_mma<kTiles>(w0g, w0h, a.x, a.rows, a.in, k0, k0 < a.in, g, part);
    chunk_mma<kTiles>(w1g, w1h, a.x, a.rows, a.in, k1, k1 < a.in, g, part);
    const float s = __ldg(block_scales + u);
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
#pragma unroll
      for (int j = 0; j < 4; ++j) d[t][j] = fmaf(part[t][j], s, d[t][j]);
    }
  } else {
    chunk_mma<kTiles>(w0g, w0h, a.x, a.rows, a.in, k0, k0 < a.in, g, d);
    chunk_mma<kTiles>(w1g, w1h, a.x, a.rows, a.in, k1, k1 < a.in, g, d);
  }
}

// ---- kLanePieces: each lane copies the bytes of its own fragments ------------------------------
// The lane's 4 weight pieces of unit u (chunk c = 0, 1 of rows o0 + g and o0 + g + 8: 16 bytes
// each from column 128 u + 64 c + 16 q) copied asynchronously into its ring slot (piece 2c + row);
// zero-filled where the unit is past the range or the piece past `in`. One commit group per unit.
__device__ __forceinline__ void issue_unit(uint4 (*ring)[4][32], int slot, int lane, const uint8_t* wg,
                                           const uint8_t* wh, int64_t u, int64_t u_end, int64_t in, int q) {
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int64_t k = u * kUnit + 64 * c + 16 * q;
    const bool valid = u < u_end && k < in;
    mma::cp_async_16(mma::shared_address(&ring[slot][2 * c][lane]), valid ? wg + k : wg, valid);
    mma::cp_async_16(mma::shared_address(&ring[slot][2 * c + 1][lane]), valid ? wh + k : wh, valid);
  }
  mma::cp_async_commit();
}

// The warp's sums d over the units [u_begin, u_end) (block scales applied per unit): the
// cp.async ring of issue_unit, kStages - 1 units ahead of the one multiplied.
template <int kTiles, Fp8Scale kMode>
__device__ __forceinline__ void stream_units(const Args& a, uint4 (*ring)[4][32], int64_t o0, int64_t u_begin,
                                             int64_t u_end, float (&d)[kTiles][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const uint8_t* wg = a.w + min(o0 + g, a.out - 1) * a.in;
  const uint8_t* wh = a.w + min(o0 + g + 8, a.out - 1) * a.in;
  // Block scales of the warp's block row (o0 .. o0 + 15 lie in one 128-row block); U per row.
  const float* block_scales =
      kMode == Fp8Scale::kBlock128 ? a.scale + (o0 / kUnit) * ((a.in + kUnit - 1) / kUnit) : nullptr;
  // Unit u_begin + i goes to slot i % kStages.
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue_unit(ring, i, lane, wg, wh, u_begin + i, u_end, a.in, q);
  for (int64_t i = 0; u_begin + i < u_end; ++i) {
    const int64_t u = u_begin + i;
    issue_unit(ring, static_cast<int>((i + kStages - 1) % kStages), lane, wg, wh, u + kStages - 1, u_end, a.in, q);
    mma::cp_async_wait<kStages - 1>();  // unit u's group has landed
    const int slot = static_cast<int>(i % kStages);
    unit_mma<kTiles, kMode>(a, ring[slot][0][lane], ring[slot][1][lane], ring[slot][2][lane], ring[slot][3][lane],
                            u, block_scales, d);
  }
  mma::cp_async_wait<0>();  // the zero-filled groups past the range too, before the block ends
}

// ---- kRowSpans: a copy instruction covers 2 rows x 256 contiguous bytes --------------------------
// Stage = the warp's 16 rows x 256 columns (2 units, 4 KiB); copy i (0..7) of lane l: row
// 2i + l / 16, columns 16 (l % 16) .. + 15 of the stage. Stored at row r, 16-byte slot
// c ^ 4 (r % 2) (c = column / 16): the reads of unit_mma's pieces (lanes g = 2p, 2p + 1 of one
// 8-lane phase read slots c0 + q of rows 2p and 2p + 1) then hit all 32 banks once.
constexpr int kSpanStages = 3;                             // stages per warp (2 in flight)
constexpr int kSpanRowBytes = 2 * kUnit;                   // 256
constexpr int kSpanStageBytes = 16 * kSpanRowBytes;        // 4096
constexpr int kSpanBlockBytes = kWarps * kSpanStages * kSpanStageBytes;  // 48 KiB, dynamic

__device__ __forceinline__ int span_offset(int row, int column) {  // byte offset in a stage
  return row * kSpanRowBytes + (((column >> 4) ^ ((row & 1) << 2)) << 4);
}

// Stage (units u, u + 1 of the range [.., u_end)) into slot `slot` of the warp's stages; zero-filled
// past u_end or `in`. One commit group.
__device__ __forceinline__ void issue_span(const Args& a, uint8_t* stages, int slot, int lane, int64_t o0, int64_t u,
                                           int64_t u_end) {
  const int column = 16 * (lane & 15);
  const int64_t k = u * kUnit + column;
  const bool valid = u + column / kUnit < u_end && k < a.in;
#pragma unroll 1  // (unrolled, the 8 row pointers stay live through the multiply and spill)
  for (int i = 0; i < 8; ++i) {
    const int row = 2 * i + (lane >> 4);
    const uint8_t* src = a.w + min(o0 + row, a.out - 1) * a.in;
    mma::cp_async_16(mma::shared_address(stages + slot * kSpanStageBytes + span_offset(row, column)),
                     valid ? src + k : src, valid);
  }
  mma::cp_async_commit();
}

template <int kTiles, Fp8Scale kMode>
__device__ __forceinline__ void stream_spans(const Args& a, uint8_t* stages, int64_t o0, int64_t u_begin,
                                             int64_t u_end, float (&d)[kTiles][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const float* block_scales =
      kMode == Fp8Scale::kBlock128 ? a.scale + (o0 / kUnit) * ((a.in + kUnit - 1) / kUnit) : nullptr;
  // Stage i (units u_begin + 2i, + 1) goes to slot i % kSpanStages.
#pragma unroll
  for (int i = 0; i < kSpanStages - 1; ++i) issue_span(a, stages, i, lane, o0, u_begin + 2 * i, u_end);
  for (int64_t i = 0; u_begin + 2 * i < u_end; ++i) {
    __syncwarp();  // every lane has read the slot refilled now (stage i - 1's)
    issue_span(a, stages, static_cast<int>((i + kSpanStages - 1) % kSpanStages), lane, o0,
               u_begin + 2 * (i + kSpanStages - 1), u_end);
    mma::cp_async_wait<kSpanStages - 1>();  // this lane's copies of stage i have landed
    __syncwarp();                           // and every other lane's
    const uint8_t* stage = stages + static_cast<int>(i % kSpanStages) * kSpanStageBytes;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t u = u_begin + 2 * i + j;
      if (u >= u_end) break;  // warp-uniform
      const int c0 = j * static_cast<int>(kUnit) + 16 * q;
      const auto piece = [&](int row, int column) {
        return *reinterpret_cast<const uint4*>(stage + span_offset(row, column));
      };
      unit_mma<kTiles, kMode>(a, piece(g, c0), piece(g + 8, c0), piece(g, c0 + 64), piece(g + 8, c0 + 64), u,
                              block_scales, d);
    }
  }
  mma::cp_async_wait<0>();
}

template <int kTiles, Fp8Scale kMode, Fp8MmaLoad kLoad>
__global__ void __launch_bounds__(kThreads, 4) gemv_fp8_mma_kernel(Args a) {
  // kLanePieces: each warp's ring of kStages units of weight pieces, [slot][piece][lane] (16 bytes
  // each: a lane reads back only what it copied, so no barrier; lane-contiguous, so conflict-free).
  // kRowSpans: kSpanStages stages per warp in the dynamic shared memory (kSpanBlockBytes).
  __shared__ uint4 ring[kLoad == Fp8MmaLoad::kLanePieces ? kWarps : 1][kStages][4][32];
  extern __shared__ uint4 spans[];
  pdl_begin();
  const int warp = threadIdx.x / 32;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kBlockOuts + 16 * warp;
  const int64_t units = (a.in + kUnit - 1) / kUnit;
  const int64_t split = blockIdx.y;
  float d[1][kTiles][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) d[0][t][0] = d[0][t][1] = d[0][t][2] = d[0][t][3] = 0.0f;
  // Whole warps: a warp whose first row exists runs (its last 15 rows may be clamped).
  if (o0 < a.out) {
    const int64_t u_begin = units * split / a.splits, u_end = units * (split + 1) / a.splits;
    if constexpr (kLoad == Fp8MmaLoad::kLanePieces) {
      stream_units<kTiles, kMode>(a, ring[warp], o0, u_begin, u_end, d[0]);
    } else {
      uint8_t* stages = reinterpret_cast<uint8_t*>(spans) + warp * kSpanStages * kSpanStageBytes;
      stream_spans<kTiles, kMode>(a, stages, o0, u_begin, u_end, d[0]);
    }
  }
  write_result<kTiles, kMode, kBlockOuts, kThreads, 1>(a, o0, d);
}

template <int kTiles, Fp8Scale kMode, Fp8MmaLoad kLoad>
Kernel kernel_of() {
  return gemv_fp8_mma_kernel<kTiles, kMode, kLoad>;
}

template <int kTiles, Fp8MmaLoad kLoad>
Kernel kernel_of(Fp8Scale mode) {
  switch (mode) {
    case Fp8Scale::kPerTensor: return kernel_of<kTiles, Fp8Scale::kPerTensor, kLoad>();
    case Fp8Scale::kPerChannel: return kernel_of<kTiles, Fp8Scale::kPerChannel, kLoad>();
    case Fp8Scale::kBlock128: return kernel_of<kTiles, Fp8Scale::kBlock128, kLoad>();
  }
  return nullptr;
}

template <Fp8MmaLoad kLoad>
Kernel kernel_of(int tiles, Fp8Scale mode) {
  switch (tiles) {
    case 1: return kernel_of<1, kLoad>(mode);
    case 2: return kernel_of<2, kLoad>(mode);
    case 3: return kernel_of<3, kLoad>(mode);
    default: return kernel_of<4, kLoad>(mode);
  }
}

Kernel kernel_of(int tiles, Fp8Scale mode, Fp8MmaLoad load) {
  switch (load) {
    case Fp8MmaLoad::kLanePieces: return kernel_of<Fp8MmaLoad::kLanePieces>(tiles, mode);
    case Fp8MmaLoad::kRowSpans: return kernel_of<Fp8MmaLoad::kRowSpans>(tiles, mode);
    case Fp8MmaLoad::kBlockStages: return block_kernel_of(tiles, mode, 1);
    case Fp8MmaLoad::kBlockPairs: return block_kernel_of(tiles, mode, 2);
  }
  return nullptr;
}

bool block_pipeline(Fp8MmaLoad load) {
  return load == Fp8MmaLoad::kBlockStages || load == Fp8MmaLoad::kBlockPairs;
}

size_t dynamic_bytes(Fp8MmaLoad load, int tiles) {
  if (load == Fp8MmaLoad::kRowSpans) return kSpanBlockBytes;
  if (!block_pipeline(load)) return 0;
  return block_dynamic_bytes(tiles);
}

int threads_of(Fp8MmaLoad load) {
  return load == Fp8MmaLoad::kBlockStages  ? block_threads(1)
         : load == Fp8MmaLoad::kBlockPairs ? block_threads(2)
                                           : kThreads;
}
int64_t outs_of(Fp8MmaLoad load) { return block_pipeline(load) ? kBOuts : kBlockOuts; }

constexpr int kMaxDevices = 64;
constexpr Fp8Scale kModes[] = {Fp8Scale::kPerTensor, Fp8Scale::kPerChannel, Fp8Scale::kBlock128};
constexpr Fp8MmaLoad kLoads[] = {Fp8MmaLoad::kLanePieces, Fp8MmaLoad::kRowSpans, Fp8MmaLoad::kBlockStages,
                                 Fp8MmaLoad::kBlockPairs};

int current_device() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device >= 0 && device < kMaxDevices ? device : 0;
}

// How many blocks of the kernel for (tiles, mode, load) the current device holds at once (SMs x
// blocks per SM at its registers and shared memory), cached per device; the first query also
// lets kRowSpans and the block pipelines use their dynamic shared memory (48 KiB; 72-96 KiB). Queried at fp8_mma_workspace_init
// (load), so a launch inside a graph capture asks the driver nothing.
int64_t resident_blocks(int tiles, Fp8Scale mode, Fp8MmaLoad load) {
  static std::atomic<int> cached[kMaxDevices][4][3][4] = {};
  const int device = current_device();
  std::atomic<int>& slot = cached[device][tiles - 1][static_cast<int>(mode)][static_cast<int>(load)];
  int n = slot.load(std::memory_order_relaxed);
  if (n == 0) {
    const Kernel kernel = kernel_of(tiles, mode, load);
    const size_t dynamic = dynamic_bytes(load, tiles);
    if (dynamic > 0) {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic)));
    }
    int sms = 0, per_sm = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads_of(load), dynamic));
    n = std::max(1, sms * per_sm);
    slot.store(n, std::memory_order_relaxed);
  }
  return n;
}

// The most outputs the resident blocks of any kernel cover (resident blocks x outputs per block).
int64_t max_resident_outputs() {
  int64_t n = 0;
  for (int tiles = 1; tiles <= 4; ++tiles) {
    for (const Fp8Scale mode : kModes) {
      for (const Fp8MmaLoad load : kLoads) n = std::max(n, resident_blocks(tiles, mode, load) * outs_of(load));
    }
  }
  return n;
}

int64_t counter_bytes(int64_t max_out) {
  const int64_t groups = (std::max<int64_t>(max_out, 1) + kBlockOuts - 1) / kBlockOuts;
  return (groups * 4 + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

int64_t gemv_fp8_mma_splits(int64_t rows, int64_t out, int64_t in, int64_t resident, Fp8MmaLoad load) {
  const int64_t groups = (out + outs_of(load) - 1) / outs_of(load);
  const int64_t units = (in + kUnit - 1) / kUnit;
  const int64_t traffic_cap = in / (16 * std::max<int64_t>(rows, 1));  // 4 S rows out <= out in / 4
  return std::clamp<int64_t>(std::min(resident / groups, traffic_cap), 1, std::min(units, kMaxSplits));
}

int64_t gemv_fp8_mma_resident_blocks(int64_t rows, Fp8Scale mode, Fp8MmaLoad load) {
  return resident_blocks(static_cast<int>(std::clamp<int64_t>((rows + 7) / 8, 1, 4)), mode, load);
}

int64_t fp8_mma_workspace_bytes(int64_t max_out) {
  // At the automatic splits S * groups <= resident blocks where S > 1, so S * rows * out <=
  // resident * (outputs per block) * 32 floats.
  return counter_bytes(max_out) + max_resident_outputs() * kGemvFp8MmaMaxRows * int64_t{sizeof(float)};
}

Fp8MmaWorkspace fp8_mma_workspace_init(void* base, int64_t bytes, int64_t max_out) {
  const int64_t cb = counter_bytes(max_out);
  if (base == nullptr || reinterpret_cast<uintptr_t>(base) % kAlign != 0 || bytes < cb) {
    throw_cuda_error(cudaErrorInvalidValue, "fp8_mma_workspace_init: buffer null, misaligned or too small", __FILE__,
                     __LINE__);
  }
  max_resident_outputs();  // the occupancy cache filled now, outside any capture
  fill_zero(base, static_cast<size_t>(cb));
  Fp8MmaWorkspace ws;
  ws.counters = static_cast<uint32_t*>(base);
  ws.counter_count = cb / 4;
  ws.partial = reinterpret_cast<float*>(static_cast<char*>(base) + cb);
  ws.partial_floats = (bytes - cb) / int64_t{sizeof(float)};
  return ws;
}

Fp8MmaLoad gemv_fp8_mma_load_for(int64_t rows) {
  return rows <= 16 ? Fp8MmaLoad::kBlockStages : Fp8MmaLoad::kBlockPairs;
}

bool gemv_fp8_mma_supports(int64_t rows, int64_t in, const void* w, const void* x) {
  return rows >= 1 && rows <= kGemvFp8MmaMaxRows && in > 0 && in % 16 == 0 && aligned16(w) && aligned16(x);
}

void launch_gemv_fp8_mma(const uint8_t* w, const float* scale, Fp8Scale mode, const uint16_t* x_bf16, int64_t rows,
                         int64_t in, int64_t out, const float* bias, float* y, const Fp8MmaWorkspace& workspace,
                         cudaStream_t stream, int64_t splits, Fp8MmaLoad load) {
  if (!gemv_fp8_mma_supports(rows, in, w, x_bf16) || out <= 0 || (out + kBlockOuts - 1) / kBlockOuts > 0x7fffffff ||
      (load != Fp8MmaLoad::kLanePieces && load != Fp8MmaLoad::kRowSpans && !block_pipeline(load)) ||
      scale == nullptr || splits < 0) {
    throw_cuda_error(cudaErrorInvalidValue, "launch_gemv_fp8_mma: unsupported shape, alignment or missing scale",
                     __FILE__, __LINE__);
  }
  const int64_t units = (in + kUnit - 1) / kUnit;
  const int tiles = static_cast<int>((rows + 7) / 8);
  int64_t s = splits > 0 ? std::min(splits, units)
                         : gemv_fp8_mma_splits(rows, out, in, resident_blocks(tiles, mode, load), load);
  const int64_t groups = (out + outs_of(load) - 1) / outs_of(load);  // (<= the counters of 64-output groups)
  if (workspace.counters == nullptr || workspace.counter_count < groups) s = 1;
  if (s > 1) s = std::min(s, workspace.partial_floats / (rows * out));
  s = std::clamp<int64_t>(s, 1, std::min<int64_t>(units, 65535));
  const Args a{w, scale, x_bf16, rows, in, out, bias, y, workspace.partial, workspace.counters, s};
  const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(s));
  if (splits > 0) resident_blocks(tiles, mode, load);  // (the shared-memory attribute set)
  launch_pdl(kernel_of(tiles, mode, load), grid, threads_of(load), dynamic_bytes(load, tiles), stream, a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda
