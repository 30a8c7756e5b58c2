// Internal to the CPU attention kernels: the ISA-independent part of the tiled (flash-style)
// algorithm, included by each ISA's .cc file (never by anything else).
//
// Work split: one task per (sequence, kv heads, query block, kv split). A task owns all query
// heads of the GQA group that share each of its KV heads, so each K/V tile is read (and converted)
// once for rows = block tokens x group heads. Prefill tasks take one KV head; decode-sized tasks
// (few rows per head, memory bound) take all KV heads, so they read whole contiguous token rows
// of the pages instead of num_kv_heads-strided pieces (TLB and prefetcher friendly). Row r of a
// task is KV head kv_head + r / rows_per_head; within it, rr = r % rows_per_head is token
// q_begin + rr / group, query head (kv head) * group + rr % group.
//
// Split-KV: when the batch has fewer tasks than the pool has threads (long single-sequence decode),
// a task's key range is cut into pieces; each piece writes (max, sum, unnormalized O) per row into
// a partial buffer and a second pass merges them.
//
// Everything here sits in an unnamed namespace on purpose: each ISA file is compiled with its own
// target flags, and a shared (weak, COMDAT) symbol compiled with -mavx512f could be picked by the
// linker for the AVX2 file too and fault on a CPU without AVX-512. For the same reason the ISA
// files use no std:: containers of float, no fmt and no SPINDLE_CHECK (those instantiate shared
// templates); checks live in paged_attention_common.cc (baseline flags).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include <immintrin.h>

#include "kernels/cpu/paged_attention.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {

// head_dim % 8 == 0 and the shared checks (defined in paged_attention_common.cc, baseline flags).
void check_optimized_attention_params(const PagedAttentionParams& p, int64_t num_tokens,
                                      const char* kernel_name);

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2E = 1.44269504088896341f;
constexpr float kLn2 = 0.693147180559945309f;

// Keys per tile (a multiple of 32 so every ISA's vectors tile it).
constexpr int kKeyTile = 64;
// Split-KV pieces are at least this many keys (and a multiple of kKeyTile).
constexpr int kMinSplitKeys = 128;

// fp32 -> bf16 bits, round to nearest even (inputs here are finite). Local copy of
// util/half.h's so no shared inline symbol is compiled with this file's flags.
inline uint16_t to_bf16_bits(float value) {
  uint32_t u;
  std::memcpy(&u, &value, sizeof(u));
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// FP8 E4M3FN bytes src[0..8) -> f32 times `scale` (scale_x256 = scale * 2^8). The byte's exponent and
// mantissa bits (6..0) go to bits 13..7 of an f16 and its sign to bit 15: E4M3's exponent bias is 7,
// f16's 15, so that f16 is the E4M3 value / 2^8 exactly, subnormals included (an E4M3 subnormal
// lands on an f16 subnormal of the same mantissa). F16C widens it exactly; one multiply by
// scale * 2^8 gives fp8 * scale rounded once. The NaN codes (0x7F, 0xFF) get the f16 exponent
// 31 over a nonzero mantissa: NaN. Needs AVX + F16C (every file that includes this has them).
// fp8x8_widen: the same without the multiply, value / 2^8 exactly.
inline __m256 fp8x8_widen(const uint8_t* src) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
  const __m128i sign = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8);
  const __m128i em = _mm_and_si128(b, _mm_set1_epi16(0x7F));
  const __m128i nan = _mm_and_si128(_mm_cmpeq_epi16(em, _mm_set1_epi16(0x7F)), _mm_set1_epi16(0x7C00));
  const __m128i half = _mm_or_si128(_mm_or_si128(sign, _mm_slli_epi16(em, 7)), nan);
  return _mm256_cvtph_ps(half);
}
inline __m256 fp8x8_to_f32(const uint8_t* src, __m256 scale_x256) {
  return _mm256_mul_ps(fp8x8_widen(src), scale_x256);
}

// FP8 rows (head_dim D, a multiple of 8) -> f32 dst[n][D], each element times `scale`.
inline void convert_fp8_rows(const uint8_t* const* src, int n, int D, float scale, float* dst) {
  const __m256 scale_x256 = _mm256_set1_ps(scale * 256.0f);
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < D; d += 8) _mm256_storeu_ps(dst + int64_t{j} * D + d, fp8x8_to_f32(src[j] + d, scale_x256));
}

inline int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }
inline int round_up(int a, int b) { return (a + b - 1) / b * b; }
inline int imin(int a, int b) { return a < b ? a : b; }
inline int imax(int a, int b) { return a > b ? a : b; }

// Decode-sized sequences (kDecodeSizedMaxNewTokens, paged_attention.h) split their keys at fixed
// multiples of fixed_split_keys() (a row's partials and their merge then depend only on its own
// position), not by the batch-dependent rule the longer sequences use (make_plan).
// The split length of decode-sized sequences: a constant of the process (the thread count only),
// chosen so that one sequence of ~1000 keys alone gives each thread a task: 512 keys on 2 threads,
// 256 on 4, 128 (kMinSplitKeys) from 8. Larger steps split more than the batch rule did (a batch-16
// decode at 981 keys: 2 splits per sequence, none before); the cost was within the dev VM's noise
// (bench/results/2026-12-03-cpu-amx-softmax).
inline int fixed_split_keys(int num_threads) {
  return imax(kMinSplitKeys, round_up(ceil_div(1024, imax(1, num_threads)), kKeyTile));
}

// A 64-byte aligned, grow-only scratch array (per thread via thread_local owners).
template <class T>
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(data_); }
  T* get(size_t n) {
    if (n > capacity_) {
      std::free(data_);
      const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
      data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (data_ == nullptr) throw std::bad_alloc();
      capacity_ = n;
    }
    return data_;
  }

 private:
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

struct Task {
  int seq = 0;
  int kv_head = 0;
  int num_heads = 1;           // KV heads [kv_head, kv_head + num_heads)
  int q_begin = 0, q_end = 0;  // new-token indices within the sequence
  int k_begin = 0, k_end = 0;  // key positions this task reads; k_end <= the block's last limit
  int num_splits = 1;          // > 1: writes partials, merged afterwards
  int64_t partial = 0;         // first float of this task's partials (when num_splits > 1)
  double cost = 0;
};

struct MergeItem {
  int seq = 0, kv_head = 0, num_heads = 1, q_begin = 0, q_end = 0, num_splits = 1;
  int64_t partial = 0;         // split s of row r at partial + (s * rows + r) * (head_dim + 2)
};

struct Plan {
  std::vector<Task> tasks;
  std::vector<MergeItem> merges;
  int64_t num_partial_floats = 0;
};

// Number of keys query row `token` (new-token index) of sequence s may see.
inline int visible_keys(const PagedAttentionParams& p, const StepSequence& s, int token) {
  return p.causal ? s.num_cached_tokens + token + 1 : s.num_cached_tokens + s.num_new_tokens;
}

// Query rows per KV head at or below which a task takes all KV heads (decode-sized).
constexpr int kAllHeadsMaxRows = 8;

inline int heads_per_task(const PagedAttentionParams& p, int rows_per_head) {
  return rows_per_head <= kAllHeadsMaxRows ? p.kv.num_kv_heads : 1;
}

struct RowCoord {
  int token;  // new-token index in the sequence
  int head;   // query head
};
inline RowCoord row_coord(int group, int kv_head, int q_begin, int rows_per_head, int r) {
  const int rr = r % rows_per_head;
  return {q_begin + rr / group, (kv_head + r / rows_per_head) * group + rr % group};
}

// rows_target: rows per task the ISA likes (block tokens = ceil(rows_target / group)).
// decode_sized_token_tasks: decode-sized sequences (kDecodeSizedMaxNewTokens) get one task per new
// token, for kernels whose one-token tasks run another path than their blocks (avx2's small decode),
// so that a verify's rows are its decode steps'.
// Where the decode-sized sequences' tasks (all KV heads each) are fewer than 2 per thread, their KV
// heads go in groups, enough for 2 tasks per thread where the heads allow (a batch-1 decode of 513
// keys on 2 threads was one 512-key task and one 1-key task: one thread did the step's attention).
// Heads are independent in every kernel's task, so a row's result does not depend on its group.
inline Plan make_plan(const PagedAttentionParams& p, int rows_target, bool decode_sized_token_tasks = false) {
  Plan plan;
  const int group = p.num_heads / p.kv.num_kv_heads;
  const int rows_block_tokens = imax(1, rows_target / group);
  auto tokens_per_block = [&](const StepSequence& s) {
    return decode_sized_token_tasks && s.num_new_tokens <= kDecodeSizedMaxNewTokens ? 1 : rows_block_tokens;
  };
  const int num_threads = p.pool ? p.pool->num_threads() : 1;
  int64_t base_tasks = 0;
  for (const auto& s : p.sequences) {
    const int block_tokens = tokens_per_block(s);
    for (int q0 = 0; q0 < s.num_new_tokens; q0 += block_tokens) {
      const int rph = (imin(s.num_new_tokens, q0 + block_tokens) - q0) * group;
      base_tasks += p.kv.num_kv_heads / heads_per_task(p, rph);
    }
  }
  int want_splits = 1;
  if (num_threads > 1 && base_tasks > 0 && base_tasks < 2 * num_threads)
    want_splits = ceil_div(4 * num_threads, base_tasks);
  const int fixed = fixed_split_keys(num_threads);
  int decode_heads = p.kv.num_kv_heads;  // KV heads per task of a decode-sized sequence's rows
  if (num_threads > 1) {
    int64_t decode_tasks = 0;  // with all heads per task
    for (const auto& s : p.sequences) {
      if (s.num_new_tokens > kDecodeSizedMaxNewTokens) continue;
      const int blocks = ceil_div(s.num_new_tokens, tokens_per_block(s));
      const int keys = s.num_cached_tokens + s.num_new_tokens;
      decode_tasks += int64_t{blocks} * (keys > fixed ? ceil_div(keys, fixed) : 1);
    }
    if (decode_tasks > 0 && decode_tasks < 2 * num_threads) {
      const int groups = imin(p.kv.num_kv_heads, static_cast<int>(ceil_div(2 * num_threads, decode_tasks)));
      decode_heads = ceil_div(p.kv.num_kv_heads, groups);
    }
  }
  const int D = p.kv.head_dim;
  for (int si = 0; si < static_cast<int>(p.sequences.size()); ++si) {
    const auto& s = p.sequences[si];
    const int block_tokens = tokens_per_block(s);
    for (int q0 = 0; q0 < s.num_new_tokens; q0 += block_tokens) {
      const int q1 = imin(s.num_new_tokens, q0 + block_tokens);
      const bool decode_sized = s.num_new_tokens <= kDecodeSizedMaxNewTokens;
      int heads = heads_per_task(p, (q1 - q0) * group);
      if (decode_sized && heads == p.kv.num_kv_heads) heads = decode_heads;
      const int keys = visible_keys(p, s, q1 - 1);
      int splits = 1;
      int chunk = keys;
      if (decode_sized) {
        if (keys > fixed) {
          chunk = fixed;
          splits = ceil_div(keys, chunk);
        }
      } else if (want_splits > 1 && keys > kMinSplitKeys) {
        splits = imin(want_splits, ceil_div(keys, kMinSplitKeys));
        chunk = round_up(ceil_div(keys, splits), kKeyTile);
        splits = ceil_div(keys, chunk);
      }
      for (int h = 0; h < p.kv.num_kv_heads; h += heads) {
        const int task_heads = imin(heads, p.kv.num_kv_heads - h);
        const int rows = (q1 - q0) * group * task_heads;
        MergeItem merge{si, h, task_heads, q0, q1, splits, plan.num_partial_floats};
        for (int sp = 0; sp < splits; ++sp) {
          Task t;
          t.seq = si;
          t.kv_head = h;
          t.num_heads = task_heads;
          t.q_begin = q0;
          t.q_end = q1;
          t.k_begin = sp * chunk;
          t.k_end = imin(keys, (sp + 1) * chunk);
          t.num_splits = splits;
          t.partial = plan.num_partial_floats + int64_t{sp} * rows * (D + 2);
          t.cost = double(rows) * (t.k_end - t.k_begin) + 64.0 * rows;
          plan.tasks.push_back(t);
        }
        if (splits > 1) {
          plan.merges.push_back(merge);
          plan.num_partial_floats += int64_t{splits} * rows * (D + 2);
        }
      }
    }
  }
  // Heaviest first so the dynamic schedule ends balanced (causal blocks differ in length).
  std::stable_sort(plan.tasks.begin(), plan.tasks.end(),
                   [](const Task& a, const Task& b) { return a.cost > b.cost; });
  return plan;
}

inline const float* q_row(const PagedAttentionParams& p, const StepSequence& s, int token, int head) {
  return p.q + ((int64_t{s.query_offset} + token) * p.num_heads + head) * p.kv.head_dim;
}
inline float* out_row(const PagedAttentionParams& p, const StepSequence& s, int token, int head) {
  return p.out + ((int64_t{s.query_offset} + token) * p.num_heads + head) * p.kv.head_dim;
}

// Row pointers of keys [k0, k0 + n) of one KV head, following the page table.
template <class T>
inline void gather_rows(const PagedAttentionParams& p, const StepSequence& s, const void* pages,
                        int kv_head, int k0, int n, const T** rows) {
  const int64_t kv_row = int64_t{p.kv.num_kv_heads} * p.kv.head_dim;
  const T* base = static_cast<const T*>(pages) + int64_t{kv_head} * p.kv.head_dim;
  const int ps = p.kv.page_size;
  for (int j = 0; j < n;) {
    const int t = k0 + j;
    const int slot = t % ps;
    const int count = imin(ps - slot, n - j);
    const T* first = base + (int64_t{p.page_tables[s.page_table_offset + t / ps]} * ps + slot) * kv_row;
    for (int c = 0; c < count; ++c) rows[j + c] = first + c * kv_row;
    j += count;
  }
}

// Prefetches K and V rows of keys [k0, k0 + n) (the next tile) into the cache: rows of one KV
// head are num_kv_heads * head_dim elements apart, a stride the hardware prefetchers miss.
inline void prefetch_tile(const PagedAttentionParams& p, const StepSequence& s, int kv_head,
                          int num_heads, int k0, int n) {
  const int64_t elem = p.kv.dtype == DType::kBF16 ? 2 : p.kv.dtype == DType::kF8E4M3 ? 1 : 4;
  const int64_t kv_row = int64_t{p.kv.num_kv_heads} * p.kv.head_dim * elem;
  const int64_t row_bytes = int64_t{p.kv.head_dim} * num_heads * elem;
  const char* kb = static_cast<const char*>(p.k_pages) + int64_t{kv_head} * p.kv.head_dim * elem;
  const char* vb = static_cast<const char*>(p.v_pages) + int64_t{kv_head} * p.kv.head_dim * elem;
  const int ps = p.kv.page_size;
  for (int j = 0; j < n; ++j) {
    const int t = k0 + j;
    const int64_t off = (int64_t{p.page_tables[s.page_table_offset + t / ps]} * ps + t % ps) * kv_row;
    for (int64_t b = 0; b < row_bytes; b += 64) {
      _mm_prefetch(kb + off + b, _MM_HINT_T0);
      _mm_prefetch(vb + off + b, _MM_HINT_T0);
    }
  }
}

// Ends a task: rows' (m, l, O) to out (normalized) or to the partial buffer.
// o: [rows][o_stride] (o_stride >= head_dim; 0 means head_dim).
inline void finish_task(const PagedAttentionParams& p, const Task& t, int rows, const float* m,
                        const float* l, const float* o, float* partials, int o_stride = 0) {
  const int D = p.kv.head_dim;
  const int group = p.num_heads / p.kv.num_kv_heads;
  const auto& s = p.sequences[t.seq];
  const int rows_per_head = rows / t.num_heads;
  for (int r = 0; r < rows; ++r) {
    const float* src = o + int64_t{r} * (o_stride ? o_stride : D);
    if (t.num_splits == 1) {
      const RowCoord c = row_coord(group, t.kv_head, t.q_begin, rows_per_head, r);
      float* dst = out_row(p, s, c.token, c.head);
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      for (int d = 0; d < D; ++d) dst[d] = src[d] * inv;
    } else {
      float* dst = partials + t.partial + int64_t{r} * (D + 2);
      dst[0] = m[r];
      dst[1] = l[r];
      std::memcpy(dst + 2, src, sizeof(float) * D);
    }
  }
}

inline void merge_splits(const PagedAttentionParams& p, const MergeItem& item, const float* partials) {
  const int D = p.kv.head_dim;
  const int group = p.num_heads / p.kv.num_kv_heads;
  const int rows_per_head = (item.q_end - item.q_begin) * group;
  const int rows = rows_per_head * item.num_heads;
  const auto& s = p.sequences[item.seq];
  for (int r = 0; r < rows; ++r) {
    const RowCoord c = row_coord(group, item.kv_head, item.q_begin, rows_per_head, r);
    float* dst = out_row(p, s, c.token, c.head);
    float big = kNegInf;
    for (int sp = 0; sp < item.num_splits; ++sp) {
      const float* part = partials + item.partial + (int64_t{sp} * rows + r) * (D + 2);
      big = part[0] > big ? part[0] : big;
    }
    for (int d = 0; d < D; ++d) dst[d] = 0.0f;
    if (big == kNegInf) continue;
    float total = 0.0f;
    for (int sp = 0; sp < item.num_splits; ++sp) {
      const float* part = partials + item.partial + (int64_t{sp} * rows + r) * (D + 2);
      if (part[0] == kNegInf) continue;
      const float w = std::exp(part[0] - big);
      total += w * part[1];
      for (int d = 0; d < D; ++d) dst[d] += w * part[2 + d];
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    for (int d = 0; d < D; ++d) dst[d] *= inv;
  }
}

// Runs fn(task, partials) for every task of the plan on p.pool, then merges the splits.
template <class Fn>
void run_plan(const PagedAttentionParams& p, const Plan& plan, Fn&& fn) {
  Scratch<float> partial_buffer;
  float* partials = plan.num_partial_floats ? partial_buffer.get(plan.num_partial_floats) : nullptr;
  const int64_t n = static_cast<int64_t>(plan.tasks.size());
  if (p.pool && n > 1) {
    p.pool->parallel_for(n, [&](int64_t i) { fn(plan.tasks[i], partials); });
  } else {
    for (int64_t i = 0; i < n; ++i) fn(plan.tasks[i], partials);
  }
  const int64_t m = static_cast<int64_t>(plan.merges.size());
  if (p.pool && m > 1) {
    p.pool->parallel_for(m, [&](int64_t i) { merge_splits(p, plan.merges[i], partials); });
  } else {
    for (int64_t i = 0; i < m; ++i) merge_splits(p, plan.merges[i], partials);
  }
}

// Per-thread buffers of the vector (non-AMX) task.
struct VectorScratch {
  Scratch<float> q, o, s, m, l, corr, k_conv, v_conv, k_t;
  Scratch<uint16_t> q_bf16;
  Scratch<int> limit;
  Scratch<const void*> k_rows, v_rows;
};

inline VectorScratch& vector_scratch() {
  thread_local VectorScratch scratch;
  return scratch;
}

// The flash-style task for vector ISAs. Isa provides (all static):
//   kWidth                      floats per vector
//   kRowBlock                   rows a micro-kernel handles at once; tasks with more rows convert
//                               bf16 K/V tiles to f32 once instead of per row block
//   scores<KT>(q, q_stride, rows, k_rows, n, D, s, s_stride)        s[r][j] = q_r . k_j
//   scores_bf16dot(qb, qb_stride, rows, k_rows, n, D, s, s_stride)  same, q and k in bf16
//   softmax_rows(s, s_stride, rows, n_pad, m, l, corr)  online softmax update, s -> p in place
//   pv<VT>(p, p_stride, rows, v_rows, n, D, o, corr)    o_r = o_r * corr_r + sum_j p_rj v_j
//   convert_rows(src_rows, n, D, dst)                   bf16 rows -> f32 [n][D]
//   kTransposedScores                                   true: also (prefill sequences, below)
//   transpose_rows(src_rows, n, n_pad, D, dst, ld)      rows -> f32 dst[d * ld + j], zero past n
//   scores_transposed(q, q_stride, rows, kt, ld, n_pad, D, s, s_stride)  scores from that layout
//   softmax_rows_base2(s, s_stride, rows, n_pad, m, l, corr)             softmax_rows for log2 scores
//   kTransposedBf16Dot                                  true: prefill sequences with bf16 dot products
//   transpose_pairs(src_rows, n, n_pad, D, dst, ld)     bf16 rows -> 32-bit pairs dst[i * ld + j]
//   scores_transposed_bf16(qb, qb_stride, rows, kt, ld, n_pad, D, s, s_stride)  scores from that layout
// A sequence of more than kDecodeSizedMaxNewTokens new tokens (a prefill) whose K tiles are
// converted anyway takes the transposed scores where the ISA has them: no horizontal sum per score
// (at head_dim 32 those sums and the score scatter cost as much as the dot products), and the ISA's
// softmax_rows_base2 (scores in log2 units: q pre-scaled by log2 e; m back in natural units for
// finish_task). With bf16 dot products (avx512_bf16) a prefill's K tiles go into 32-bit bf16 pairs
// transposed (transpose_pairs) instead: 16 keys per vdpbf16ps with q's pair broadcast, no horizontal
// sum either, and the natural-base softmax (q rounded to bf16 as the decode rows round it). Decode and verify rows keep the row-order sums, so that a verify's rows equal its decode steps', bit for bit.
// FP8 KV: a prefill's K and V tiles are converted to f32 with their head's scale (convert_fp8_rows),
// K transposed where the ISA has transposed scores (as bf16's converted tiles). Decode-sized tasks,
// where the ISA reads FP8 rows itself (kFp8Rows: avx2's load8 of 8 bytes, avx512's load16 of 16,
// give value / 2^8), run the micro-kernels on the page rows as they are, q pre-multiplied by its KV
// head's k_scale * 2^8 and O by v_scale * 2^8 at the end (both linear); else every K and V tile is
// converted first (row-order sums). Verify rows are decode-sized: they take the decode rows' path.
template <class Isa>
void vector_task(const PagedAttentionParams& p, const Task& t, float* partials, bool bf16_dot) {
  const int D = p.kv.head_dim;
  const int group = p.num_heads / p.kv.num_kv_heads;
  const auto& s = p.sequences[t.seq];
  const int rph = (t.q_end - t.q_begin) * group;  // rows per KV head
  const int rows = rph * t.num_heads;
  const bool kv_bf16 = p.kv.dtype == DType::kBF16;
  const bool kv_fp8 = p.kv.dtype == DType::kF8E4M3;
  const int dq = round_up(D, 32);  // bf16 q stride, zero padded

  VectorScratch& sc = vector_scratch();
  float* q = sc.q.get(size_t(rows) * D);
  float* o = sc.o.get(size_t(rows) * D);
  float* sbuf = sc.s.get(size_t(rows) * kKeyTile);
  float* m = sc.m.get(rows);
  float* l = sc.l.get(rows);
  float* corr = sc.corr.get(rows);
  int* limit = sc.limit.get(rows);
  const void** k_rows = sc.k_rows.get(kKeyTile);
  const void** v_rows = sc.v_rows.get(kKeyTile);
  uint16_t* qb = nullptr;

  const bool use_dot = bf16_dot && kv_bf16;
  const bool convert = kv_bf16 && rph > Isa::kRowBlock;
  const bool prefill = s.num_new_tokens > kDecodeSizedMaxNewTokens;
  const bool transposed = Isa::kTransposedScores && ((convert && !use_dot) || kv_fp8) && prefill;
  const bool transposed_dot = Isa::kTransposedBf16Dot && use_dot && prefill;
  // The f32 transposed tasks run the softmax in base 2: q pre-scaled by log2 e, m in log2 units until
  // the end. The bf16 pairs do not: their q is rounded to bf16, and q * scale * log2 e rounds
  // differently from the decode rows' q * scale, a far larger change than the order of the sums
  // (ServerApiTest.ChoicesShareThePromptsPages computes its prompt as a prefill once and as a short
  // tail once, and got two greedy texts).
  const float q_scale = transposed ? p.scale * kLog2E : p.scale;
  // (decode-sized only: a prefill's rows re-read each K and V row once per kRowBlock rows, and
  // converting those 16 bytes every time cost more than one conversion into a buffer)
  const bool fp8_rows = Isa::kFp8Rows && kv_fp8 && !prefill;
  for (int r = 0; r < rows; ++r) {
    const RowCoord c = row_coord(group, t.kv_head, t.q_begin, rph, r);
    const float* src = q_row(p, s, c.token, c.head);
    const float row_scale = fp8_rows ? q_scale * (p.k_scales[t.kv_head + r / rph] * 256.0f) : q_scale;
    for (int d = 0; d < D; ++d) q[int64_t{r} * D + d] = src[d] * row_scale;
    limit[r] = visible_keys(p, s, c.token);
    m[r] = kNegInf;
    l[r] = 0.0f;
  }
  std::memset(o, 0, sizeof(float) * rows * D);
  if (use_dot) {
    qb = sc.q_bf16.get(size_t(rows) * dq);
    for (int r = 0; r < rows; ++r) {
      for (int d = 0; d < D; ++d) qb[int64_t{r} * dq + d] = to_bf16_bits(q[int64_t{r} * D + d]);
      for (int d = D; d < dq; ++d) qb[int64_t{r} * dq + d] = 0;
    }
  }
  float* k_conv = (convert && !use_dot && !transposed) || kv_fp8 ? sc.k_conv.get(size_t(kKeyTile) * D) : nullptr;
  float* k_t = transposed ? sc.k_t.get(size_t(kKeyTile) * D) : nullptr;
  // (uint32 pairs, through intrinsics only, in the float scratch: kKeyTile * dq / 2 of them)
  uint32_t* k_pairs = transposed_dot ? reinterpret_cast<uint32_t*>(sc.k_t.get(size_t(kKeyTile) * dq / 2)) : nullptr;
  float* v_conv = convert || kv_fp8 ? sc.v_conv.get(size_t(kKeyTile) * D) : nullptr;

  for (int k0 = t.k_begin; k0 < t.k_end; k0 += kKeyTile) {
    const int n = imin(kKeyTile, t.k_end - k0);
    const int n_pad = round_up(n, Isa::kWidth);
    if (k0 + kKeyTile < t.k_end)
      prefetch_tile(p, s, t.kv_head, t.num_heads, k0 + kKeyTile, imin(kKeyTile, t.k_end - k0 - kKeyTile));
    for (int hh = 0; hh < t.num_heads; ++hh) {
      const int h = t.kv_head + hh;
      const int64_t r0 = int64_t{hh} * rph;
      const float* qh = q + r0 * D;
      float* sh = sbuf + r0 * kKeyTile;
      float* oh = o + r0 * D;
      if (kv_fp8) {
        const auto** kr = reinterpret_cast<const uint8_t**>(k_rows);
        gather_rows(p, s, p.k_pages, h, k0, n, kr);
        gather_rows(p, s, p.v_pages, h, k0, n, reinterpret_cast<const uint8_t**>(v_rows));
        if (fp8_rows) {
          if constexpr (Isa::kFp8Rows) Isa::scores(qh, D, rph, kr, n, D, sh, kKeyTile);
        } else {
          convert_fp8_rows(kr, n, D, p.k_scales[h], k_conv);
          const float* kf[kKeyTile];
          for (int j = 0; j < n; ++j) kf[j] = k_conv + int64_t{j} * D;
          if (transposed) {
            if constexpr (Isa::kTransposedScores) {
              Isa::transpose_rows(kf, n, n_pad, D, k_t, kKeyTile);
              Isa::scores_transposed(qh, D, rph, k_t, kKeyTile, n_pad, D, sh, kKeyTile);
            }
          } else {
            Isa::scores(qh, D, rph, kf, n, D, sh, kKeyTile);
          }
        }
      } else if (kv_bf16) {
        const auto** kr = reinterpret_cast<const uint16_t**>(k_rows);
        const auto** vr = reinterpret_cast<const uint16_t**>(v_rows);
        gather_rows(p, s, p.k_pages, h, k0, n, kr);
        gather_rows(p, s, p.v_pages, h, k0, n, vr);
        if (transposed_dot) {
          if constexpr (Isa::kTransposedBf16Dot) {
            Isa::transpose_pairs(kr, n, n_pad, D, k_pairs, kKeyTile);
            Isa::scores_transposed_bf16(qb + r0 * dq, dq, rph, k_pairs, kKeyTile, n_pad, D, sh, kKeyTile);
          }
        } else if (use_dot) {
          Isa::scores_bf16dot(qb + r0 * dq, dq, rph, kr, n, D, sh, kKeyTile);
        } else if (transposed) {
          if constexpr (Isa::kTransposedScores) {
            Isa::transpose_rows(kr, n, n_pad, D, k_t, kKeyTile);
            Isa::scores_transposed(qh, D, rph, k_t, kKeyTile, n_pad, D, sh, kKeyTile);
          }
        } else if (convert) {
          Isa::convert_rows(kr, n, D, k_conv);
          const float* kf[kKeyTile];
          for (int j = 0; j < n; ++j) kf[j] = k_conv + int64_t{j} * D;
          Isa::scores(qh, D, rph, kf, n, D, sh, kKeyTile);
        } else {
          Isa::scores(qh, D, rph, kr, n, D, sh, kKeyTile);
        }
      } else {
        const auto** kr = reinterpret_cast<const float**>(k_rows);
        gather_rows(p, s, p.k_pages, h, k0, n, kr);
        gather_rows(p, s, p.v_pages, h, k0, n, reinterpret_cast<const float**>(v_rows));
        Isa::scores(qh, D, rph, kr, n, D, sh, kKeyTile);
      }
      for (int r = 0; r < rph; ++r) {
        const int visible = imax(0, imin(n, limit[r0 + r] - k0));
        float* srow = sh + int64_t{r} * kKeyTile;
        for (int j = visible; j < n_pad; ++j) srow[j] = kNegInf;
      }
      if constexpr (Isa::kTransposedScores) {
        if (transposed) {
          Isa::softmax_rows_base2(sh, kKeyTile, rph, n_pad, m + r0, l + r0, corr + r0);
        } else {
          Isa::softmax_rows(sh, kKeyTile, rph, n_pad, m + r0, l + r0, corr + r0);
        }
      } else {
        Isa::softmax_rows(sh, kKeyTile, rph, n_pad, m + r0, l + r0, corr + r0);
      }
      if (kv_fp8 && fp8_rows) {
        if constexpr (Isa::kFp8Rows) Isa::pv(sh, kKeyTile, rph, reinterpret_cast<const uint8_t**>(v_rows), n, D, oh, corr + r0);
      } else if (kv_fp8) {
        convert_fp8_rows(reinterpret_cast<const uint8_t**>(v_rows), n, D, p.v_scales[h], v_conv);
        const float* vf[kKeyTile];
        for (int j = 0; j < n; ++j) vf[j] = v_conv + int64_t{j} * D;
        Isa::pv(sh, kKeyTile, rph, vf, n, D, oh, corr + r0);
      } else if (kv_bf16) {
        const auto** vr = reinterpret_cast<const uint16_t**>(v_rows);
        if (convert) {
          Isa::convert_rows(vr, n, D, v_conv);
          const float* vf[kKeyTile];
          for (int j = 0; j < n; ++j) vf[j] = v_conv + int64_t{j} * D;
          Isa::pv(sh, kKeyTile, rph, vf, n, D, oh, corr + r0);
        } else {
          Isa::pv(sh, kKeyTile, rph, vr, n, D, oh, corr + r0);
        }
      } else {
        Isa::pv(sh, kKeyTile, rph, reinterpret_cast<const float**>(v_rows), n, D, oh, corr + r0);
      }
    }
  }
  if (transposed) {  // split partials are merged in natural units (-inf stays -inf)
    for (int r = 0; r < rows; ++r) m[r] *= kLn2;
  }
  if (fp8_rows) {  // O summed p * v / 2^8: times its head's v_scale * 2^8
    for (int r = 0; r < rows; ++r) {
      const float v_scale = p.v_scales[t.kv_head + r / rph] * 256.0f;
      for (int d = 0; d < D; ++d) o[int64_t{r} * D + d] *= v_scale;
    }
  }
  finish_task(p, t, rows, m, l, o, partials);
}

}  // namespace
}  // namespace spindle::kernels::cpu
