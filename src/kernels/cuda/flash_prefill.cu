// cuda_flash prefill: FlashAttention-2 style paged attention on tensor cores (contract:
// flash_attention.h, layouts: paged_layer_launch.h).
//
// Grid (num_heads, num_sequences, ceil(max_new_tokens / kBlockM)). A block owns query rows
// [m0, m0 + kBlockM) of one sequence and one head; query tiles run in reverse order
// (blockIdx.z = 0 is the last, longest causal tile) so the heavy blocks start first. Blocks past a
// sequence's rows exit at once. Each warp owns kWarpRows = 16 * kWarpMTiles consecutive rows.
//
// Per block:
//   Q tile  f32 global -> times scale * log2(e), rounded to bf16/f16 -> shared; kept as mma A
//           fragments in registers when a warp owns 16 rows and head_dim <= 128, otherwise re-read
//           from shared memory per key tile.
//   K/V     tiles of kBlockN keys, each key row gathered from its page with 16-byte cp.async (8
//           threads per row: a quarter warp moves one 128-byte line), double buffered: tile j+1
//           streams in while tile j is computed. The page-table entries of tile j+2 are loaded
//           while tile j is computed, so no table latency is exposed.
//   S = Q K^T (mma m16n8k16, f32), already in the log2 domain; masked keys (causal, past kv_len)
//           set to -inf, only on tiles that reach past the limit of the warp's first row.
//   online softmax: running max and sum per row in f32 (exp2), the max raised lazily (only when a
//           tile exceeds it by 2^8, so most tiles leave O unscaled), P rounded to bf16/f16 and
//           reused in registers as the A operand of O += P V (V via ldmatrix.trans).
//   Causal blocks visit key tiles only up to their last row's position; a warp skips the tiles
//   that lie entirely past its rows.
//
// Variants (PrefillTile): kWarpMTiles = 1 (8 warps, Q in registers, 64-key tiles; 32 for
// head_dim 256) for every head_dim, and kWarpMTiles = 2 (4 warps of 32 rows, 32-key tiles, two
// blocks per SM) for head_dim 128 on Hopper-class GPUs (sm_90: 228 KB of shared memory per SM).
// Two m16 tiles per warp reuse each K/V fragment twice, cutting shared-memory reads per mma from
// 0.5 to ~0.38 ldmatrix.x4. Measured on an H200 (bf16, 32/8 heads, causal, batch 8 x 2048 and
// 2 x 8192): 32-key tiles beat 64-key ones (which spill at 255 registers), and variant 2 beats
// variant 1 (262/306 against 240/275 TFLOP/s).
//
// Shared memory (16-bit elements, rows padded by 8 elements so the 8 rows of an ldmatrix fall on
// distinct banks): stage s = {K [kBlockN][head_dim + 8], V [kBlockN][head_dim + 8]} for s = 0, 1,
// then Q [kBlockM][head_dim + 8]. When Q lives in registers it is staged in stage 1 instead.
//
// FP8 KV (E4M3FN bytes, kernels/kv_scales.h): each 16-byte stage chunk (8 elements) is loaded as
// 8 bytes with an ordinary load and stored converted to f16 (exact), so the stages, ldmatrix and
// the f16 mma path are those of f16 KV; the scores are multiplied by the K scale of the block's KV
// head before the softmax, the output by its V scale. Those copies are synchronous (the tile after
// the current one is loaded before the current one is computed, not during).
//
// Alignment assumptions (checked on the host): q, out, k_pages, v_pages 16-byte aligned; head_dim a
// multiple of 16, so every K/V row and every q row starts 16-byte aligned.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/fp8_convert.cuh"
#include "kernels/cuda/mma_utils.cuh"

namespace spindle::kernels::cuda::detail {
namespace {

constexpr int kBlockM = 128;  // query rows per block
constexpr float kLog2E = 1.4426950408889634f;

template <int kHeadDimT, int kWarpMTilesT, int kBlockNT>
struct PrefillTile {
  static constexpr int kHeadDim = kHeadDimT;
  static constexpr int kWarpMTiles = kWarpMTilesT;  // m16 row tiles per warp
  static_assert(kHeadDim % 16 == 0, "head_dim must be a multiple of 16");
  static constexpr int kWarpRows = 16 * kWarpMTiles;
  static constexpr int kWarps = kBlockM / kWarpRows;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = kBlockNT;    // keys per K/V tile
  static constexpr int kKeyTiles = kBlockN / 8;  // n8 tiles of S
  static constexpr bool kQInRegisters = kWarpMTiles == 1 && kHeadDim <= 128;
  // Two blocks per SM where the state fits in the halved register budget without spills (ptxas -v).
  static constexpr int kMinBlocksPerSm = (kWarpMTiles == 2 || kHeadDim <= 64) ? 2 : 1;
  static constexpr int kRowStride = kHeadDim + 8;  // shared row pitch in elements (odd number of 16 B)
  static constexpr int kDimSteps = kHeadDim / 16;  // k16 steps of Q K^T = n16 pairs of P V
  static constexpr int kKeySteps = kBlockN / 16;   // n16 pairs of Q K^T = k16 steps of P V
  // K/V copies: 8 threads per key row, so that a quarter warp copies one 128-byte line (one global
  // line, 32 distinct banks); a thread copies kChunksPerThread 16-byte chunks of kRowsPerThread rows.
  static constexpr int kChunksPerRow = kHeadDim / 8;
  static constexpr int kThreadsPerKvRow = 8;
  static constexpr int kChunksPerThread = (kChunksPerRow + kThreadsPerKvRow - 1) / kThreadsPerKvRow;
  static constexpr int kRowsPerPass = kThreads / kThreadsPerKvRow;
  static_assert(kBlockN % kRowsPerPass == 0, "whole copy passes per tile");
  static constexpr int kRowsPerThread = kBlockN / kRowsPerPass;
  static constexpr int kQBytes = kBlockM * kRowStride * 2;
  static constexpr int kKvTileBytes = kBlockN * kRowStride * 2;  // one K or V tile
  static constexpr int kStageBytes = 2 * kKvTileBytes;           // K tile, then V tile
  // Q in registers: its shared staging area is stage 1, first written after the main loop's first
  // barrier, when every warp holds its Q fragments.
  static_assert(!kQInRegisters || kQBytes <= kStageBytes, "Q staging must fit in stage 1");
  static constexpr int kQOffsetBytes = kQInRegisters ? kStageBytes : 2 * kStageBytes;
  static constexpr size_t kSharedBytes = 2 * kStageBytes + (kQInRegisters ? 0 : kQBytes);
};

__device__ __forceinline__ void store_shared_16(uint32_t shared_dst, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(shared_dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// This thread's share of every K/V tile copy: rows first_row + kRowsPerPass * r of each tile,
// chunks part + kThreadsPerKvRow * c of each row. issue() copies them for the next tile and moves
// on; the page-table entries of a tile are loaded one issue ahead, so their latency hides behind a
// tile's compute. Keys at or past kv_len are zero-filled; their table index is clamped into range
// so every load is in bounds and unconditional. Page sizes that are powers of two (uniform branch)
// locate keys with a shift and a mask instead of a division.
template <typename Tile>
struct KvRowCopier {
  const int32_t* table;
  int kv_len, page_size, last_page_index;
  int page_shift;  // log2(page_size) when page_size is a power of two, else -1
  int part;        // which chunks of a row
  int key;         // key of row 0 of this thread in the next tile to issue
  int32_t page[Tile::kRowsPerThread];  // table entries of those rows' pages

  __device__ __forceinline__ int page_index(int k) const {
    return min(page_shift >= 0 ? k >> page_shift : k / page_size, last_page_index);
  }
  __device__ __forceinline__ int slot(int k) const {
    return page_shift >= 0 ? k & (page_size - 1) : k % page_size;
  }
  __device__ __forceinline__ void load_pages() {
#pragma unroll
    for (int r = 0; r < Tile::kRowsPerThread; ++r) page[r] = __ldg(table + page_index(key + r * Tile::kRowsPerPass));
  }

  __device__ __forceinline__ void init(const int32_t* table_in, int kv_len_in, int page_size_in, int first_row,
                                       int part_in) {
    table = table_in;
    kv_len = kv_len_in;
    page_size = page_size_in;
    page_shift = (page_size & (page_size - 1)) == 0 ? __ffs(page_size) - 1 : -1;
    last_page_index = (kv_len - 1) / page_size;
    part = part_in;
    key = first_row;
    load_pages();
  }

  // k_dst / v_dst: shared address of row first_row in the target stage.
  __device__ __forceinline__ void issue(uint32_t k_dst, uint32_t v_dst, const uint16_t* k_pages,
                                        const uint16_t* v_pages, int64_t token_pitch, int64_t head_offset) {
#pragma unroll
    for (int r = 0; r < Tile::kRowsPerThread; ++r) {
      const int row_key = key + r * Tile::kRowsPerPass;
      const int64_t src = (int64_t{page[r]} * page_size + slot(row_key)) * token_pitch + head_offset;
      const uint32_t dst_offset = r * Tile::kRowsPerPass * Tile::kRowStride * 2;
#pragma unroll
      for (int c = 0; c < Tile::kChunksPerThread; ++c) {
        const int chunk = part + c * Tile::kThreadsPerKvRow;
        if (Tile::kChunksPerRow % Tile::kThreadsPerKvRow == 0 || chunk < Tile::kChunksPerRow) {
          mma::cp_async_16(k_dst + dst_offset + chunk * 16, k_pages + src + chunk * 8, row_key < kv_len);
          mma::cp_async_16(v_dst + dst_offset + chunk * 16, v_pages + src + chunk * 8, row_key < kv_len);
        }
      }
    }
    key += Tile::kBlockN;
    load_pages();
  }

  // issue() for FP8 pages (offsets in bytes): 8 bytes per 16-byte chunk, converted to f16 and stored
  // (zeros for keys past kv_len). All of a thread's loads are issued before its first store.
  __device__ __forceinline__ void issue_fp8(uint32_t k_dst, uint32_t v_dst, const uint8_t* k_pages,
                                            const uint8_t* v_pages, int64_t token_pitch, int64_t head_offset) {
    uint2 k_bytes[Tile::kRowsPerThread][Tile::kChunksPerThread];
    uint2 v_bytes[Tile::kRowsPerThread][Tile::kChunksPerThread];
#pragma unroll
    for (int r = 0; r < Tile::kRowsPerThread; ++r) {
      const int row_key = key + r * Tile::kRowsPerPass;
      const int64_t src = (int64_t{page[r]} * page_size + slot(row_key)) * token_pitch + head_offset;
#pragma unroll
      for (int c = 0; c < Tile::kChunksPerThread; ++c) {
        const int chunk = part + c * Tile::kThreadsPerKvRow;
        k_bytes[r][c] = v_bytes[r][c] = make_uint2(0u, 0u);
        if ((Tile::kChunksPerRow % Tile::kThreadsPerKvRow == 0 || chunk < Tile::kChunksPerRow) && row_key < kv_len) {
          k_bytes[r][c] = *reinterpret_cast<const uint2*>(k_pages + src + chunk * 8);
          v_bytes[r][c] = *reinterpret_cast<const uint2*>(v_pages + src + chunk * 8);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < Tile::kRowsPerThread; ++r) {
      const uint32_t dst_offset = r * Tile::kRowsPerPass * Tile::kRowStride * 2;
#pragma unroll
      for (int c = 0; c < Tile::kChunksPerThread; ++c) {
        const int chunk = part + c * Tile::kThreadsPerKvRow;
        if (Tile::kChunksPerRow % Tile::kThreadsPerKvRow == 0 || chunk < Tile::kChunksPerRow) {
          store_shared_16(k_dst + dst_offset + chunk * 16, fp8x8_to_half8(k_bytes[r][c]));
          store_shared_16(v_dst + dst_offset + chunk * 16, fp8x8_to_half8(v_bytes[r][c]));
        }
      }
    }
    key += Tile::kBlockN;
    load_pages();
  }
};

// Q rows [q_row0, q_row0 + num_q_rows) of `head`, times q_scale (scale * log2(e), so that Q K^T
// comes out in the log2 domain of the softmax) and rounded to the KV type, into q_smem
// [kBlockM][kRowStride]; rows past num_q_rows are zero. All of a thread's loads are issued before
// the first conversion.
template <typename Tile, bool kBf16>
__device__ __forceinline__ void load_q_tile(uint16_t* q_smem, const float* q, int64_t row_pitch, int head,
                                            int q_row0, int num_q_rows, float q_scale) {
  constexpr int kVecsPerRow = Tile::kHeadDim / 4;  // float4 per row
  constexpr int kIters = kBlockM * kVecsPerRow / Tile::kThreads;
  static_assert(kBlockM * kVecsPerRow % Tile::kThreads == 0);
  constexpr int kBatch = kIters < 16 ? kIters : 16;  // loads in flight per thread
  static_assert(kIters % kBatch == 0);
#pragma unroll 1
  for (int i0 = 0; i0 < kIters; i0 += kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int index = threadIdx.x + (i0 + i) * Tile::kThreads;
      const int row = index / kVecsPerRow;
      v[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (row < num_q_rows) {
        const float* src = q + (int64_t{q_row0} + row) * row_pitch + int64_t{head} * Tile::kHeadDim;
        v[i] = __ldg(reinterpret_cast<const float4*>(src) + index % kVecsPerRow);
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int index = threadIdx.x + (i0 + i) * Tile::kThreads;
      const uint2 packed = make_uint2(mma::pack2<kBf16>(v[i].x * q_scale, v[i].y * q_scale),
                                      mma::pack2<kBf16>(v[i].z * q_scale, v[i].w * q_scale));
      *reinterpret_cast<uint2*>(q_smem + (index / kVecsPerRow) * Tile::kRowStride + (index % kVecsPerRow) * 4) =
          packed;
    }
  }
}

// s[m] = Q K^T for the warp's m16 row tile m and the kBlockN keys of a stage (C layout per n8
// key tile). q_frag: the warp's Q A fragments when Tile::kQInRegisters; otherwise q_lane is this
// lane's ldmatrix address of row tile 0, k-step 0. k_lane: this lane's address of key pair 0,
// k-step 0 in the stage.
template <typename Tile, bool kBf16, int kQRegSteps>
__device__ __forceinline__ void compute_scores(float (&s)[Tile::kWarpMTiles][Tile::kKeyTiles][4],
                                               const uint32_t (&q_frag)[kQRegSteps][4], uint32_t q_lane,
                                               uint32_t k_lane) {
#pragma unroll
  for (int m = 0; m < Tile::kWarpMTiles; ++m) {
#pragma unroll
    for (int n = 0; n < Tile::kKeyTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[m][n][e] = 0.0f;
    }
  }
#pragma unroll
  for (int ks = 0; ks < Tile::kDimSteps; ++ks) {
    uint32_t a[Tile::kWarpMTiles][4];
#pragma unroll
    for (int m = 0; m < Tile::kWarpMTiles; ++m) {
      if constexpr (Tile::kQInRegisters) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[m][e] = q_frag[ks][e];
      } else {
        mma::ldmatrix_x4(a[m], q_lane + (m * 16 * Tile::kRowStride + ks * 16) * 2);
      }
    }
#pragma unroll
    for (int np = 0; np < Tile::kKeySteps; ++np) {
      uint32_t b[4];  // b0, b1 of key tile 2np, then of key tile 2np + 1
      mma::ldmatrix_x4(b, k_lane + (np * 16 * Tile::kRowStride + ks * 16) * 2);
#pragma unroll
      for (int m = 0; m < Tile::kWarpMTiles; ++m) {
        mma::mma_16816<kBf16>(s[m][2 * np], a[m], b[0], b[1]);
        mma::mma_16816<kBf16>(s[m][2 * np + 1], a[m], b[2], b[3]);
      }
    }
  }
}

// Sets to -inf the scores of keys a row may not see: keys >= kv_len, and when causal keys past
// the row's position. row_pos: position of the tile's row `group` (row group + 8 is 8 later).
template <int kKeyTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kKeyTiles][4], int key0, int quad, int row_pos,
                                            bool causal, int kv_len) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int limit = causal ? min(row_pos + 8 * r + 1, kv_len) : kv_len;  // visible keys: [0, limit)
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (key0 + n * 8 + 2 * quad + e >= limit) s[n][2 * r + e] = -INFINITY;
      }
    }
  }
}

// Lazy rescaling: a row's running max is raised only when a tile's max exceeds it by more than
// this (log2 domain), so that most key tiles leave O alone. Probabilities then stay below 2^8,
// harmless in the f32 sums and in the bf16/f16 P (relative rounding is the same at any scale).
constexpr float kRaiseThreshold = 8.0f;

// One online-softmax step on the log2-domain scores s of one m16 row tile (rows group and
// group + 8): s becomes exp2(s - running max) and this lane's partial row sums are updated.
// The running maxes are raised (all of the warp's, to their exact maxima) only when some row's tile
// max exceeds its running max by more than kRaiseThreshold. Returns (warp-uniform) whether they
// were; then `rescale` is what the earlier accumulator rows must be multiplied by, otherwise it is
// 1 and O needs nothing. A row whose scores are all -inf so far keeps max -inf and gets p = 0 and
// rescale = 0, never NaN.
template <int kKeyTiles>
__device__ __forceinline__ bool softmax_step(float (&s)[kKeyTiles][4], float (&row_max)[2], float (&row_sum)[2],
                                             float (&rescale)[2]) {
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kKeyTiles; ++n) {
    tile_max[0] = fmaxf(tile_max[0], fmaxf(s[n][0], s[n][1]));
    tile_max[1] = fmaxf(tile_max[1], fmaxf(s[n][2], s[n][3]));
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // The 4 lanes of a quad hold one row between them.
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
  }
  const bool raise = __any_sync(0xffffffffu, tile_max[0] > row_max[0] + kRaiseThreshold ||
                                                 tile_max[1] > row_max[1] + kRaiseThreshold);
  float base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rescale[r] = 1.0f;
    if (raise) {
      const float new_max = fmaxf(row_max[r], tile_max[r]);
      rescale[r] = mma::fast_exp2(row_max[r] - (new_max == -INFINITY ? 0.0f : new_max));
      row_max[r] = new_max;
    }
    base[r] = row_max[r] == -INFINITY ? 0.0f : row_max[r];
  }
  float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = mma::fast_exp2(s[n][e] - base[e / 2]);
      tile_sum[e / 2] += s[n][e];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) row_sum[r] = row_sum[r] * rescale[r] + tile_sum[r];
  return raise;
}

// The probabilities of one m16 row tile (C layout of S, f32) rounded into the A fragments of
// P V, one per k16 key step: the C tiles of keys 16kc..+7 and 16kc+8..+15 form A's two halves.
template <int kKeyTiles, bool kBf16>
__device__ __forceinline__ void pack_probabilities(uint32_t (&p_frag)[kKeyTiles / 2][4],
                                                   const float (&p)[kKeyTiles][4]) {
#pragma unroll
  for (int kc = 0; kc < kKeyTiles / 2; ++kc) {
    p_frag[kc][0] = mma::pack2<kBf16>(p[2 * kc][0], p[2 * kc][1]);
    p_frag[kc][1] = mma::pack2<kBf16>(p[2 * kc][2], p[2 * kc][3]);
    p_frag[kc][2] = mma::pack2<kBf16>(p[2 * kc + 1][0], p[2 * kc + 1][1]);
    p_frag[kc][3] = mma::pack2<kBf16>(p[2 * kc + 1][2], p[2 * kc + 1][3]);
  }
}

// o += P V for the warp's rows; v_lane is this lane's ldmatrix.trans address of key step 0,
// dim pair 0 in the stage.
template <typename Tile, bool kBf16>
__device__ __forceinline__ void accumulate_pv(float (&o)[Tile::kWarpMTiles][Tile::kHeadDim / 8][4],
                                              const uint32_t (&p_frag)[Tile::kWarpMTiles][Tile::kKeySteps][4],
                                              uint32_t v_lane) {
#pragma unroll
  for (int kc = 0; kc < Tile::kKeySteps; ++kc) {
#pragma unroll
    for (int dp = 0; dp < Tile::kDimSteps; ++dp) {
      uint32_t b[4];  // b0, b1 of dim tile 2dp, then of dim tile 2dp + 1
      mma::ldmatrix_x4_trans(b, v_lane + (kc * 16 * Tile::kRowStride + dp * 16) * 2);
#pragma unroll
      for (int m = 0; m < Tile::kWarpMTiles; ++m) {
        mma::mma_16816<kBf16>(o[m][2 * dp], p_frag[m][kc], b[0], b[1]);
        mma::mma_16816<kBf16>(o[m][2 * dp + 1], p_frag[m][kc], b[2], b[3]);
      }
    }
  }
}

// A warp's running attention state, per m16 row tile m and row r (group, group + 8) of the tile:
// the unnormalized output (C layout), the running max of the log2-domain scores, and this lane's
// partial row sums (the 4 lanes of a quad add up to the row's).
template <typename Tile>
struct WarpState {
  float o[Tile::kWarpMTiles][Tile::kHeadDim / 8][4];
  float row_max[Tile::kWarpMTiles][2];
  float row_sum[Tile::kWarpMTiles][2];

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int m = 0; m < Tile::kWarpMTiles; ++m) {
#pragma unroll
      for (int d = 0; d < Tile::kHeadDim / 8; ++d) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[m][d][e] = 0.0f;
      }
      row_max[m][0] = row_max[m][1] = -INFINITY;
      row_sum[m][0] = row_sum[m][1] = 0.0f;
    }
  }
};

// Where a warp's rows sit, for masking: position of row `group` of row tile 0, and the rules.
struct RowMask {
  int first_row_pos;
  int kv_len;
  bool causal;
};

// Folds the log2-domain scores s of the key tile starting at key0 into the warp's state: masking
// (when needs_mask), online softmax, rescale of O where a running max moved, O += P V with V from
// the stage at v_lane. (Each row tile is masked just before its softmax: masking all of them
// first costs registers.)
// kFp8: the scores are first multiplied by k_scale (the stage holds unscaled FP8 values).
template <typename Tile, bool kBf16, bool kFp8 = false>
__device__ __forceinline__ void fold_scores(WarpState<Tile>& state, float (&s)[Tile::kWarpMTiles][Tile::kKeyTiles][4],
                                            uint32_t v_lane, int key0, bool needs_mask, const RowMask& mask,
                                            int quad, float k_scale = 1.0f) {
  uint32_t p_frag[Tile::kWarpMTiles][Tile::kKeySteps][4];
#pragma unroll
  for (int m = 0; m < Tile::kWarpMTiles; ++m) {
    if constexpr (kFp8) {
#pragma unroll
      for (int t = 0; t < Tile::kKeyTiles; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[m][t][e] *= k_scale;
      }
    }
    if (needs_mask) mask_scores(s[m], key0, quad, mask.first_row_pos + m * 16, mask.causal, mask.kv_len);
    float rescale[2];
    const bool moved = softmax_step(s[m], state.row_max[m], state.row_sum[m], rescale);
    pack_probabilities<Tile::kKeyTiles, kBf16>(p_frag[m], s[m]);
    if (moved) {
#pragma unroll
      for (int d = 0; d < Tile::kHeadDim / 8; ++d) {
        state.o[m][d][0] *= rescale[0];
        state.o[m][d][1] *= rescale[0];
        state.o[m][d][2] *= rescale[1];
        state.o[m][d][3] *= rescale[1];
      }
    }
  }
  accumulate_pv<Tile, kBf16>(state.o, p_frag, v_lane);
}

// out rows = o / row sum (times v_scale: FP8 KV's V scale, else 1) for the warp's rows below
// num_q_rows, straight from the C fragments (a float2 per lane and n8 tile). out_row0: the warp's
// first row in out, [., head_dim] at head.
template <typename Tile>
__device__ __forceinline__ void store_rows(const WarpState<Tile>& state, float* out_row0, int64_t row_pitch,
                                           int num_valid_rows, int group, int quad, float v_scale) {
#pragma unroll
  for (int m = 0; m < Tile::kWarpMTiles; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = state.row_sum[m][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.0f ? v_scale / sum : 0.0f;  // (1 / sum for v_scale 1)
      const int row = m * 16 + group + 8 * r;
      if (row >= num_valid_rows) continue;
      float* dst = out_row0 + row * row_pitch + 2 * quad;
#pragma unroll
      for (int d = 0; d < Tile::kHeadDim / 8; ++d) {
        *reinterpret_cast<float2*>(dst + d * 8) =
            make_float2(state.o[m][d][2 * r] * inv, state.o[m][d][2 * r + 1] * inv);
      }
    }
  }
}

template <typename Tile, bool kBf16, bool kFp8>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocksPerSm)
    flash_prefill_kernel(const PagedLayerLaunch a) {
  constexpr int kHeadDim = Tile::kHeadDim;
  constexpr int kBlockN = Tile::kBlockN;
  constexpr int kStageBytes = Tile::kStageBytes;

  const DeviceSequence seq = a.batch.sequences[blockIdx.y];
  const int m0 = static_cast<int>(gridDim.z - 1 - blockIdx.z) * kBlockM;
  if (m0 >= seq.num_new_tokens) return;

  extern __shared__ __align__(16) unsigned char shared_raw[];
  uint16_t* q_smem = reinterpret_cast<uint16_t*>(shared_raw + Tile::kQOffsetBytes);
  const uint32_t q_base = mma::shared_address(q_smem);
  const uint32_t k_base = mma::shared_address(shared_raw);  // stage s: K at k_base + s * kStageBytes
  const uint32_t v_base = k_base + Tile::kKvTileBytes;      //           V right after its K

  const bool causal = a.batch.causal;
  const int head = blockIdx.x;
  const int kv_head = head / (a.num_heads / a.kv.num_kv_heads);
  const int num_q_rows = min(kBlockM, seq.num_new_tokens - m0);
  const int q_row0 = seq.query_offset + m0;
  const int first_pos = seq.num_cached_tokens + m0;  // position of the block's row 0
  const int kv_len = seq.num_cached_tokens + seq.num_new_tokens;
  const int kv_end = causal ? first_pos + num_q_rows : kv_len;  // keys any row of the block sees
  const int num_kv_tiles = (kv_end + kBlockN - 1) / kBlockN;
  const int64_t row_pitch = int64_t{a.num_heads} * kHeadDim;  // q and out
  const int64_t token_pitch = int64_t{a.kv.num_kv_heads} * kHeadDim;
  const int64_t kv_head_offset = int64_t{kv_head} * kHeadDim;
  const auto* k_pages = static_cast<const uint16_t*>(a.k_pages);
  const auto* v_pages = static_cast<const uint16_t*>(a.v_pages);
  const float k_scale = kFp8 ? a.k_scales[kv_head] : 1.0f;
  const float v_scale = kFp8 ? a.v_scales[kv_head] : 1.0f;

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int group = lane / 4;
  const int quad = lane % 4;

  // This thread's first K/V row in a tile, and its walk over the tiles.
  const int copy_row = threadIdx.x / Tile::kThreadsPerKvRow;
  const uint32_t copy_offset = copy_row * Tile::kRowStride * 2;
  KvRowCopier<Tile> copier;
  copier.init(a.batch.page_tables + seq.page_table_offset, kv_len, a.kv.page_size, copy_row,
              threadIdx.x % Tile::kThreadsPerKvRow);
  auto issue_next_tile = [&](int stage) {
    if constexpr (kFp8) {
      copier.issue_fp8(k_base + stage * kStageBytes + copy_offset, v_base + stage * kStageBytes + copy_offset,
                       static_cast<const uint8_t*>(a.k_pages), static_cast<const uint8_t*>(a.v_pages), token_pitch,
                       kv_head_offset);
    } else {
      copier.issue(k_base + stage * kStageBytes + copy_offset, v_base + stage * kStageBytes + copy_offset, k_pages,
                   v_pages, token_pitch, kv_head_offset);
    }
    mma::cp_async_commit();
  };

  // Prologue: K/V tile 0 in flight (the table entries of tile 1 requested), Q staged.
  issue_next_tile(0);
  load_q_tile<Tile, kBf16>(q_smem, a.q, row_pitch, head, q_row0, num_q_rows, a.scale * kLog2E);

  // ldmatrix lane addresses (bytes). Q (A, row tile 0): row warp_row0 + lane%16, dims (lane/16)*8.
  // K (B of Q K^T, non-trans): key (lane/16)*8 + lane%8, dims ((lane/8)%2)*8.
  // V (B of P V, trans): key ((lane/8)%2)*8 + lane%8, dims (lane/16)*8.
  const int warp_row0 = warp * Tile::kWarpRows;
  const uint32_t q_lane = q_base + ((warp_row0 + lane % 16) * Tile::kRowStride + (lane / 16) * 8) * 2;
  const uint32_t k_lane = k_base + (((lane / 16) * 8 + lane % 8) * Tile::kRowStride + ((lane / 8) % 2) * 8) * 2;
  const uint32_t v_lane = v_base + ((((lane / 8) % 2) * 8 + lane % 8) * Tile::kRowStride + (lane / 16) * 8) * 2;

  constexpr int kQRegSteps = Tile::kQInRegisters ? Tile::kDimSteps : 1;
  uint32_t q_frag[kQRegSteps][4];
  __syncthreads();  // Q tile in shared memory
  if constexpr (Tile::kQInRegisters) {
#pragma unroll
    for (int ks = 0; ks < Tile::kDimSteps; ++ks) mma::ldmatrix_x4(q_frag[ks], q_lane + ks * 32);
  }

  // Key ranges of this warp's rows: every row sees keys < warp_unmasked_end; no row sees keys
  // >= warp_key_end (0 when the warp holds no valid row).
  const int warp_key_end =
      warp_row0 >= num_q_rows ? 0 : (causal ? first_pos + min(warp_row0 + Tile::kWarpRows, num_q_rows) : kv_len);
  const int warp_unmasked_end = causal ? first_pos + warp_row0 + 1 : kv_len;
  const RowMask mask{first_pos + warp_row0 + group, kv_len, causal};
  WarpState<Tile> state;
  state.reset();

  for (int tile = 0; tile < num_kv_tiles; ++tile) {
    const int stage = tile & 1;
    mma::cp_async_wait<0>();
    __syncthreads();  // tile's K/V visible to all; every warp is done with the other stage
    if (tile + 1 < num_kv_tiles) issue_next_tile(stage ^ 1);
    const int key0 = tile * kBlockN;
    if (key0 >= warp_key_end) continue;  // warp-uniform: the whole tile is past this warp's rows
    float s[Tile::kWarpMTiles][Tile::kKeyTiles][4];
    compute_scores<Tile, kBf16>(s, q_frag, q_lane, k_lane + stage * kStageBytes);
    fold_scores<Tile, kBf16, kFp8>(state, s, v_lane + stage * kStageBytes, key0, key0 + kBlockN > warp_unmasked_end,
                                   mask, quad, k_scale);
  }

  if (warp_row0 >= num_q_rows) return;
  float* out_row0 = a.out + (int64_t{q_row0} + warp_row0) * row_pitch + int64_t{head} * kHeadDim;
  store_rows(state, out_row0, row_pitch, num_q_rows - warp_row0, group, quad, v_scale);
}

// Host-side precondition failures surface as CUDA errors naming the broken condition.
void require(bool condition, const char* what) {
  if (!condition) throw_cuda_error(cudaErrorInvalidValue, what, __FILE__, __LINE__);
}

bool aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

int current_device() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// Whether the current device holds two blocks of `bytes` dynamic shared memory per SM (sm_90: yes
// up to ~113 KB each; sm_80: up to ~81 KB). Cached per device (devices 0..63).
bool fits_two_blocks_per_sm(size_t bytes) {
  static std::atomic<uint64_t> known{0}, fits{0};
  const int device = current_device();
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (known.load(std::memory_order_acquire) & bit) != 0) {
    return (fits.load(std::memory_order_relaxed) & bit) != 0;
  }
  int per_sm = 0, reserved = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device));
  const bool result = 2 * (bytes + static_cast<size_t>(reserved)) <= static_cast<size_t>(per_sm);
  if (result) fits.fetch_or(bit, std::memory_order_relaxed);
  known.fetch_or(bit, std::memory_order_release);
  return result;
}

template <typename Tile, bool kBf16, bool kFp8>
void launch_tile(const PagedLayerLaunch& a, cudaStream_t stream) {
  const auto kernel = flash_prefill_kernel<Tile, kBf16, kFp8>;
  // Opt into the dynamic shared memory size once per device (devices 0..63).
  static std::atomic<uint64_t> configured_devices{0};
  const int device = current_device();
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (configured_devices.load(std::memory_order_acquire) & bit) == 0) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(Tile::kSharedBytes)));
    configured_devices.fetch_or(bit, std::memory_order_release);
  }
  const dim3 grid(static_cast<unsigned>(a.num_heads), static_cast<unsigned>(a.batch.num_sequences),
                  static_cast<unsigned>((a.batch.max_new_tokens + kBlockM - 1) / kBlockM));
  kernel<<<grid, Tile::kThreads, Tile::kSharedBytes, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

// kFp8: FP8 pages through the f16 path (kBf16 false).
template <bool kBf16, bool kFp8 = false>
void launch_for_head_dim(const PagedLayerLaunch& a, cudaStream_t stream) {
  switch (a.kv.head_dim) {
    case 64: return launch_tile<PrefillTile<64, 1, 64>, kBf16, kFp8>(a, stream);
    case 80: return launch_tile<PrefillTile<80, 1, 64>, kBf16, kFp8>(a, stream);
    case 96: return launch_tile<PrefillTile<96, 1, 64>, kBf16, kFp8>(a, stream);
    case 128:
      // Variant 2 where two 100 KB blocks fit per SM (sm_90: yes, sm_80: no). Its 68 KB would fit
      // twice on sm_80 too, but it is unmeasured there.
      if (fits_two_blocks_per_sm(100 * 1024)) return launch_tile<PrefillTile<128, 2, 32>, kBf16, kFp8>(a, stream);
      return launch_tile<PrefillTile<128, 1, 64>, kBf16, kFp8>(a, stream);
    case 256: return launch_tile<PrefillTile<256, 1, 32>, kBf16, kFp8>(a, stream);
    default: require(false, "flash_prefill: head_dim not instantiated (64, 80, 96, 128, 256)");
  }
}

}  // namespace

bool flash_prefill_supports(int head_dim, KvType kv_type) {
  const bool dim_ok = head_dim == 64 || head_dim == 80 || head_dim == 96 || head_dim == 128 || head_dim == 256;
  return dim_ok && (kv_type == KvType::kBF16 || kv_type == KvType::kF16 || kv_type == KvType::kFp8);
}

size_t flash_prefill_workspace_bytes(const PagedLayerLaunch&) { return 0; }

void launch_flash_prefill(const PagedLayerLaunch& a, cudaStream_t stream) {
  require(flash_prefill_supports(a.kv.head_dim, kv_type_of(a.kv)), "flash_prefill: unsupported head_dim or KV type");
  if (a.batch.num_rows == 0 || a.batch.max_new_tokens == 0 || a.batch.num_sequences == 0) return;
  require(a.kv.num_kv_heads > 0 && a.num_heads % a.kv.num_kv_heads == 0, "flash_prefill: num_heads % num_kv_heads");
  require(a.kv.page_size > 0, "flash_prefill: page_size must be positive");
  require(aligned16(a.q) && aligned16(a.out) && aligned16(a.k_pages) && aligned16(a.v_pages),
          "flash_prefill: q, out and K/V pages must be 16-byte aligned");
  require(a.batch.num_sequences <= 65535 && (a.batch.max_new_tokens + kBlockM - 1) / kBlockM <= 65535,
          "flash_prefill: batch exceeds the launch grid");
  if (kv_type_of(a.kv) == KvType::kFp8) {
    require(a.k_scales != nullptr && a.v_scales != nullptr, "flash_prefill: FP8 KV without its scales");
    launch_for_head_dim<false, true>(a, stream);
  } else if (kv_type_of(a.kv) == KvType::kBF16) {
    launch_for_head_dim<true>(a, stream);
  } else {
    launch_for_head_dim<false>(a, stream);
  }
}

}  // namespace spindle::kernels::cuda::detail
