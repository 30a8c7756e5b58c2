// cuda_flash prefill: FlashAttention-2 style paged attention on tensor cores (contract:
// flash_attention.h, layouts: paged_layer_launch.h).
//
// Grid (num_heads, num_sequences, ceil(max_new_tokens / kBlockM)). A block owns query rows
// [m0, m0 + kBlockM) of one sequence and one head; query tiles run in reverse order
// (blockIdx.z = 0 is the last, longest causal tile) so the heavy blocks start first. Blocks past a
// sequence's rows exit at once. Each warp owns kWarpRows = 16 * kWarpMTiles consecutive rows.
//
// Per block:
//   Q tile  f32 global -> bf16/f16 shared; kept as mma A fragments in registers when a warp owns
//           16 rows and head_dim <= 128, otherwise re-read from shared memory per key tile.
//   K/V     tiles of kBlockN keys, each key row gathered from its page with 16-byte cp.async,
//           double buffered: tile j+1 streams in while tile j is computed. The page-table entry
//           of tile j+2 is loaded while tile j is computed, so no table latency is exposed.
//   S = Q K^T (mma m16n8k16, f32), scaled by scale * log2(e); masked keys (causal, past kv_len)
//           set to -inf, only on tiles that reach past the limit of the warp's first row.
//   online softmax: running max and sum per row in f32 (exp2), P rounded to bf16/f16 and reused
//           in registers as the A operand of O += P V (V via ldmatrix.trans).
//   Causal blocks visit key tiles only up to their last row's position; a warp skips the tiles
//   that lie entirely past its rows.
//
// Variants (PrefillTile): kWarpMTiles = 1 (8 warps, Q in registers) for every head_dim, and
// kWarpMTiles = 2 (4 warps of 32 rows, two blocks per SM) for head_dim 128 on GPUs with room for
// two such blocks per SM (sm_90: 228 KB). Two m16 tiles per warp reuse each K/V fragment twice,
// cutting shared-memory reads per mma from 0.5 to ~0.31 ldmatrix.x4, the bound on Hopper.
//
// Shared memory (16-bit elements, rows padded by 8 elements so the 8 rows of an ldmatrix fall on
// distinct banks): stage s = {K [kBlockN][head_dim + 8], V [kBlockN][head_dim + 8]} for s = 0, 1,
// then Q [kBlockM][head_dim + 8]. When Q lives in registers it is staged in stage 1 instead.
//
// Alignment assumptions (checked on the host): q, out, k_pages, v_pages 16-byte aligned; head_dim a
// multiple of 16, so every K/V row and every q row starts 16-byte aligned.
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/mma_utils.cuh"

namespace spindle::kernels::cuda::detail {
namespace {

constexpr int kBlockM = 128;  // query rows per block
constexpr float kLog2E = 1.4426950408889634f;

template <int kHeadDimT, int kWarpMTilesT, bool kOverlapT = false>
struct PrefillTile {
  static constexpr int kHeadDim = kHeadDimT;
  static constexpr int kWarpMTiles = kWarpMTilesT;  // m16 row tiles per warp
  static_assert(kHeadDim % 16 == 0, "head_dim must be a multiple of 16");
  static constexpr int kWarpRows = 16 * kWarpMTiles;
  static constexpr int kWarps = kBlockM / kWarpRows;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = kHeadDim <= 128 ? 64 : 32;  // keys per K/V tile
  static constexpr int kKeyTiles = kBlockN / 8;              // n8 tiles of S
  static constexpr bool kQInRegisters = kWarpMTiles == 1 && kHeadDim <= 128;
  // Overlap: S of key tile j + 1 is computed in the same stretch of code as the softmax and P V of
  // tile j (independent instructions for the scheduler); needs Q in registers and a third stage.
  static constexpr bool kOverlap = kOverlapT;
  static_assert(!kOverlap || kQInRegisters, "overlap keeps Q in registers");
  static constexpr int kStages = kOverlap ? 3 : 2;
  // Two blocks per SM where the state fits in the halved register budget without spills (ptxas -v).
  static constexpr int kMinBlocksPerSm = (kWarpMTiles == 2 || kHeadDim <= 64) ? 2 : 1;
  static constexpr int kRowStride = kHeadDim + 8;  // shared row pitch in elements (odd number of 16 B)
  static constexpr int kDimSteps = kHeadDim / 16;  // k16 steps of Q K^T = n16 pairs of P V
  static constexpr int kKeySteps = kBlockN / 16;   // n16 pairs of Q K^T = k16 steps of P V
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks per K/V row
  static constexpr int kThreadsPerKvRow = kThreads / kBlockN;
  static_assert(kThreads % kBlockN == 0, "one key row per kThreadsPerKvRow threads");
  static constexpr int kCopiesPerThread = (kChunksPerRow + kThreadsPerKvRow - 1) / kThreadsPerKvRow;
  static constexpr int kQBytes = kBlockM * kRowStride * 2;
  static constexpr int kKvTileBytes = kBlockN * kRowStride * 2;  // one K or V tile
  static constexpr int kStageBytes = 2 * kKvTileBytes;           // K tile, then V tile
  // Q in registers: its shared staging area is the last stage, first written after every warp
  // holds its Q fragments (the prologue's copies fill the other stages).
  static_assert(!kQInRegisters || kQBytes <= kStageBytes, "Q staging must fit in one stage");
  static constexpr int kQOffsetBytes = kQInRegisters ? (kStages - 1) * kStageBytes : kStages * kStageBytes;
  static constexpr size_t kSharedBytes = kStages * kStageBytes + (kQInRegisters ? 0 : kQBytes);
};

// Where key `key` of a sequence lives. The table index is clamped so the load is always in
// bounds and unconditional (it can then stay in flight until the copy is issued); keys at or
// past kv_len are flagged invalid and zero-filled.
struct KeyLocation {
  int page;
  int offset;  // slot within the page
  bool valid;
};

__device__ __forceinline__ KeyLocation locate_key(const int32_t* table, int key, int kv_len, int page_size) {
  const int clamped = min(key, kv_len - 1);
  return {__ldg(table + clamped / page_size), clamped % page_size, key < kv_len};
}

// Copies this thread's share of one key row of K and V (chunks part, part + kThreadsPerKvRow, ...)
// into a stage. k_dst / v_dst: shared address of the row in the stage.
template <typename Tile>
__device__ __forceinline__ void issue_kv_row(uint32_t k_dst, uint32_t v_dst, const uint16_t* k_pages,
                                             const uint16_t* v_pages, KeyLocation loc, int page_size,
                                             int64_t token_pitch, int64_t head_offset, int part) {
  const int64_t src = (int64_t{loc.page} * page_size + loc.offset) * token_pitch + head_offset;
#pragma unroll
  for (int i = 0; i < Tile::kCopiesPerThread; ++i) {
    const int chunk = part + i * Tile::kThreadsPerKvRow;
    if (Tile::kChunksPerRow % Tile::kThreadsPerKvRow == 0 || chunk < Tile::kChunksPerRow) {
      mma::cp_async_16(k_dst + chunk * 16, k_pages + src + chunk * 8, loc.valid);
      mma::cp_async_16(v_dst + chunk * 16, v_pages + src + chunk * 8, loc.valid);
    }
  }
}

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
// Returns (warp-uniform) whether a running max was raised; then `rescale` is what the earlier
// accumulator rows must be multiplied by, otherwise it is 1 and O needs nothing. kLazy: raise
// only past kRaiseThreshold (above); otherwise on every tile. A row whose scores are all -inf so
// far keeps max -inf and gets p = 0 and rescale = 0, never NaN.
template <int kKeyTiles, bool kLazy>
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
  bool raise = true;
  if constexpr (kLazy) {
    raise = __any_sync(0xffffffffu, tile_max[0] > row_max[0] + kRaiseThreshold ||
                                        tile_max[1] > row_max[1] + kRaiseThreshold);
  }
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

// Masks the warp's scores s of the key tile starting at key0 (needed only on tiles that reach past
// the limit of the warp's first row).
template <typename Tile>
__device__ __forceinline__ void mask_tile(float (&s)[Tile::kWarpMTiles][Tile::kKeyTiles][4], int key0,
                                          const RowMask& mask, int quad) {
#pragma unroll
  for (int m = 0; m < Tile::kWarpMTiles; ++m) {
    mask_scores(s[m], key0, quad, mask.first_row_pos + m * 16, mask.causal, mask.kv_len);
  }
}

// Folds the log2-domain scores s of the key tile starting at key0 into the warp's state: masking
// (when needs_mask), online softmax, rescale of O where a running max moved, O += P V with V from
// the stage at v_lane. (Each row tile is masked just before its softmax: masking all of them
// first costs registers.)
template <typename Tile, bool kBf16, bool kLazy>
__device__ __forceinline__ void fold_scores(WarpState<Tile>& state, float (&s)[Tile::kWarpMTiles][Tile::kKeyTiles][4],
                                            uint32_t v_lane, int key0, bool needs_mask, const RowMask& mask,
                                            int quad) {
  uint32_t p_frag[Tile::kWarpMTiles][Tile::kKeySteps][4];
#pragma unroll
  for (int m = 0; m < Tile::kWarpMTiles; ++m) {
    if (needs_mask) mask_scores(s[m], key0, quad, mask.first_row_pos + m * 16, mask.causal, mask.kv_len);
    float rescale[2];
    const bool moved = softmax_step<Tile::kKeyTiles, kLazy>(s[m], state.row_max[m], state.row_sum[m], rescale);
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

// out rows = o / row sum for the warp's rows below num_q_rows, straight from the C fragments
// (a float2 per lane and n8 tile). out_row0: the warp's first row in out, [., head_dim] at head.
template <typename Tile>
__device__ __forceinline__ void store_rows(const WarpState<Tile>& state, float* out_row0, int64_t row_pitch,
                                           int num_valid_rows, int group, int quad) {
#pragma unroll
  for (int m = 0; m < Tile::kWarpMTiles; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = state.row_sum[m][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
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

template <typename Tile, bool kBf16, bool kLazy>
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
  const int kv_head = head / (a.num_heads / a.num_kv_heads);
  const int num_q_rows = min(kBlockM, seq.num_new_tokens - m0);
  const int q_row0 = seq.query_offset + m0;
  const int first_pos = seq.num_cached_tokens + m0;  // position of the block's row 0
  const int kv_len = seq.num_cached_tokens + seq.num_new_tokens;
  const int kv_end = causal ? first_pos + num_q_rows : kv_len;  // keys any row of the block sees
  const int num_kv_tiles = (kv_end + kBlockN - 1) / kBlockN;
  const int32_t* table = a.batch.page_tables + seq.page_table_offset;
  const int64_t row_pitch = int64_t{a.num_heads} * kHeadDim;  // q and out
  const int64_t token_pitch = int64_t{a.num_kv_heads} * kHeadDim;
  const int64_t kv_head_offset = int64_t{kv_head} * kHeadDim;
  const auto* k_pages = static_cast<const uint16_t*>(a.k_pages);
  const auto* v_pages = static_cast<const uint16_t*>(a.v_pages);

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int group = lane / 4;
  const int quad = lane % 4;

  // The K/V row this thread copies, and which of its 16-byte chunks.
  const int copy_row = threadIdx.x / Tile::kThreadsPerKvRow;
  const int copy_part = threadIdx.x % Tile::kThreadsPerKvRow;
  const uint32_t copy_offset = copy_row * Tile::kRowStride * 2;
  auto issue_tile = [&](int stage, KeyLocation loc) {
    issue_kv_row<Tile>(k_base + stage * kStageBytes + copy_offset, v_base + stage * kStageBytes + copy_offset,
                       k_pages, v_pages, loc, a.page_size, token_pitch, kv_head_offset, copy_part);
  };

  // Prologue: K/V tiles 0 .. kStages - 2 in flight (one commit group each), the table entry of the
  // next tile requested, Q staged.
#pragma unroll
  for (int t = 0; t + 1 < Tile::kStages; ++t) {
    issue_tile(t, locate_key(table, t * kBlockN + copy_row, kv_len, a.page_size));
    mma::cp_async_commit();
  }
  KeyLocation next_loc = locate_key(table, (Tile::kStages - 1) * kBlockN + copy_row, kv_len, a.page_size);
  load_q_tile<Tile, kBf16>(q_smem, a.q, row_pitch, head, q_row0, num_q_rows, a.scale * kLog2E);

  // ldmatrix lane addresses (bytes). Q (A, row tile 0): row warp_row0 + lane%16, dims (lane/16)*8.
  // K (B of Q K^T, non-trans): key (lane/16)*8 + lane%8, dims ((lane/8)%2)*8.
  // V (B of P V, trans): key ((lane/8)%2)*8 + lane%8, dims (lane/16)*8.
  const int warp_row0 = warp * Tile::kWarpRows;
  const uint32_t q_lane = q_base + ((warp_row0 + lane % 16) * Tile::kRowStride + (lane / 16) * 8) * 2;
  const uint32_t k_lane = k_base + (((lane / 16) * 8 + lane % 8) * Tile::kRowStride + ((lane / 8) % 2) * 8) * 2;
  const uint32_t v_lane = v_base + ((((lane / 8) % 2) * 8 + lane % 8) * Tile::kRowStride + (lane / 16) * 8) * 2;

  // Key ranges of this warp's rows: every row sees keys < warp_unmasked_end; no row sees keys
  // >= warp_key_end (0 when the warp holds no valid row).
  const int warp_key_end =
      warp_row0 >= num_q_rows ? 0 : (causal ? first_pos + min(warp_row0 + Tile::kWarpRows, num_q_rows) : kv_len);
  const int warp_unmasked_end = causal ? first_pos + warp_row0 + 1 : kv_len;
  const RowMask mask{first_pos + warp_row0 + group, kv_len, causal};
  WarpState<Tile> state;
  state.reset();

  constexpr int kQRegSteps = Tile::kQInRegisters ? Tile::kDimSteps : 1;
  uint32_t q_frag[kQRegSteps][4];
  if constexpr (Tile::kOverlap) {
    float s[Tile::kWarpMTiles][Tile::kKeyTiles][4];  // scores of `tile`
    mma::cp_async_wait<Tile::kStages - 2>();  // tile 0 landed
    __syncthreads();                          // Q and K/V tile 0 visible to all
#pragma unroll
    for (int ks = 0; ks < Tile::kDimSteps; ++ks) mma::ldmatrix_x4(q_frag[ks], q_lane + ks * 32);
    if (warp_key_end > 0) compute_scores<Tile, kBf16>(s, q_frag, q_lane, k_lane);
    int stage = 0;  // stage of `tile`; tile + 1 is in the next, tile + 2 goes to the one after
    for (int tile = 0; tile < num_kv_tiles; ++tile) {
      mma::cp_async_wait<0>();
      __syncthreads();  // tile + 1's K/V visible to all; every warp is done with tile - 1's stage
      const int next_stage = stage + 1 == Tile::kStages ? 0 : stage + 1;
      if (tile + 2 < num_kv_tiles) {
        issue_tile(next_stage + 1 == Tile::kStages ? 0 : next_stage + 1, next_loc);
        mma::cp_async_commit();
        next_loc = locate_key(table, (tile + 3) * kBlockN + copy_row, kv_len, a.page_size);
      }
      const int key0 = tile * kBlockN;
      if (key0 < warp_key_end) {  // warp-uniform
        if (key0 + kBlockN > warp_unmasked_end) mask_tile<Tile>(s, key0, mask, quad);
        if (key0 + kBlockN < warp_key_end) {
          float s_next[Tile::kWarpMTiles][Tile::kKeyTiles][4];
          compute_scores<Tile, kBf16>(s_next, q_frag, q_lane, k_lane + next_stage * kStageBytes);
          fold_scores<Tile, kBf16, kLazy>(state, s, v_lane + stage * kStageBytes, key0, false, mask, quad);
#pragma unroll
          for (int n = 0; n < Tile::kKeyTiles; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[0][n][e] = s_next[0][n][e];
          }
        } else {
          fold_scores<Tile, kBf16, kLazy>(state, s, v_lane + stage * kStageBytes, key0, false, mask, quad);
        }
      }
      stage = next_stage;
    }
  } else {
    __syncthreads();  // Q tile in shared memory
    if constexpr (Tile::kQInRegisters) {
#pragma unroll
      for (int ks = 0; ks < Tile::kDimSteps; ++ks) mma::ldmatrix_x4(q_frag[ks], q_lane + ks * 32);
    }
    for (int tile = 0; tile < num_kv_tiles; ++tile) {
      const int stage = tile & 1;
      mma::cp_async_wait<0>();
      __syncthreads();  // tile's K/V visible to all; every warp is done with the other stage
      if (tile + 1 < num_kv_tiles) {
        issue_tile(stage ^ 1, next_loc);
        mma::cp_async_commit();
        next_loc = locate_key(table, (tile + 2) * kBlockN + copy_row, kv_len, a.page_size);
      }
      const int key0 = tile * kBlockN;
      if (key0 >= warp_key_end) continue;  // warp-uniform: the whole tile is past this warp's rows
      float s[Tile::kWarpMTiles][Tile::kKeyTiles][4];
      compute_scores<Tile, kBf16>(s, q_frag, q_lane, k_lane + stage * kStageBytes);
      fold_scores<Tile, kBf16, kLazy>(state, s, v_lane + stage * kStageBytes, key0, key0 + kBlockN > warp_unmasked_end,
                                      mask, quad);
    }
  }

  if (warp_row0 >= num_q_rows) return;
  float* out_row0 = a.out + (int64_t{q_row0} + warp_row0) * row_pitch + int64_t{head} * kHeadDim;
  store_rows(state, out_row0, row_pitch, num_q_rows - warp_row0, group, quad);
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

template <typename Tile, bool kBf16, bool kLazy = true>
void launch_tile(const PagedLayerLaunch& a, cudaStream_t stream) {
  const auto kernel = flash_prefill_kernel<Tile, kBf16, kLazy>;
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

template <bool kBf16>
void launch_for_head_dim(const PagedLayerLaunch& a, cudaStream_t stream) {
  switch (a.head_dim) {
    case 64: return launch_tile<PrefillTile<64, 1>, kBf16>(a, stream);
    case 80: return launch_tile<PrefillTile<80, 1>, kBf16>(a, stream);
    case 96: return launch_tile<PrefillTile<96, 1>, kBf16>(a, stream);
    case 128:
      if constexpr (kBf16) {  // TEMP A/B switch
        static const int variant = std::getenv("SPINDLE_PREFILL_VARIANT") ? std::atoi(std::getenv("SPINDLE_PREFILL_VARIANT")) : -1;
        switch (variant) {
          case 0: return launch_tile<PrefillTile<128, 2>, kBf16, false>(a, stream);
          case 1: return launch_tile<PrefillTile<128, 2>, kBf16, true>(a, stream);
          case 2: return launch_tile<PrefillTile<128, 1>, kBf16, false>(a, stream);
          case 3: return launch_tile<PrefillTile<128, 1>, kBf16, true>(a, stream);
          case 4: return launch_tile<PrefillTile<128, 1, true>, kBf16, false>(a, stream);
          case 5: return launch_tile<PrefillTile<128, 1, true>, kBf16, true>(a, stream);
          default: break;
        }
      }
      if (fits_two_blocks_per_sm(PrefillTile<128, 2>::kSharedBytes)) {
        return launch_tile<PrefillTile<128, 2>, kBf16>(a, stream);
      }
      return launch_tile<PrefillTile<128, 1>, kBf16>(a, stream);
    case 256: return launch_tile<PrefillTile<256, 1>, kBf16>(a, stream);
    default: require(false, "flash_prefill: head_dim not instantiated (64, 80, 96, 128, 256)");
  }
}

}  // namespace

bool flash_prefill_supports(int head_dim, KvType kv_type) {
  const bool dim_ok = head_dim == 64 || head_dim == 80 || head_dim == 96 || head_dim == 128 || head_dim == 256;
  return dim_ok && (kv_type == KvType::kBF16 || kv_type == KvType::kF16);
}

size_t flash_prefill_workspace_bytes(const PagedLayerLaunch&) { return 0; }

void launch_flash_prefill(const PagedLayerLaunch& a, cudaStream_t stream) {
  require(flash_prefill_supports(a.head_dim, a.kv_type), "flash_prefill: unsupported head_dim or KV type");
  if (a.batch.num_rows == 0 || a.batch.max_new_tokens == 0 || a.batch.num_sequences == 0) return;
  require(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0, "flash_prefill: num_heads % num_kv_heads");
  require(a.page_size > 0, "flash_prefill: page_size must be positive");
  require(aligned16(a.q) && aligned16(a.out) && aligned16(a.k_pages) && aligned16(a.v_pages),
          "flash_prefill: q, out and K/V pages must be 16-byte aligned");
  require(a.batch.num_sequences <= 65535 && (a.batch.max_new_tokens + kBlockM - 1) / kBlockM <= 65535,
          "flash_prefill: batch exceeds the launch grid");
  if (a.kv_type == KvType::kBF16) {
    launch_for_head_dim<true>(a, stream);
  } else {
    launch_for_head_dim<false>(a, stream);
  }
}

}  // namespace spindle::kernels::cuda::detail
