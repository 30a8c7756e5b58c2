// The grouped expert products of moe_kernels.h on 16-bit tensor cores (mma.sync m16n8k16, f32
// accumulation) for bf16 / f16 experts whose rows are 16-byte aligned (in % 8 == 0, x too);
// moe_kernels.cu's f32 FMA kernel computes the rest (f32 experts, widths not a multiple of 8).
//
// Operands: A = the expert's weight rows (features x K, row-major as stored), B = the step's rows
// (tokens x K, f32), C = features x tokens in f32 registers. The f32 rows are split as the dense
// products split them (cublas_linear.h): x = hi + lo, hi = round16(x), lo = round16(x - hi) (~16
// significant bits of x), and each k-chunk multiplies A by hi, then by lo, into one accumulator.
//   gate/up: an m16 tile holds 8 features' gate rows (fragment rows 0-7) and the same features'
//            up rows (rows 8-15), so one lane holds gate and up of a (feature, token) pair and
//            applies SwiGLU itself; act is written at the grouped position (order's index).
//   down:    an m16 tile is 16 features; out is written at the choice order[i].
//
// The k-order, the same in both configurations below (no split K), so that a row's result has
// the same bits whatever the batch and the expert's row count: K runs in chunks of 32 ascending;
// in chunk k0, lane (g = lane / 4, q = lane % 4) holds columns k0 + 8q .. k0 + 8q + 7 of its A rows
// g and g + 8 (one 16-byte read each) and of token g; the first mma takes columns 8q .. 8q + 3 (as
// the fragment's k 2q, 2q + 1, 8 + 2q, 9 + 2q), the second 8q + 4 .. 8q + 7, each with hi, then lo.
// Columns past K are zeros in both operands; A rows past `out` and tokens past the expert's count
// are computed from zeros (or a repeated row) and not written.
//
// Staging: cp.async 16-byte copies into a ring of kStages slots of kColumns K columns each (a
// multiple of 32; only the 32-column chunks holding columns < K are multiplied, the same chunks in
// both configurations). Consecutive threads copy consecutive 16 bytes of a row, so one warp
// instruction reads 512 contiguous bytes when kColumns >= 128 (a former small-batch mma kernel
// that loaded 8 rows x 64 bytes per instruction read weights at 39-57% of the copy bandwidth,
// bench/results/2026-12-03-h200-gemv-mma). A rows are 2 kColumns bytes padded to 64 mod 128 (a
// quarter warp's 16-byte fragment reads cover 2 rows: distinct banks), token rows kColumns + 4
// floats (2 tokens x 4 pieces: distinct banks). Weights stream through L2 only (cp.async.cg).
//
// Configurations (block tile = A rows x tokens; grid x = feature tiles, y = the selected expert's
// slot in active[], z = every gridDim.z-th token tile of the expert):
//   decode   4 warps, each 1 m16 x 1 n8 tile: 64 A rows x 8 tokens, 128 columns a slot, 4 stages
//            (97 KiB of shared memory, 2 blocks per SM; 48 KiB of weights in flight per block);
//            an expert's rows run 8 at a time. Few rows per expert: reading the weights is the
//            cost, and N alone is split across blocks (batch 1 of Qwen3-30B-A3B: gate/up 192
//            blocks, down 256). Chosen when the step has at most 8 rows or at most
//            kDecodeMaxAverageRows choices per expert on average (a host-known bound: the counts
//            stay on the device).
//   prefill  8 warps as 4 (A rows) x 2 (tokens), each 2 m16 x 4 n8 tiles: 128 A rows x 64 tokens,
//            32 columns a slot, 3 stages (51 KiB of shared memory).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mma_utils.cuh"
#include "kernels/cuda/moe_kernels.h"
#include "kernels/cuda/moe_kernels_launch.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/round16.cuh"

namespace spindle::kernels::cuda {
namespace {

namespace mma = detail::mma;

template <int kWarpsM_, int kWarpsN_, int kMT_, int kNT_, int kColumns_, int kStages_>
struct MmaConfig {
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kMT = kMT_, kNT = kNT_;  // m16 / n8 tiles per warp
  static constexpr int kColumns = kColumns_;    // K columns per slot: kColumns / 32 chunks
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kARows = kWarpsM * kMT * 16;  // A rows per block
  static constexpr int kTokens = kWarpsN * kNT * 8;  // tokens per block tile
  // A row stride in a slot: 2 kColumns bytes, padded to 64 mod 128 so that the two rows a quarter
  // warp reads (16 bytes per lane) fall in distinct banks.
  static constexpr int kAStride = 2 * kColumns + (2 * kColumns % 128 == 0 ? 64 : 0);
  static constexpr int kABytes = kARows * kAStride;
  static constexpr int kBStride = kColumns + 4;  // floats per token (16 mod 128 bytes: 2 tokens, distinct banks)
  static constexpr int kStageBytes = kABytes + kTokens * kBStride * 4;
  static constexpr int kAPieces = kColumns / 8, kBPieces = kColumns / 4;  // 16-byte copies per row
  static constexpr int kACopies = kARows * kAPieces / kThreads;           // per thread and slot
  static constexpr int kBCopies = (kTokens * kBPieces + kThreads - 1) / kThreads;
  static_assert(kColumns % 32 == 0 && kAStride % 128 == 64, "A stride");
  static_assert(kARows * kAPieces % kThreads == 0, "A copies must divide among the threads");
  static constexpr int kSharedBytes = kStages * kStageBytes;  // dynamic shared memory
  static_assert(kStages >= 2 && kSharedBytes <= 112 * 1024, "two blocks per SM at least");
};
using DecodeConfig = MmaConfig<4, 1, 1, 1, 128, 4>;
using PrefillConfig = MmaConfig<4, 2, 2, 4, 32, 3>;

// The expert row counts up to which (on average over the experts) the decode configuration runs.
constexpr int64_t kDecodeMaxAverageRows = 8;  // one decode pass per expert on average
// The most token-tile blocks per (feature tile, expert) of the prefill configuration.
constexpr int64_t kPrefillMaxZ = 4;

// A-row r (0 .. 15) of an m16 tile: gate/up rows 0-7 gate, 8-15 up of 8 features; down 16 features.
template <bool kGateUp>
inline constexpr int kFeaturesPerTile = kGateUp ? 8 : 16;

// hi = round16(a, b), lo = round16((a, b) - hi) as packed pairs (a in the low half).
template <bool kBf16>
__device__ __forceinline__ void split2(float a, float b, uint32_t& hi, uint32_t& lo) {
  hi = mma::pack2<kBf16>(a, b);
  const float2 back = unpack2<kBf16>(hi);
  lo = mma::pack2<kBf16>(__fsub_rn(a, back.x), __fsub_rn(b, back.y));
}

// A token's 8 columns 8q .. 8q + 7 of a chunk as the B fragments: hi[0..1] / lo[0..1] for the
// first mma (columns 8q .. 8q + 3), hi[2..3] / lo[2..3] for the second.
struct SplitB {
  uint32_t hi[4], lo[4];
};
template <bool kBf16>
__device__ __forceinline__ SplitB split_b(float4 x0, float4 x1) {
  SplitB b;
  split2<kBf16>(x0.x, x0.y, b.hi[0], b.lo[0]);
  split2<kBf16>(x0.z, x0.w, b.hi[1], b.lo[1]);
  split2<kBf16>(x1.x, x1.y, b.hi[2], b.lo[2]);
  split2<kBf16>(x1.z, x1.w, b.hi[3], b.lo[3]);
  return b;
}

// d += the chunk's products of A rows g (ag) and g + 8 (ag8), columns 8q .. 8q + 7 each, with the
// token's split columns: the k-order of the header (both configurations call this).
template <bool kBf16>
__device__ __forceinline__ void mma_chunk(float (&d)[4], uint4 ag, uint4 ag8, const SplitB& b) {
  const uint32_t first[4] = {ag.x, ag8.x, ag.y, ag8.y};
  mma::mma_16816<kBf16>(d, first, b.hi[0], b.hi[1]);
  mma::mma_16816<kBf16>(d, first, b.lo[0], b.lo[1]);
  const uint32_t second[4] = {ag.z, ag8.z, ag.w, ag8.w};
  mma::mma_16816<kBf16>(d, second, b.hi[2], b.hi[3]);
  mma::mma_16816<kBf16>(d, second, b.lo[2], b.lo[3]);
}

// Where this thread's cp.async copies of one slot come from and go to (offsets within a slot).
template <typename Cfg>
struct Copies {
  const uint16_t* a_src[Cfg::kACopies];  // the A row (column 0: a valid address)
  bool a_ok[Cfg::kACopies];              // the row is a feature < out
  int a_col[Cfg::kACopies];              // the piece's first column within a slot
  uint32_t a_dst[Cfg::kACopies];
  const float* b_src[Cfg::kBCopies];     // the token row (column 0: a valid address)
  bool b_ok[Cfg::kBCopies];              // a token of the tile
  bool b_any[Cfg::kBCopies];             // the copy exists (the B pieces need not fill the threads)
  int b_col[Cfg::kBCopies];
  uint32_t b_dst[Cfg::kBCopies];
};

// The copies of K columns [slot_index * kColumns, + kColumns) into the slot at shared address
// `slot`; out-of-range pieces are zero-filled (cp.async with no source bytes: nothing is read,
// and the address given is the row's start, inside the tensor).
template <typename Cfg>
__device__ __forceinline__ void load_slot(const Copies<Cfg>& c, uint32_t slot, int64_t slot_index, int64_t in) {
  const int64_t k0 = slot_index * Cfg::kColumns;
#pragma unroll
  for (int i = 0; i < Cfg::kACopies; ++i) {
    const bool valid = c.a_ok[i] && k0 + c.a_col[i] < in;
    mma::cp_async_16(slot + c.a_dst[i], c.a_src[i] + (valid ? k0 + c.a_col[i] : 0), valid);
  }
#pragma unroll
  for (int j = 0; j < Cfg::kBCopies; ++j) {
    if (!c.b_any[j]) continue;
    const bool valid = c.b_ok[j] && k0 + c.b_col[j] < in;
    mma::cp_async_16(slot + c.b_dst[j], c.b_src[j] + (valid ? k0 + c.b_col[j] : 0), valid);
  }
}

// The 32-column chunk `sub` of a slot into the warp's accumulators.
template <typename Cfg, bool kBf16>
__device__ __forceinline__ void compute_chunk(const unsigned char* slot, int sub, int wm, int wn, int lane,
                                              float (&acc)[Cfg::kMT][Cfg::kNT][4]) {
  const int g = lane >> 2, q = lane & 3;
  uint4 ag[Cfg::kMT], ag8[Cfg::kMT];
#pragma unroll
  for (int mt = 0; mt < Cfg::kMT; ++mt) {
    const int r = (wm * Cfg::kMT + mt) * 16 + g;
    ag[mt] = *reinterpret_cast<const uint4*>(slot + r * Cfg::kAStride + sub * 64 + q * 16);
    ag8[mt] = *reinterpret_cast<const uint4*>(slot + (r + 8) * Cfg::kAStride + sub * 64 + q * 16);
  }
  const float* b = reinterpret_cast<const float*>(slot + Cfg::kABytes);
#pragma unroll
  for (int nt = 0; nt < Cfg::kNT; ++nt) {
    const float* t = b + ((wn * Cfg::kNT + nt) * 8 + g) * Cfg::kBStride + sub * 32 + q * 8;
    const SplitB sb = split_b<kBf16>(*reinterpret_cast<const float4*>(t), *reinterpret_cast<const float4*>(t + 4));
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt) mma_chunk<kBf16>(acc[mt][nt], ag[mt], ag8[mt], sb);
  }
}

// The feature of A row r of the block (gate/up: *up tells whether it is an up row).
template <typename Cfg, bool kGateUp>
__device__ __forceinline__ int64_t a_row_feature(int64_t f_block, int r, bool* up) {
  if constexpr (kGateUp) {
    *up = (r & 15) >= 8;
    return f_block + (r >> 4) * 8 + (r & 7);
  } else {
    *up = false;
    return f_block + r;
  }
}

// Writes one tile's accumulators: gate/up act[(begin + t), f] = swiglu(gate, up); down
// out[order[begin + t], f]; only features < out and tokens < n.
template <typename Cfg, bool kGateUp>
__device__ __forceinline__ void store_tile(const MoeGroupedParams& p, int64_t f_block, int tile_begin, int n, int wm,
                                           int wn, int lane, const float (&acc)[Cfg::kMT][Cfg::kNT][4]) {
  const int g = lane >> 2, q = lane & 3;
  const int64_t out = p.out_features;
#pragma unroll
  for (int mt = 0; mt < Cfg::kMT; ++mt) {
    const int64_t f = f_block + int64_t{wm * Cfg::kMT + mt} * kFeaturesPerTile<kGateUp> + g;
#pragma unroll
    for (int nt = 0; nt < Cfg::kNT; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int t = (wn * Cfg::kNT + nt) * 8 + 2 * q + j;
        if (t >= n) continue;
        if constexpr (kGateUp) {
          if (f < out) p.y[int64_t{tile_begin + t} * out + f] = swiglu(acc[mt][nt][j], acc[mt][nt][2 + j]);
        } else {
          const int64_t row = p.order[tile_begin + t];
          if (f < out) p.y[row * out + f] = acc[mt][nt][j];
          if (f + 8 < out) p.y[row * out + f + 8] = acc[mt][nt][2 + j];
        }
      }
    }
  }
}

template <typename Cfg, bool kBf16, bool kGateUp>
__global__ void __launch_bounds__(Cfg::kThreads) moe_mma_kernel(MoeGroupedParams p) {
  extern __shared__ __align__(16) unsigned char ring[];  // Cfg::kSharedBytes
  pdl_begin();  // first: the grouping and the rows are the previous kernels' outputs (pdl.cuh)
  if (static_cast<int>(blockIdx.y) >= p.active[p.num_experts]) return;  // whole blocks leave together
  const int e = p.active[blockIdx.y];
  const int begin = p.offsets[e], count = p.offsets[e + 1] - begin;
  const int64_t in = p.in_features, out = p.out_features;
  const int64_t f_block = int64_t{blockIdx.x} * (Cfg::kARows / 16) * kFeaturesPerTile<kGateUp>;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % Cfg::kWarpsM, wn = warp / Cfg::kWarpsM;
  const uint32_t ring_at = mma::shared_address(ring);

  Copies<Cfg> c;
#pragma unroll
  for (int i = 0; i < Cfg::kACopies; ++i) {
    const int id = tid + i * Cfg::kThreads, r = id / Cfg::kAPieces, piece = id % Cfg::kAPieces;
    bool up = false;
    const int64_t f = a_row_feature<Cfg, kGateUp>(f_block, r, &up);
    const void* w = up ? p.second[e] : p.first[e];
    c.a_ok[i] = f < out;
    c.a_col[i] = piece * 8;
    c.a_src[i] = static_cast<const uint16_t*>(w) + (f < out ? f : out - 1) * in;
    c.a_dst[i] = static_cast<uint32_t>(r * Cfg::kAStride + piece * 16);
  }
  const int64_t slots = (in + Cfg::kColumns - 1) / Cfg::kColumns;  // K in slot loads
  const int64_t chunks = (in + 31) / 32;                              // K in 32-column chunks
  for (int t0 = static_cast<int>(blockIdx.z) * Cfg::kTokens; t0 < count;
       t0 += static_cast<int>(gridDim.z) * Cfg::kTokens) {
    const int n = min(count - t0, Cfg::kTokens);
#pragma unroll
    for (int j = 0; j < Cfg::kBCopies; ++j) {
      const int id = tid + j * Cfg::kThreads, t = id / Cfg::kBPieces, piece = id % Cfg::kBPieces;
      c.b_any[j] = id < Cfg::kTokens * Cfg::kBPieces;
      c.b_ok[j] = c.b_any[j] && t < n;
      int64_t row = 0;
      if (c.b_ok[j]) row = kGateUp ? int64_t{p.order[begin + t0 + t] / p.top_k} : int64_t{begin + t0 + t};
      c.b_col[j] = piece * 4;
      c.b_src[j] = p.x + row * in;
      c.b_dst[j] = static_cast<uint32_t>(Cfg::kABytes + (t * Cfg::kBStride + piece * 4) * 4);
    }
    __syncthreads();  // every warp is done with the previous tile's slots
#pragma unroll
    for (int s = 0; s < Cfg::kStages - 1; ++s) {
      if (s < slots) load_slot<Cfg>(c, ring_at + s * Cfg::kStageBytes, s, in);
      mma::cp_async_commit();
    }
    float acc[Cfg::kMT][Cfg::kNT][4];
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < Cfg::kNT; ++nt) {
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[mt][nt][v] = 0.0f;
      }
    }
    for (int64_t k = 0; k < slots; ++k) {
      mma::cp_async_wait<Cfg::kStages - 2>();  // slot load k has landed (this thread's copies)
      __syncthreads();                          // everyone's copies, and load k - 1's slot is read by all
      const int64_t next = k + Cfg::kStages - 1;
      if (next < slots) {
        load_slot<Cfg>(c, ring_at + static_cast<uint32_t>(next % Cfg::kStages) * Cfg::kStageBytes, next, in);
      }
      mma::cp_async_commit();
      const unsigned char* slot = ring + (k % Cfg::kStages) * Cfg::kStageBytes;
#pragma unroll
      for (int sub = 0; sub < Cfg::kColumns / 32; ++sub) {
        // Only the chunks that hold columns < K: the same chunks in every configuration (an mma of
        // zeros could still turn a -0 sum into +0).
        if (k * (Cfg::kColumns / 32) + sub < chunks) compute_chunk<Cfg, kBf16>(slot, sub, wm, wn, lane, acc);
      }
    }
    mma::cp_async_wait<0>();
    store_tile<Cfg, kGateUp>(p, f_block, begin + t0, n, wm, wn, lane, acc);
  }
}

template <typename Cfg, bool kBf16, bool kGateUp>
void launch_config(const MoeGroupedParams& p, int64_t z, cudaStream_t stream) {
  constexpr int64_t kFeatures = Cfg::kARows / 16 * kFeaturesPerTile<kGateUp>;
  const dim3 grid(static_cast<unsigned>((p.out_features + kFeatures - 1) / kFeatures),
                  static_cast<unsigned>(std::min<int64_t>(p.num_experts, p.num_choices)), static_cast<unsigned>(z));
  const auto kernel = moe_mma_kernel<Cfg, kBf16, kGateUp>;
  // The shared-memory limit is set once per device (bit d of `raised`), not on every launch: a
  // runtime call per launch is host time on every eager step.
  static std::atomic<uint64_t> raised{0};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (raised.load(std::memory_order_acquire) & bit) == 0) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSharedBytes));
    raised.fetch_or(bit, std::memory_order_release);
  }
  launch_pdl(kernel, grid, Cfg::kThreads, Cfg::kSharedBytes, stream, p);
}

template <bool kBf16, bool kGateUp>
void launch_typed(const MoeGroupedParams& p, cudaStream_t stream) {
  const bool decode = p.max_rows_per_expert <= DecodeConfig::kTokens ||
                      p.num_choices <= kDecodeMaxAverageRows * int64_t{p.num_experts};
  if (decode) {
    launch_config<DecodeConfig, kBf16, kGateUp>(p, 1, stream);
  } else {
    const int64_t tiles = (p.max_rows_per_expert + PrefillConfig::kTokens - 1) / PrefillConfig::kTokens;
    launch_config<PrefillConfig, kBf16, kGateUp>(p, std::clamp<int64_t>(tiles, 1, kPrefillMaxZ), stream);
  }
}

}  // namespace

namespace detail {

void queue_moe_grouped_mma(const MoeGroupedParams& p, bool gate_up, cudaStream_t stream) {
  const bool bf16 = p.type == WeightType::kBF16;
  if (gate_up) {
    bf16 ? launch_typed<true, true>(p, stream) : launch_typed<false, true>(p, stream);
  } else {
    bf16 ? launch_typed<true, false>(p, stream) : launch_typed<false, false>(p, stream);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace spindle::kernels::cuda
