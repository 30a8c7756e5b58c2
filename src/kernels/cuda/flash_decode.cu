// cuda_flash decode: split-KV (flash-decoding) paged attention for steps where every sequence has
// exactly one new token (launch contract: paged_layer_launch.h, flash_attention.h).
//
// Work split. Block (kv_head_tile, split, sequence) attends the query row of `sequence` for the
// query heads [kv_head * G + 8 * tile, +8) of one KV head (G = num_heads / num_kv_heads; a group
// of more than 8 heads takes several tiles) over the keys [split * chunk, +chunk) of that sequence,
// chunk = chunk_keys_for(its length), so every K/V byte is read once per tile. Splits past a
// sequence's length exit.
// A sequence whose keys fit one split writes `out` directly; otherwise each split writes its
// normalised partial output and log2-sum-exp to the workspace and flash_decode_merge_kernel
// combines them.
//
// Inside a block. Each warp owns a ring of kStages shared-memory stages and streams its own
// tiles of kStageKeys = 16 keys (warp w takes tiles w, w + num_warps, ...) with cp.async, so
// kStages - 1 tiles of K and V (8 KB each at head_dim 128) are in flight per warp without holding
// registers. The slot of every key of the chunk is looked up once into shared memory. Products run
// on tensor cores (mma.m16n8k16, f32 accumulation) with q and the probabilities p rounded once to
// the KV type (as the prefill kernel does):
//   scores   S   [16 heads (8 used) x 8 keys]  += q [heads x 16 dims] . K^T [16 dims x 8 keys]
//   output   O^T [16 dims x 8 heads]           += V^T [16 dims x 16 keys] . P^T [16 keys x 8 heads]
// The score fragments of two 8-key tiles (head lane/4, keys 2*(lane%4)+{0,1}, and the same + 8)
// are exactly the B fragment of P^T, so p never leaves registers. q . K^T runs as four independent
// accumulator chains per 16 keys (two key tiles x even/odd 32-dim groups) to hide mma latency.
// Online softmax in log2 units, f32 throughout. At the end the warps' (max, sum, O) are combined
// through shared memory.
//
// FP8 KV (E4M3FN bytes, kernels/kv_scales.h): the stage copies load 8 bytes per 16-byte ring chunk
// with ordinary loads and store them converted to f16 (exact: every E4M3 value is an f16), so the
// ring, ldmatrix and the f16 mma path are those of f16 KV; the K scale of the block's KV head
// multiplies the f32 scores, the V scale the block's output (partials included: the merge is a
// convex combination). No cp.async for these stages (the conversion needs the bytes in registers):
// a stage's loads are all issued before its stores.
//
// head_dim: any multiple of 8 in [8, 256], run-time, in three compiled buckets (<= 64, <= 128,
// <= 256) per KV type. A bucket always computes its full width: the ring columns past head_dim
// are zeroed once and q is zero there, so no run-time branches sit in the inner loops.
// Chunk sizes: each sequence's own, from its length (chunk_keys_for, the same in a graph replayed at
// any length up to the planned one); the grid's split count from the planned length (make_decode_plan).
//
// Before the wait (programmatic dependent launch, pdl.cuh). A decode step writes one key per
// sequence, its last (the new token's, by the q/k/v split or the K/V writer just before), and no
// kernel writes the uploaded batch. So a split block reads its sequence and page table and issues
// the copies of its first kStages - 1 tiles before it waits for the kernel before it, leaving out
// only the row of the sequence's last key, which it copies after the wait together with q. The
// latency chain batch -> page table -> K/V then overlaps the previous kernel. The split and merge
// kernels let their successors launch first (pdl_begin(true)): the conversion and the output
// projection after the attention are launched and resident before it ends (wherever PDL is on).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/split_policy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/fp8_convert.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/round16.cuh"

namespace spindle::kernels::cuda::detail {
namespace {

constexpr int kMaxWarps = 4;              // warps per split block (fewer where shared memory is small)
constexpr int kMaxThreads = kMaxWarps * 32;
constexpr int kStages = 3;                // cp.async ring depth per warp
constexpr int kHeadsPerTile = 8;          // query heads per block: the n (or m) = 8 side of the mma
constexpr int kStageKeys = 16;            // keys per ring stage: the k = 16 side of the P.V mma
// Split sizes, measured (bench/results/2026-12-01-h200-checks-12/early.md: the 8B shape's graph
// decode step at 512, 2048 and 8000 keys, batch 1, 2 and 8): splits of at least 64 keys and about
// one split block per SM beat the earlier 256 keys and 8 blocks per SM (4.61 -> 4.54 ms at 512 keys,
// batch 1; 5.79 -> 5.68 ms at 2048 keys and 7.74 -> 7.42 ms at 8000 keys, batch 8; within noise
// elsewhere): short sequences get more, smaller splits; long ones fewer blocks and a smaller merge.
constexpr int kMinChunkKeys = 64;         // keys per split: enough to amortise a block's start-up
constexpr int kMaxChunkKeys = 1024;       // ... and small enough for many blocks per SM (short tail)
constexpr int kChunkGranule = kStageKeys; // splits start on stage boundaries
constexpr int kTargetBlocksPerSm = 1;     // split blocks to aim for per SM (one wave)
constexpr int kSlotBytes = kMaxChunkKeys * 4;
constexpr int kMergeThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

// Compile-time shape of one head-dim bucket: head_dim in (kMaxHeadDim / 2, kMaxHeadDim] (the
// smallest bucket also takes every smaller multiple of 8). head_dim itself is a run-time value.
template <int kMaxHeadDim>
struct Tile {
  static constexpr int kMaxChunks = kMaxHeadDim / 8;                   // 16-byte chunks of a K/V row
  static constexpr int kDimGroups = kMaxHeadDim / 32;                  // one ldmatrix.x4 reads 4 chunks
  static constexpr int kDimSteps = kMaxHeadDim / 16;                   // q.K k-steps = O^T m-tiles
  static constexpr int kPitch = kMaxHeadDim + 8;                       // ring row pitch, 16-bit elements:
                                                                       // +16 bytes spreads 8 rows over all banks
  static constexpr int kStageElems = 2 * kStageKeys * kPitch;         // one stage: K rows, then V rows
  static constexpr int kCopiesPerLane = kStageKeys * kMaxChunks / 32;  // 16-byte copies of K per stage
};

// Floats of the end-of-block merge area (aliases the rings): o [warps][8][head_dim + 4], then the
// warps' max [warps][8] and sum [warps][8].
__host__ __device__ inline int merge_floats(int num_warps, int head_dim) {
  return num_warps * kHeadsPerTile * (head_dim + 4) + 2 * num_warps * kHeadsPerTile;
}

// How a sequence's keys are cut into splits, from its length alone (so the kernels and the host
// agree, and a graph planned for the longest length serves every shorter one):
//   c = clamp(round_up(ceil(kv_len / target_splits), kChunkGranule), min_chunk, kMaxChunkKeys),
// then the kv_len keys spread evenly over ceil(kv_len / c) splits (no tiny last split).
struct ChunkRule {
  int target_splits;  // splits wanted per (sequence, KV head tile): enough blocks for the SMs
  int min_chunk;      // keys: enough to amortise a block's start-up
};

__host__ __device__ inline int chunk_keys_for(int kv_len, ChunkRule r) {
  const int len = kv_len > 1 ? kv_len : 1;
  int c = (len + r.target_splits - 1) / r.target_splits;
  c = (c + kChunkGranule - 1) / kChunkGranule * kChunkGranule;
  c = c < r.min_chunk ? r.min_chunk : (c > kMaxChunkKeys ? kMaxChunkKeys : c);
  const int splits = (len + c - 1) / c;
  return ((len + splits - 1) / splits + kChunkGranule - 1) / kChunkGranule * kChunkGranule;
}

struct SplitParams {
  const float* q;                 // [num_rows, num_heads, head_dim]
  float* out;                     // [num_rows, num_heads, head_dim]
  uint16_t* out16;                // null, or out rounded to 16 bits (bf16 when out16_bf16, else f16)
  bool out16_bf16;
  const uint16_t* k_pages;        // [num_pages, page_size, num_kv_heads, head_dim] bf16/fp16 bits
  const uint16_t* v_pages;        // same layout
  const uint8_t* k_pages8;        // the same pages as FP8 bytes (FP8 KV; else unused)
  const uint8_t* v_pages8;
  const float* k_scales;          // FP8 KV: [num_kv_heads] (kernels/kv_scales.h); else null
  const float* v_scales;
  const DeviceSequence* sequences;
  const int32_t* page_tables;
  float* partial_out;             // [num_sequences, num_heads, num_splits, head_dim] (num_splits > 1)
  float* partial_lse;             // [num_sequences, num_heads, num_splits], log2 units
  int num_heads, num_kv_heads, head_dim, page_size;
  int group_size;                 // query heads per KV head
  int num_head_tiles;             // ceil(group_size / kHeadsPerTile)
  ChunkRule rule;                 // a sequence's keys per split (chunk_keys_for)
  int num_splits;                 // splits of the grid: of the longest sequence planned for
  float scale_log2;               // scale * log2(e)
  bool early;                     // copy K/V before the wait and let the merge launch first
};

// ---- device helpers ---------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; zero-fills the destination when !valid.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8x8 b16 matrices; lane l supplies the address of row (l % 8) of matrix (l / 8) and gets
// (row l/4, cols 2*(l%4)+{0,1}) of each, or with .trans (rows 2*(l%4)+{0,1}, col l/4).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}

// d[16x8] += A[16x16] . B[16x8], f32 accumulation. A regs: (row l/4, k 2*(l%4)), (row l/4 + 8, same
// k), (row l/4, k + 8), (row l/4 + 8, k + 8); B regs: (k 2*(l%4), col l/4), (k + 8, col l/4);
// d: (row l/4, cols 2*(l%4)+{0,1}), (row l/4 + 8, same cols).
template <bool kBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// (x0, x1) rounded to nearest in the KV type and packed, x0 in the low half.
template <bool kBf16>
__device__ __forceinline__ uint32_t pack2(float x0, float x1) {
  uint32_t r;
  if constexpr (kBf16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    memcpy(&r, &h, 4);
  } else {
    const __half2 h = __floats2half2_rn(x0, x1);
    memcpy(&r, &h, 4);
  }
  return r;
}

__device__ __forceinline__ float fast_exp2(float x) {  // exp2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- split kernel pieces ----------------------------------------------------------------------

// One warp's running attention state for the block's heads. Lane l: group = l / 4, quad = l % 4.
template <int kMaxHeadDim>
struct WarpState {
  uint32_t q[Tile<kMaxHeadDim>::kDimSteps][2];  // A fragment regs a0, a2 of q . K^T k-step c (a1 = a3 =
                                                 // 0: rows 8-15): head `group`, dims 16c + 2*quad + {0,1}
                                                 // and + 8, in log2 units, zero past head_dim
  float max_log2 = -INFINITY;                    // running max score of head `group`
  float sum = 0.0f;                              // this lane's part of the running sum, head `group`
  float acc[Tile<kMaxHeadDim>::kDimSteps][4];    // O^T: dims 16t + group (+8), heads 2*quad + {0,1}
};

// Where one warp's stage copies come from. Offsets are in 16-bit elements.
struct StageSource {
  const uint16_t* k;        // k_pages + kv_head * head_dim
  const uint16_t* v;        // v_pages + kv_head * head_dim
  const uint8_t* k8;        // FP8 KV: k_pages8 + kv_head * head_dim (offsets then count bytes)
  const uint8_t* v8;
  int64_t slot_pitch;       // num_kv_heads * head_dim: elements from one slot to the next
  const int32_t* slots;     // shared: slot of chunk key i (page * page_size + offset)
  int num_keys;             // keys of this block's chunk
  int num_chunks;           // head_dim / 8
};

// FP8 KV: issue_stage's copies as loads of 8 bytes per chunk, converted and stored into the ring
// (zeros for keys past the chunk); every load of the stage is issued before the first store.
template <int kMaxHeadDim>
__device__ __forceinline__ void issue_stage_fp8(const StageSource& src, uint16_t* k_stage, int key0, int lane,
                                                int skip_key) {
  using T = Tile<kMaxHeadDim>;
  uint16_t* v_stage = k_stage + kStageKeys * T::kPitch;
  uint2 k_bytes[T::kCopiesPerLane], v_bytes[T::kCopiesPerLane];
#pragma unroll
  for (int j = 0; j < T::kCopiesPerLane; ++j) {
    const int i = lane + 32 * j;
    const int row = i / T::kMaxChunks;
    const int chunk = i % T::kMaxChunks;
    const int key = key0 + row;
    k_bytes[j] = v_bytes[j] = make_uint2(0u, 0u);
    if (chunk < src.num_chunks && key != skip_key && key < src.num_keys) {
      const int64_t offset = int64_t{src.slots[key]} * src.slot_pitch + chunk * 8;
      k_bytes[j] = *reinterpret_cast<const uint2*>(src.k8 + offset);
      v_bytes[j] = *reinterpret_cast<const uint2*>(src.v8 + offset);
    }
  }
#pragma unroll
  for (int j = 0; j < T::kCopiesPerLane; ++j) {
    const int i = lane + 32 * j;
    const int row = i / T::kMaxChunks;
    const int chunk = i % T::kMaxChunks;
    if (chunk < src.num_chunks && key0 + row != skip_key) {
      const int dst = row * T::kPitch + chunk * 8;
      *reinterpret_cast<uint4*>(k_stage + dst) = fp8x8_to_half8(k_bytes[j]);
      *reinterpret_cast<uint4*>(v_stage + dst) = fp8x8_to_half8(v_bytes[j]);
    }
  }
}

// Issues the copies of keys [key0, key0 + kStageKeys) of the chunk into one stage (K rows, then V
// rows; row pitch Tile::kPitch); keys past the chunk are zero-filled, columns past head_dim are
// left alone, and the row of chunk key skip_key (if any) is not touched (copy_key_row fills it).
template <int kMaxHeadDim, bool kFp8 = false>
__device__ __forceinline__ void issue_stage(const StageSource& src, uint16_t* k_stage, int key0, int lane,
                                            int skip_key = -1) {
  if constexpr (kFp8) {
    issue_stage_fp8<kMaxHeadDim>(src, k_stage, key0, lane, skip_key);
    return;
  }
  using T = Tile<kMaxHeadDim>;
  uint16_t* v_stage = k_stage + kStageKeys * T::kPitch;
#pragma unroll
  for (int j = 0; j < T::kCopiesPerLane; ++j) {
    const int i = lane + 32 * j;
    const int row = i / T::kMaxChunks;
    const int chunk = i % T::kMaxChunks;
    if (chunk < src.num_chunks) {
      const int key = key0 + row;
      if (key == skip_key) continue;
      const bool valid = key < src.num_keys;
      const int64_t offset = valid ? int64_t{src.slots[key]} * src.slot_pitch + chunk * 8 : 0;
      const int dst = row * T::kPitch + chunk * 8;
      cp_async_16(k_stage + dst, src.k + offset, valid);
      cp_async_16(v_stage + dst, src.v + offset, valid);
    }
  }
}

// Copies the K and V rows of chunk key `key` (in the stage starting at key0) with ordinary loads and
// stores: the row issue_stage left out. Visible to the warp after its next __syncwarp.
template <int kMaxHeadDim, bool kFp8 = false>
__device__ __forceinline__ void copy_key_row(const StageSource& src, uint16_t* k_stage, int key0, int key, int lane) {
  using T = Tile<kMaxHeadDim>;
  uint16_t* v_stage = k_stage + kStageKeys * T::kPitch;
  const int64_t offset = int64_t{src.slots[key]} * src.slot_pitch;
  const int dst = (key - key0) * T::kPitch;
  for (int chunk = lane; chunk < src.num_chunks; chunk += 32) {
    if constexpr (kFp8) {
      const uint2 k_bytes = *reinterpret_cast<const uint2*>(src.k8 + offset + chunk * 8);
      const uint2 v_bytes = *reinterpret_cast<const uint2*>(src.v8 + offset + chunk * 8);
      *reinterpret_cast<uint4*>(k_stage + dst + chunk * 8) = fp8x8_to_half8(k_bytes);
      *reinterpret_cast<uint4*>(v_stage + dst + chunk * 8) = fp8x8_to_half8(v_bytes);
    } else {
      *reinterpret_cast<uint4*>(k_stage + dst + chunk * 8) = *reinterpret_cast<const uint4*>(src.k + offset + chunk * 8);
      *reinterpret_cast<uint4*>(v_stage + dst + chunk * 8) = *reinterpret_cast<const uint4*>(src.v + offset + chunk * 8);
    }
  }
}

// Attends the keys [key0, key0 + kStageKeys) of the chunk held in one stage (masking keys past
// num_keys) and folds them into the warp state. kFp8: the scores times k_scale (the stage holds the
// unscaled FP8 values).
template <int kMaxHeadDim, bool kBf16, bool kFp8 = false>
__device__ __forceinline__ void attend_stage(WarpState<kMaxHeadDim>& st, const uint16_t* k_stage, int key0,
                                             int num_keys, int lane, float k_scale = 1.0f) {
  using T = Tile<kMaxHeadDim>;
  const uint16_t* v_stage = k_stage + kStageKeys * T::kPitch;
  const int quad = lane & 3;

  // s[n][h]: partial scores of head `group` (rows 8-15 unused), keys key0 + 8n + 2*quad + {0,1},
  // over the 32-dim groups of parity h.
  float s[2][2][4];
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int h = 0; h < 2; ++h) s[n][h][0] = s[n][h][1] = s[n][h][2] = s[n][h][3] = 0.0f;
  }
  // ldmatrix.x4 of key tile n, dim group g: matrix e = chunk 4g + e, rows = keys 8n + 0..7, so
  // k[0], k[1] are the B fragment of k-step 2g and k[2], k[3] that of k-step 2g + 1.
  const uint16_t* k_rows = k_stage + (lane & 7) * T::kPitch + (lane >> 3) * 8;
#pragma unroll
  for (int g = 0; g < T::kDimGroups; ++g) {
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      uint32_t k[4];
      ldmatrix_x4(k, k_rows + 8 * n * T::kPitch + 32 * g);
      mma_16816<kBf16>(s[n][g & 1], st.q[2 * g][0], 0u, st.q[2 * g][1], 0u, k[0], k[1]);
      mma_16816<kBf16>(s[n][g & 1], st.q[2 * g + 1][0], 0u, st.q[2 * g + 1][1], 0u, k[2], k[3]);
    }
  }

  // Online softmax (log2 units) over this stage; every lane of a group sees the same max.
  float x[2][2];  // x[n][e]: score of key key0 + 8n + 2*quad + e
  float stage_max = -INFINITY;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      x[n][e] = s[n][0][e] + s[n][1][e];
      if constexpr (kFp8) x[n][e] *= k_scale;
      if (key0 + 8 * n + 2 * quad + e >= num_keys) x[n][e] = -INFINITY;
      stage_max = fmaxf(stage_max, x[n][e]);
    }
  }
  stage_max = fmaxf(stage_max, __shfl_xor_sync(0xffffffffu, stage_max, 1));
  stage_max = fmaxf(stage_max, __shfl_xor_sync(0xffffffffu, stage_max, 2));
  const float new_max = fmaxf(st.max_log2, stage_max);  // finite: key0 < num_keys
  const float alpha = fast_exp2(st.max_log2 - new_max);  // 0 on the first stage
  st.max_log2 = new_max;

  float p[2][2];
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 2; ++e) p[n][e] = fast_exp2(x[n][e] - new_max);
  }
  st.sum = st.sum * alpha + ((p[0][0] + p[0][1]) + (p[1][0] + p[1][1]));
  // B fragment of P^T: (keys 2*quad + {0,1}, head group), (keys 8 + 2*quad + {0,1}, head group).
  const uint32_t b0 = pack2<kBf16>(p[0][0], p[0][1]);
  const uint32_t b1 = pack2<kBf16>(p[1][0], p[1][1]);

  // acc columns are heads 2*quad and 2*quad + 1, whose alphas live in lanes 8*quad and 8*quad + 4.
  const float alpha_even = __shfl_sync(0xffffffffu, alpha, 8 * quad);
  const float alpha_odd = __shfl_sync(0xffffffffu, alpha, 8 * quad + 4);
#pragma unroll
  for (int t = 0; t < T::kDimSteps; ++t) {
    st.acc[t][0] *= alpha_even;
    st.acc[t][1] *= alpha_odd;
    st.acc[t][2] *= alpha_even;
    st.acc[t][3] *= alpha_odd;
  }

  // O^T += V^T . P^T; ldmatrix.trans of (keys 0-7 | 8-15) x (dims 16t + 0-7 | 8-15) gives the A
  // fragment of dim tile t: matrix e holds keys 8*(e/2) + 0..7, dims 16t + 8*(e%2) + 0..7.
  const uint16_t* v_rows = v_stage + ((lane & 7) + ((lane >> 4) << 3)) * T::kPitch + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int t = 0; t < T::kDimSteps; ++t) {
    uint32_t v[4];
    ldmatrix_x4_trans(v, v_rows + 16 * t);
    mma_16816<kBf16>(st.acc[t], v[0], v[1], v[2], v[3], b0, b1);
  }
}

// Combines the warps' states through shared memory (`merge` aliases the rings; every cp.async has
// completed) and writes the block's result for its heads: to `out` when the sequence has one
// split, else the normalised partial output and its log2-sum-exp.
// v_scale: FP8 KV's V scale of the block's KV head (1 otherwise), applied to every value written.
template <int kMaxHeadDim>
__device__ __forceinline__ void finish_block(const SplitParams& p, WarpState<kMaxHeadDim>& st, float* merge,
                                             int num_warps, int heads_in_tile, int head0, int split,
                                             int seq_index, int row, bool single_split, float v_scale) {
  using T = Tile<kMaxHeadDim>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = lane >> 2, quad = lane & 3;
  const int head_dim = p.head_dim;
  const int o_pitch = head_dim + 4;
  float* merge_o = merge;                                            // [warps][8][o_pitch]
  float* merge_max = merge + num_warps * kHeadsPerTile * o_pitch;    // [warps][8]
  float* merge_sum = merge_max + num_warps * kHeadsPerTile;          // [warps][8]

  float sum = st.sum;
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (quad == 0) {
    merge_max[warp * kHeadsPerTile + group] = st.max_log2;
    merge_sum[warp * kHeadsPerTile + group] = sum;
  }
  float* o_even = merge_o + (warp * kHeadsPerTile + 2 * quad) * o_pitch;
  float* o_odd = o_even + o_pitch;
#pragma unroll
  for (int t = 0; t < T::kDimSteps; ++t) {
    const int d = 16 * t + group;
    if (d < head_dim) {
      o_even[d] = st.acc[t][0];
      o_odd[d] = st.acc[t][1];
    }
    if (d + 8 < head_dim) {
      o_even[d + 8] = st.acc[t][2];
      o_odd[d + 8] = st.acc[t][3];
    }
  }
  __syncthreads();

  for (int i = threadIdx.x; i < heads_in_tile * head_dim; i += blockDim.x) {
    const int h = i / head_dim;
    const int d = i - h * head_dim;
    float block_max = -INFINITY;
    for (int w = 0; w < num_warps; ++w) block_max = fmaxf(block_max, merge_max[w * kHeadsPerTile + h]);
    float num = 0.0f, den = 0.0f;
    for (int w = 0; w < num_warps; ++w) {
      const float f = fast_exp2(merge_max[w * kHeadsPerTile + h] - block_max);  // 0 for idle warps
      num += f * merge_o[(w * kHeadsPerTile + h) * o_pitch + d];
      den += f * merge_sum[w * kHeadsPerTile + h];
    }
    const float value = num / den * v_scale;  // (exact for v_scale 1)
    const int head = head0 + h;
    if (single_split) {
      const int64_t at = (int64_t{row} * p.num_heads + head) * head_dim + d;
      p.out[at] = value;
      if (p.out16 != nullptr) {
        float unused;
        p.out16[at] = round_16bit(value, p.out16_bf16, &unused);
      }
    } else {
      const int64_t partial = (int64_t{seq_index} * p.num_heads + head) * p.num_splits + split;
      p.partial_out[partial * head_dim + d] = value;
      if (d == 0) p.partial_lse[partial] = block_max + log2f(den);
    }
  }
}

// Loads the A fragments of q (see WarpState::q) of head head0 + group, scaled into log2 units;
// zero for padding heads (group >= heads_in_tile) and dims past head_dim.
template <int kMaxHeadDim, bool kBf16>
__device__ __forceinline__ void load_q(WarpState<kMaxHeadDim>& st, const SplitParams& p, int row, int head0,
                                       int heads_in_tile, int lane) {
  using T = Tile<kMaxHeadDim>;
  const int group = lane >> 2, quad = lane & 3;
  const float* q = p.q + (int64_t{row} * p.num_heads + head0 + group) * p.head_dim;
#pragma unroll
  for (int c = 0; c < T::kDimSteps; ++c) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int d = 16 * c + 8 * half + 2 * quad;  // head_dim % 8 == 0: d < head_dim covers d + 1
      float2 v = make_float2(0.0f, 0.0f);
      if (group < heads_in_tile && d < p.head_dim) v = *reinterpret_cast<const float2*>(q + d);
      st.q[c][half] = pack2<kBf16>(v.x * p.scale_log2, v.y * p.scale_log2);
    }
  }
}

// Every thread gets the block-wide max (is_max) or sum; `scratch` holds kMergeThreads / 32 floats.
__device__ __forceinline__ float merge_block_reduce(float v, float* scratch, bool is_max) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  __syncthreads();  // earlier readers of scratch are done
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kMergeThreads / 32; ++w) v = is_max ? fmaxf(v, scratch[w]) : v + scratch[w];
  return v;
}

// One (sequence, head)'s output from its splits' normalised partial outputs o_s [num_splits,
// head_dim] and log2-sum-exps lse_s: out = sum_s 2^(lse_s - max) o_s / sum_s 2^(lse_s - max).
// blockDim.x == kMergeThreads; `weights` (num_splits floats) and `scratch` (kMergeThreads / 32) are
// shared memory. The partials are read through L2 (ld.global.cg): in the split kernel's own merge
// other blocks wrote them during this launch. The merge kernel and the split kernel's merge give
// the same bits.
__device__ __forceinline__ void merge_head_splits(const float* lse, const float* partial, int num_splits, int head_dim,
                                                  float* out, uint16_t* out16, bool out16_bf16, float* weights,
                                                  float* scratch) {
  float max_lse = -INFINITY;
  for (int i = threadIdx.x; i < num_splits; i += kMergeThreads) max_lse = fmaxf(max_lse, __ldcg(lse + i));
  max_lse = merge_block_reduce(max_lse, scratch, true);
  float total = 0.0f;
  for (int i = threadIdx.x; i < num_splits; i += kMergeThreads) {
    const float w = exp2f(__ldcg(lse + i) - max_lse);
    weights[i] = w;
    total += w;
  }
  total = merge_block_reduce(total, scratch, false);  // its barriers also publish weights
  const float inv_total = 1.0f / total;
  for (int d = threadIdx.x; d < head_dim; d += kMergeThreads) {
    float acc = 0.0f;
#pragma unroll 4
    for (int i = 0; i < num_splits; ++i) acc += weights[i] * __ldcg(partial + int64_t{i} * head_dim + d);
    const float value = acc * inv_total;
    out[d] = value;
    if (out16 != nullptr) {
      float unused;
      out16[d] = round_16bit(value, out16_bf16, &unused);
    }
  }
}

// Splits a sequence of kv_len keys takes (the grid has grid_splits).
__device__ __forceinline__ int sequence_splits(int kv_len, ChunkRule rule, int grid_splits) {
  const int chunk_keys = chunk_keys_for(kv_len, rule);
  return min((kv_len + chunk_keys - 1) / chunk_keys, grid_splits);
}

// Grid (num_kv_heads * num_head_tiles, num_splits, num_sequences); blockDim.x = 32 * num_warps.
// Dynamic shared memory: kSlotBytes + max(rings, merge area) (split_kernel_smem_bytes).
template <int kMaxHeadDim, bool kBf16, bool kFp8>
__global__ void __launch_bounds__(kMaxThreads, 2) flash_decode_split_kernel(const SplitParams p) {
  if (p.early) {
    pdl_trigger();  // the merge may launch; this block reads only what no kernel writes until pdl_wait below
  } else {
    pdl_begin();
  }
  using T = Tile<kMaxHeadDim>;
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* slots = reinterpret_cast<int32_t*>(smem);                    // [kMaxChunkKeys]
  uint16_t* rings = reinterpret_cast<uint16_t*>(smem + kSlotBytes);    // [warps][kStages][T::kStageElems]

  const int head_tile = blockIdx.x % p.num_head_tiles;
  const int kv_head = blockIdx.x / p.num_head_tiles;
  const int split = blockIdx.y;
  const int seq_index = blockIdx.z;
  const DeviceSequence seq = p.sequences[seq_index];
  const int kv_len = seq.num_cached_tokens + seq.num_new_tokens;
  const int chunk_keys = chunk_keys_for(kv_len, p.rule);
  const int key_begin = split * chunk_keys;
  if (seq.num_new_tokens < 1 || key_begin >= kv_len) return;  // block-uniform
  const int num_keys = min(chunk_keys, kv_len - key_begin);
  const bool single_split = kv_len <= chunk_keys;
  const int row = seq.query_offset;  // the sequence's one query row

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  const int head_dim = p.head_dim;
  const int num_chunks = head_dim / 8;
  const int head0 = kv_head * p.group_size + head_tile * kHeadsPerTile;
  const int heads_in_tile = min(kHeadsPerTile, p.group_size - head_tile * kHeadsPerTile);
  uint16_t* ring = rings + warp * kStages * T::kStageElems;

  // Slots of the chunk's keys: one page-table read per key, once per block.
  const int32_t* table = p.page_tables + seq.page_table_offset;
  for (int i = threadIdx.x; i < num_keys; i += blockDim.x) {
    const int t = key_begin + i;
    slots[i] = table[t / p.page_size] * p.page_size + t % p.page_size;
  }
  // Ring columns [head_dim, kMaxHeadDim) are read by the full-width products but never copied.
  if (num_chunks < T::kMaxChunks) {
    const int pad_chunks = T::kMaxChunks - num_chunks;
    for (int i = lane; i < kStages * 2 * kStageKeys * pad_chunks; i += 32) {
      const int r = i / pad_chunks;
      *reinterpret_cast<uint4*>(ring + r * T::kPitch + 8 * (num_chunks + i % pad_chunks)) = make_uint4(0, 0, 0, 0);
    }
  }
  __syncthreads();  // slots (the pad columns are this warp's own)

  StageSource src;
  src.k = p.k_pages + int64_t{kv_head} * head_dim;
  src.v = p.v_pages + int64_t{kv_head} * head_dim;
  src.k8 = kFp8 ? p.k_pages8 + int64_t{kv_head} * head_dim : nullptr;
  src.v8 = kFp8 ? p.v_pages8 + int64_t{kv_head} * head_dim : nullptr;
  const float k_scale = kFp8 ? p.k_scales[kv_head] : 1.0f;
  const float v_scale = kFp8 ? p.v_scales[kv_head] : 1.0f;
  src.slot_pitch = int64_t{p.num_kv_heads} * head_dim;
  src.slots = slots;
  src.num_keys = num_keys;
  src.num_chunks = num_chunks;

  // This warp's tiles: w, w + num_warps, ... of the chunk's ceil(num_keys / kStageKeys).
  const int num_tiles = (num_keys + kStageKeys - 1) / kStageKeys;
  const int my_tiles = warp < num_tiles ? (num_tiles - warp + num_warps - 1) / num_warps : 0;
  const int first_key = warp * kStageKeys;        // of this warp's tile 0
  const int tile_step = num_warps * kStageKeys;   // keys from one of its tiles to the next
  // The chunk key of the sequence's last position (written by the kernel before this one), if this
  // chunk holds it; before the wait its row is left out.
  const int new_key = p.early && key_begin + num_keys == kv_len ? num_keys - 1 : -1;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < my_tiles) {
      issue_stage<kMaxHeadDim, kFp8>(src, ring + s * T::kStageElems, first_key + s * tile_step, lane, new_key);
    }
    cp_async_commit();
  }
  if (p.early) {
    pdl_wait();
    const int s = new_key - first_key;  // the new key's tile among this warp's, if it is one of its first
    if (new_key >= 0 && s >= 0 && s % tile_step < kStageKeys && s / tile_step < kStages - 1) {
      copy_key_row<kMaxHeadDim, kFp8>(src, ring + (s / tile_step) * T::kStageElems,
                                      first_key + (s / tile_step) * tile_step, new_key, lane);
    }
  }

  WarpState<kMaxHeadDim> st;  // q is read while the first stages are in flight
  load_q<kMaxHeadDim, kBf16>(st, p, row, head0, heads_in_tile, lane);
#pragma unroll
  for (int t = 0; t < T::kDimSteps; ++t) st.acc[t][0] = st.acc[t][1] = st.acc[t][2] = st.acc[t][3] = 0.0f;

  for (int i = 0; i < my_tiles; ++i) {
    cp_async_wait<kStages - 2>();  // this lane's copies of tile i have landed
    __syncwarp();                  // ... and every lane's; stage (i - 1) % kStages is no longer read
    const int next = i + kStages - 1;
    if (next < my_tiles) {
      issue_stage<kMaxHeadDim, kFp8>(src, ring + (next % kStages) * T::kStageElems, first_key + next * tile_step,
                                     lane);
    }
    cp_async_commit();  // one group per iteration, empty or not, keeps wait_group's count right
    attend_stage<kMaxHeadDim, kBf16, kFp8>(st, ring + (i % kStages) * T::kStageElems, first_key + i * tile_step,
                                           num_keys, lane, k_scale);
  }
  cp_async_wait<0>();
  __syncthreads();  // rings become the merge area

  finish_block<kMaxHeadDim>(p, st, reinterpret_cast<float*>(rings), num_warps, heads_in_tile, head0, split,
                            seq_index, row, single_split, v_scale);
}

// ---- merge kernel -----------------------------------------------------------------------------

struct MergeParams {
  const DeviceSequence* sequences;
  const float* partial_out;  // [num_sequences, num_heads, num_splits, head_dim], normalised
  const float* partial_lse;  // [num_sequences, num_heads, num_splits], log2 units
  float* out;                // [num_rows, num_heads, head_dim]
  uint16_t* out16;           // SplitParams::out16
  bool out16_bf16;
  int num_heads, head_dim, num_splits;
  ChunkRule rule;
  bool early;  // pdl_begin(true): the product after the attention may launch at once
};

// Grid (num_heads, num_sequences), kMergeThreads threads, num_splits floats of dynamic shared
// memory. out = sum_s 2^(lse_s - max) o_s / sum_s 2^(lse_s - max) over the sequence's splits;
// sequences with one split were written by the split kernel.
__global__ void __launch_bounds__(kMergeThreads) flash_decode_merge_kernel(const MergeParams p) {
  pdl_begin(p.early);
  extern __shared__ float weights[];  // [num_splits]
  __shared__ float scratch[kMergeThreads / 32];
  const int head = blockIdx.x;
  const int seq_index = blockIdx.y;
  const DeviceSequence seq = p.sequences[seq_index];
  const int kv_len = seq.num_cached_tokens + seq.num_new_tokens;
  const int num_splits = sequence_splits(kv_len, p.rule, p.num_splits);
  if (seq.num_new_tokens < 1 || num_splits <= 1) return;  // block-uniform

  const int64_t base = (int64_t{seq_index} * p.num_heads + head) * p.num_splits;
  const int64_t at = (int64_t{seq.query_offset} * p.num_heads + head) * p.head_dim;
  merge_head_splits(p.partial_lse + base, p.partial_out + base * p.head_dim, num_splits, p.head_dim, p.out + at,
                    p.out16 != nullptr ? p.out16 + at : nullptr, p.out16_bf16, weights, scratch);
}

// ---- host side --------------------------------------------------------------------------------

// How a batch is cut into blocks; a pure function of the launch, shared by the workspace size and
// the launch.
struct DecodePlan {
  int num_head_tiles = 1;  // ceil(group_size / kHeadsPerTile)
  ChunkRule rule{1, kMinChunkKeys};
  int num_splits = 1;  // the most any sequence of up to max_kv_len keys takes
};

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// The smallest split: the registry's value (split_policy.h; default kMinChunkKeys), a multiple
// of kChunkGranule in [kChunkGranule, kMaxChunkKeys] (else kMinChunkKeys).
int min_chunk_keys() {
  const int v = flash_decode_min_chunk_keys();
  return v >= kChunkGranule && v <= kMaxChunkKeys && v % kChunkGranule == 0 ? v : kMinChunkKeys;
}

// Split blocks to aim for per SM: the registry's value (split_policy.h; default kTargetBlocksPerSm).
int target_blocks_per_sm() {
  const int v = flash_decode_blocks_per_sm();
  return v >= 1 && v <= 64 ? v : kTargetBlocksPerSm;
}

// target_splits: enough splits per (sequence, head tile) for target_blocks_per_sm() blocks on
// every SM. The grid's split count bounds ceil(kv_len / chunk_keys_for(kv_len)) for every kv_len up
// to max_kv_len: at most target_splits while the chunk is not clamped, ceil(kv_len / min_chunk)
// when clamped from below, ceil(kv_len / kMaxChunkKeys) from above.
DecodePlan make_decode_plan(const PagedLayerLaunch& a) {
  DecodePlan plan;
  const int group_size = a.num_heads / std::max(1, a.kv.num_kv_heads);
  plan.num_head_tiles = (group_size + kHeadsPerTile - 1) / kHeadsPerTile;
  const int64_t pairs = std::max<int64_t>(1, int64_t{a.batch.num_sequences} * a.kv.num_kv_heads * plan.num_head_tiles);
  const int64_t target_blocks = int64_t{std::max(1, a.num_sms)} * target_blocks_per_sm();
  const int64_t max_kv_len = std::max(1, a.batch.max_kv_len);
  const int64_t target_splits = std::clamp<int64_t>((target_blocks + pairs - 1) / pairs, 1, max_kv_len);
  plan.rule = ChunkRule{static_cast<int>(target_splits), min_chunk_keys()};
  const int64_t below = (max_kv_len + plan.rule.min_chunk - 1) / plan.rule.min_chunk;
  const int64_t above = (max_kv_len + kMaxChunkKeys - 1) / kMaxChunkKeys;
  plan.num_splits = static_cast<int>(std::max<int64_t>({1, std::min(target_splits, below), above}));
  return plan;
}

[[noreturn]] void fail(const char* what) {
  throw_cuda_error(cudaErrorInvalidValue, what, __FILE__, __LINE__);
}

// Largest dynamic shared memory one block may opt into on the current device (cached per thread).
int max_block_smem_bytes() {
  thread_local int cached_device = -1;
  thread_local int cached_bytes = 0;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    CUDA_CHECK(cudaDeviceGetAttribute(&cached_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cached_device = device;
  }
  return cached_bytes;
}

// slots + max(rings, merge area); the layout of flash_decode_split_kernel.
template <int kMaxHeadDim>
size_t split_kernel_smem_bytes(int head_dim, int num_warps) {
  const size_t rings = sizeof(uint16_t) * num_warps * kStages * Tile<kMaxHeadDim>::kStageElems;
  const size_t merge = sizeof(float) * merge_floats(num_warps, head_dim);
  return kSlotBytes + std::max(rings, merge);
}

// Launches the split kernel (the merge kernel follows where a sequence has several splits; merging
// in the split kernel's last block was 118-149 us slower per 8B decode step on the H200, the
// former SPINDLE_FLASH_DECODE_FUSED_MERGE in util/switches.cc).
template <int kMaxHeadDim, bool kBf16, bool kFp8>
void launch_split_kernel(const SplitParams& p, dim3 grid, cudaStream_t stream) {
  const int limit = max_block_smem_bytes();
  int num_warps = kMaxWarps;
  while (num_warps > 1 && split_kernel_smem_bytes<kMaxHeadDim>(p.head_dim, num_warps) > size_t(limit)) --num_warps;
  const size_t smem = split_kernel_smem_bytes<kMaxHeadDim>(p.head_dim, num_warps);
  if (smem > size_t(limit)) fail("flash_decode: not enough shared memory per block on this device");
  auto* kernel = flash_decode_split_kernel<kMaxHeadDim, kBf16, kFp8>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  launch_pdl(kernel, grid, 32 * num_warps, smem, stream, p);
  CUDA_CHECK_LAUNCH();
}

// kFp8: FP8 pages through the f16 path (kBf16 false).
template <bool kBf16, bool kFp8 = false>
void launch_split_kernel_for_head_dim(const SplitParams& p, dim3 grid, cudaStream_t stream) {
  if (p.head_dim <= 64) return launch_split_kernel<64, kBf16, kFp8>(p, grid, stream);
  if (p.head_dim <= 128) return launch_split_kernel<128, kBf16, kFp8>(p, grid, stream);
  return launch_split_kernel<256, kBf16, kFp8>(p, grid, stream);
}

}  // namespace

bool flash_decode_supports(int head_dim, KvType kv_type) {
  const bool kv_ok = kv_type == KvType::kBF16 || kv_type == KvType::kF16 || kv_type == KvType::kFp8;
  return kv_ok && head_dim >= 8 && head_dim <= 256 && head_dim % 8 == 0;
}

size_t flash_decode_workspace_bytes(const PagedLayerLaunch& a) {
  if (a.batch.num_sequences == 0) return 0;
  const DecodePlan plan = make_decode_plan(a);
  if (plan.num_splits <= 1) return 0;
  // partial_out [num_sequences, num_heads, num_splits, head_dim] + partial_lse [.., num_splits]
  return sizeof(float) * size_t(a.batch.num_sequences) * size_t(a.num_heads) * size_t(plan.num_splits) *
         (size_t(a.kv.head_dim) + 1);
}

void launch_flash_decode(const PagedLayerLaunch& a, cudaStream_t stream) {
  if (a.batch.num_sequences == 0) return;
  if (a.batch.max_new_tokens != 1) fail("launch_flash_decode: needs exactly one new token per sequence");
  if (!flash_decode_supports(a.kv.head_dim, kv_type_of(a.kv))) fail("launch_flash_decode: unsupported head_dim or KV type");
  if (a.kv.num_kv_heads <= 0 || a.num_heads % a.kv.num_kv_heads != 0) fail("launch_flash_decode: num_heads % num_kv_heads");
  if (a.kv.page_size < 1) fail("launch_flash_decode: page_size < 1");
  if (a.batch.num_sequences > 65535) fail("launch_flash_decode: more than 65535 sequences");

  const DecodePlan plan = make_decode_plan(a);
  const size_t workspace_bytes = flash_decode_workspace_bytes(a);
  if (workspace_bytes > 0 && (a.workspace == nullptr || a.workspace_bytes < workspace_bytes)) {
    fail("launch_flash_decode: workspace smaller than flash_decode_workspace_bytes()");
  }
  if (plan.num_splits > 65535 || sizeof(float) * plan.num_splits > 48 * 1024) {
    fail("launch_flash_decode: max_kv_len too long");
  }

  SplitParams p;
  p.q = a.q;
  p.out = a.out;
  p.out16 = static_cast<uint16_t*>(a.out16);
  p.out16_bf16 = a.out16_bf16;
  p.k_pages = static_cast<const uint16_t*>(a.k_pages);
  p.v_pages = static_cast<const uint16_t*>(a.v_pages);
  p.k_pages8 = static_cast<const uint8_t*>(a.k_pages);
  p.v_pages8 = static_cast<const uint8_t*>(a.v_pages);
  p.k_scales = a.k_scales;
  p.v_scales = a.v_scales;
  p.sequences = a.batch.sequences;
  p.page_tables = a.batch.page_tables;
  p.partial_out = workspace_bytes > 0 ? static_cast<float*>(a.workspace) : nullptr;
  p.partial_lse = workspace_bytes > 0 ? p.partial_out + size_t(a.batch.num_sequences) * a.num_heads *
                                                            plan.num_splits * a.kv.head_dim
                                      : nullptr;
  p.num_heads = a.num_heads;
  p.num_kv_heads = a.kv.num_kv_heads;
  p.head_dim = a.kv.head_dim;
  p.page_size = a.kv.page_size;
  p.group_size = a.num_heads / a.kv.num_kv_heads;
  p.num_head_tiles = plan.num_head_tiles;
  p.rule = plan.rule;
  p.num_splits = plan.num_splits;
  p.scale_log2 = a.scale * kLog2e;
  p.early = pdl_enabled() && !a.new_keys_before_last;  // early reads assume only the last key is new

  const dim3 grid(static_cast<unsigned>(a.kv.num_kv_heads * plan.num_head_tiles), static_cast<unsigned>(plan.num_splits),
                  static_cast<unsigned>(a.batch.num_sequences));
  if (kv_type_of(a.kv) == KvType::kFp8) {
    if (a.k_scales == nullptr || a.v_scales == nullptr) fail("launch_flash_decode: FP8 KV without its scales");
    launch_split_kernel_for_head_dim<false, true>(p, grid, stream);
  } else if (kv_type_of(a.kv) == KvType::kBF16) {
    launch_split_kernel_for_head_dim<true>(p, grid, stream);
  } else {
    launch_split_kernel_for_head_dim<false>(p, grid, stream);
  }
  if (plan.num_splits <= 1) return;

  MergeParams m;
  m.sequences = a.batch.sequences;
  m.partial_out = p.partial_out;
  m.partial_lse = p.partial_lse;
  m.out = a.out;
  m.out16 = p.out16;
  m.out16_bf16 = p.out16_bf16;
  m.num_heads = a.num_heads;
  m.head_dim = a.kv.head_dim;
  m.rule = plan.rule;
  m.num_splits = plan.num_splits;
  m.early = p.early;
  const dim3 merge_grid(static_cast<unsigned>(a.num_heads), static_cast<unsigned>(a.batch.num_sequences));
  launch_pdl(flash_decode_merge_kernel, merge_grid, kMergeThreads, sizeof(float) * plan.num_splits, stream, m);
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda::detail
