// Kernel of device_sampler.h: one 1024-thread block per logit row. The row (up to a few hundred
// KiB) is read from global memory (L2 after the first pass) once per pass: greedy needs one pass;
// a full top-k + top-p draw about eleven (max, 4 radix passes for top-k, the top-k mass, 4 radix
// passes for top-p, the draw). Every pass reads through for_each_logit, which keeps 16 loads in
// flight per thread: a pass costs a few round trips to L2, not one per 1024 logits (the plain
// strided loop took ~50 us for greedy over a 128k vocabulary at batch 1 on an H200).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_sampler.h"
#include "kernels/cuda/pdl.cuh"

namespace spindle::kernels::cuda::detail {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr double kFixedScale = 1099511627776.0;  // 2^40: weights in (0, 1] as integers

// An order-preserving map of floats to unsigned keys (NaN lowest).
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Calls f(i, row[i]) for the elements i of [0, n) this thread owns, loading them in batches of 16
// (four float4 where the row is 16-byte aligned) so each batch costs one memory round trip. Which
// thread owns which element, and the order within a thread, are not those of a plain strided loop:
// callers fold order-free results (max, argmax with the lower index on ties, or, integer sums) or,
// for the log-probability's double sum, accept a different rounding of the same sum.
// (16 loads per round trip took 24-71 us off the 8B decode step against one, H200; the former
// SPINDLE_CUDA_SAMPLER_BATCHED, util/switches.cc.)
template <typename F>
__device__ __forceinline__ void for_each_logit(const float* row, int64_t n, F&& f) {
  constexpr int kBatch = 4;  // float4 (or 4 scalar groups of 4) per thread per round trip
  const int64_t step = blockDim.x;
  if ((reinterpret_cast<uintptr_t>(row) & 15u) == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int64_t n4 = n / 4;
    auto visit4 = [&](int64_t j, float4 v) {  // elements 4 j .. 4 j + 3
      f(4 * j, v.x);
      f(4 * j + 1, v.y);
      f(4 * j + 2, v.z);
      f(4 * j + 3, v.w);
    };
    int64_t j = threadIdx.x;
    for (; j + (kBatch - 1) * step < n4; j += kBatch * step) {
      float4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) v[u] = row4[j + u * step];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) visit4(j + u * step, v[u]);
    }
    for (; j < n4; j += step) visit4(j, row4[j]);
    for (int64_t i = 4 * n4 + threadIdx.x; i < n; i += step) f(i, row[i]);
    return;
  }
  constexpr int kScalarBatch = 4 * kBatch;
  int64_t i = threadIdx.x;
  for (; i + (kScalarBatch - 1) * step < n; i += kScalarBatch * step) {
    float v[kScalarBatch];
#pragma unroll
    for (int u = 0; u < kScalarBatch; ++u) v[u] = row[i + u * step];
#pragma unroll
    for (int u = 0; u < kScalarBatch; ++u) f(i + u * step, v[u]);
  }
  for (; i < n; i += step) f(i, row[i]);
}

struct ArgMax {
  float value;
  int32_t index;
};

// The larger value; on equal values the lower index.
__device__ __forceinline__ ArgMax better(ArgMax a, ArgMax b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

struct Shared {
  unsigned long long hist[256];
  ArgMax argmax[kWarps];
  double sums[kWarps];
  unsigned long long usums[kWarps];
  float maxima[kWarps];
  uint32_t select_prefix;
  unsigned long long select_above;
  int32_t num_candidates;
  float chosen_raw;
  int32_t chosen_raw_found;
};

__device__ ArgMax block_argmax(ArgMax v, Shared& s) {
  for (int off = 16; off > 0; off /= 2) {
    const ArgMax o{__shfl_xor_sync(0xffffffffu, v.value, off), __shfl_xor_sync(0xffffffffu, v.index, off)};
    v = better(v, o);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) s.argmax[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? s.argmax[lane] : ArgMax{-INFINITY, INT_MAX};
    for (int off = 16; off > 0; off /= 2) {
      const ArgMax o{__shfl_xor_sync(0xffffffffu, v.value, off), __shfl_xor_sync(0xffffffffu, v.index, off)};
      v = better(v, o);
    }
    if (lane == 0) s.argmax[0] = v;
  }
  __syncthreads();
  const ArgMax r = s.argmax[0];
  __syncthreads();
  return r;
}

__device__ float block_max(float v, Shared& s) {
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) s.maxima[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? s.maxima[lane] : -INFINITY;
    for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    if (lane == 0) s.maxima[0] = v;
  }
  __syncthreads();
  const float r = s.maxima[0];
  __syncthreads();
  return r;
}

// A fixed-order tree: the same inputs give the same double.
__device__ double block_sum(double v, Shared& s) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) s.sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? s.sums[lane] : 0.0;
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) s.sums[0] = v;
  }
  __syncthreads();
  const double r = s.sums[0];
  __syncthreads();
  return r;
}

__device__ unsigned long long block_sum_u64(unsigned long long v, Shared& s) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) s.usums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? s.usums[lane] : 0ull;
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) s.usums[0] = v;
  }
  __syncthreads();
  const unsigned long long r = s.usums[0];
  __syncthreads();
  return r;
}

// Radix select from the top: the key v such that weight(key > v) < target <= weight(key >= v),
// where weight(i) = weight_of(row[i], key_i) (0 leaves an element out). When the total weight is below
// target, the lowest key of positive weight (everything is kept). Four passes of 8 bits.
template <typename WeightOf>
__device__ uint32_t select_from_top(const float* row, int64_t n, unsigned long long target,
                                    WeightOf weight_of, Shared& s) {
  uint32_t prefix = 0;
  unsigned long long above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) s.hist[i] = 0;
    __syncthreads();
    const uint32_t high = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
    for_each_logit(row, n, [&](int64_t, float value) {
      const uint32_t key = order_key(value);
      if ((key & high) != (prefix & high)) return;
      const unsigned long long w = weight_of(value, key);
      if (w != 0) atomicAdd(&s.hist[(key >> shift) & 255u], w);
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long cum = 0;
      int chosen = -1, lowest = -1;
      for (int d = 255; d >= 0; --d) {
        const unsigned long long h = s.hist[d];
        if (h == 0) continue;
        lowest = d;
        if (above + cum + h >= target) {
          chosen = d;
          break;
        }
        cum += h;
      }
      if (chosen < 0) {  // below target: keep everything down to the lowest key
        chosen = lowest < 0 ? 0 : lowest;
        if (lowest >= 0) cum -= s.hist[lowest];
      }
      s.select_prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
      s.select_above = above + cum;
    }
    __syncthreads();
    prefix = s.select_prefix;
    above = s.select_above;
  }
  __syncthreads();
  return prefix;
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Gumbel(0, 1) noise for token i of the draw (seed, counter).
__device__ __forceinline__ float gumbel(uint64_t stream, int64_t i) {
  const uint64_t h = mix64(stream ^ static_cast<uint64_t>(i));
  const float u = (static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1)
  return -logf(-logf(u));
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(SampleLaunch a) {
  pdl_begin();
  __shared__ Shared s;
  const int row_index = blockIdx.x;
  const SamplingRow r = a.rows[row_index];
  float* row = a.logits + static_cast<int64_t>(row_index) * a.vocab;
  const int64_t n = a.vocab;
  SampleResult& out = a.results[row_index];

  // 0. The grammar mask: a refused token's logit becomes -inf. A NaN or Inf among the original
  // logits is looked for here (the later passes cannot tell it from the -inf written here).
  const bool masked = r.mask_offset >= 0;
  int masked_non_finite = 0;
  if (masked) {
    const uint32_t* mask = a.masks + r.mask_offset;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = row[i];
      masked_non_finite |= !isfinite(v);
      if (((mask[i >> 5] >> (i & 31)) & 1u) == 0) row[i] = -INFINITY;
    }
    masked_non_finite = __syncthreads_or(masked_non_finite);
  }
  // Whether a logit of the (masked) row is NaN or Inf other than a mask's -inf.
  auto non_finite_at = [masked](float v) -> int { return masked ? (isnan(v) || v == INFINITY) : !isfinite(v); };

  // 1. Raw log-probabilities (before any processing but the mask).
  const bool want_logprobs = r.want_logprob != 0 || r.top_logprobs > 0;
  double log_z = 0.0;
  if (want_logprobs) {
    float m = -INFINITY;
    for_each_logit(row, n, [&](int64_t, float v) { m = fmaxf(m, v); });
    m = block_max(m, s);
    double sum = 0.0;
    for_each_logit(row, n, [&](int64_t, float v) { sum += exp(static_cast<double>(v) - m); });
    log_z = static_cast<double>(m) + log(block_sum(sum, s));
    if (threadIdx.x == 0) s.num_candidates = 0;
    __syncthreads();
    if (r.top_logprobs > 0) {
      const unsigned long long k = static_cast<unsigned long long>(r.top_logprobs < n ? r.top_logprobs : n);
      const uint32_t threshold = select_from_top(
          row, n, k, [](float, uint32_t) -> unsigned long long { return 1ull; }, s);
      for_each_logit(row, n, [&](int64_t i, float v) {
        // A masked-out token (-inf) is never a candidate, also where fewer tokens are allowed than k.
        if (v == -INFINITY || order_key(v) < threshold) return;
        const int slot = atomicAdd(&s.num_candidates, 1);
        if (slot < kTopLogprobCandidates) {
          out.candidate_tokens[slot] = static_cast<int32_t>(i);
          out.candidate_logits[slot] = v;
        }
      });
      __syncthreads();
    }
  }

  // 2. Penalties, then the logit bias (each token independently, the CPU sampler's arithmetic).
  for (int i = threadIdx.x; i < r.penalty_count; i += blockDim.x) {
    const PenaltyToken p = a.penalty_tokens[r.penalty_offset + i];
    float v = row[p.token];
    a.saved_penalty[r.penalty_offset + i] = v;
    if (r.repetition_penalty != 1.0f) v = v > 0.0f ? __fdiv_rn(v, r.repetition_penalty) : __fmul_rn(v, r.repetition_penalty);
    if (p.output_count > 0 && (r.presence_penalty != 0.0f || r.frequency_penalty != 0.0f)) {
      v = __fsub_rn(v, __fadd_rn(r.presence_penalty, __fmul_rn(r.frequency_penalty, static_cast<float>(p.output_count))));
    }
    row[p.token] = v;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < r.bias_count; i += blockDim.x) {
    const LogitBiasEntry b = a.biases[r.bias_offset + i];
    a.saved_bias[r.bias_offset + i] = row[b.token];
    row[b.token] = __fadd_rn(row[b.token], b.bias);
  }
  __syncthreads();

  // 3. The choice.
  // Non-finite logits (NaN or Inf anywhere in the row) are looked for in the first pass over the
  // row that every choice makes; such a row gets no token (the engine ends its request).
  ArgMax best{-INFINITY, INT_MAX};
  int non_finite = 0;
  if (r.temperature <= 0.0f || r.top_k == 1) {
    for_each_logit(row, n, [&](int64_t i, float v) {
      non_finite |= non_finite_at(v);
      best = better(best, ArgMax{v, static_cast<int32_t>(i)});
    });
    non_finite = __syncthreads_or(non_finite);
    best = block_argmax(best, s);
  } else {
    float m = -INFINITY;
    for_each_logit(row, n, [&](int64_t, float v) {
      non_finite |= non_finite_at(v);
      m = fmaxf(m, v);
    });
    non_finite = __syncthreads_or(non_finite);
    m = block_max(m, s);
    const float inv_t = 1.0f / r.temperature;
    uint32_t threshold = 0;
    if (r.top_k > 0 && r.top_k < n) {
      threshold = select_from_top(
          row, n, static_cast<unsigned long long>(r.top_k),
          [](float, uint32_t) -> unsigned long long { return 1ull; }, s);
    }
    auto fixed_weight = [&](float v) -> unsigned long long {
      return static_cast<unsigned long long>(static_cast<double>(expf((v - m) * inv_t)) * kFixedScale);
    };
    if (r.top_p < 1.0f) {
      const uint32_t topk_threshold = threshold;
      unsigned long long z = 0;
      for_each_logit(row, n, [&](int64_t, float v) {
        if (order_key(v) >= topk_threshold) z += fixed_weight(v);
      });
      z = block_sum_u64(z, s);
      unsigned long long target = static_cast<unsigned long long>(static_cast<double>(r.top_p) * static_cast<double>(z));
      if (target == 0) target = 1;
      const uint32_t topp_threshold = select_from_top(
          row, n, target,
          [&](float v, uint32_t key) -> unsigned long long { return key >= topk_threshold ? fixed_weight(v) : 0ull; },
          s);
      threshold = topp_threshold > threshold ? topp_threshold : threshold;
    }
    const uint64_t stream = mix64(mix64(r.seed) ^ r.counter);
    for_each_logit(row, n, [&](int64_t i, float l) {
      if (order_key(l) < threshold) return;
      const float scaled = (l - m) * inv_t;
      if (r.min_p > 0.0f && expf(scaled) < r.min_p) return;
      best = better(best, ArgMax{scaled + gumbel(stream, i), static_cast<int32_t>(i)});
    });
    best = block_argmax(best, s);
  }
  non_finite |= masked_non_finite;
  const int32_t token = best.index == INT_MAX ? 0 : best.index;

  // 4. The chosen token's raw logit: saved where a penalty or the bias changed it.
  if (want_logprobs) {
    if (threadIdx.x == 0) s.chosen_raw_found = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < r.penalty_count; i += blockDim.x) {
      if (a.penalty_tokens[r.penalty_offset + i].token == token) {
        s.chosen_raw = a.saved_penalty[r.penalty_offset + i];
        s.chosen_raw_found = 2;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < r.bias_count; i += blockDim.x) {
      if (s.chosen_raw_found != 2 && a.biases[r.bias_offset + i].token == token) {
        s.chosen_raw = a.saved_bias[r.bias_offset + i];
        s.chosen_raw_found = 1;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out.token = token;
    out.non_finite = non_finite;
    out.log_z = log_z;
    out.num_candidates = 0;
    out.logprob = 0.0f;
    if (want_logprobs) {
      const float raw = s.chosen_raw_found ? s.chosen_raw : row[token];
      out.logprob = static_cast<float>(static_cast<double>(raw) - log_z);
      out.num_candidates = s.num_candidates < kTopLogprobCandidates ? s.num_candidates : kTopLogprobCandidates;
    }
  }
}

}  // namespace

void launch_sample_rows(const SampleLaunch& a, cudaStream_t stream) {
  if (a.num_rows == 0) return;
  launch_pdl(sample_rows_kernel, a.num_rows, kThreads, 0, stream, a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace spindle::kernels::cuda::detail

namespace spindle::kernels::cuda {
namespace {
// One launch's sources, by value (kernel parameters: no upload to wait for).
constexpr int kSourcesPerLaunch = 256;
struct TokenSources {
  int32_t count;
  PendingToken items[kSourcesPerLaunch];
};

__global__ void copy_sampled_tokens_kernel(int32_t* token_ids, const detail::SampleResult* results, TokenSources s) {
  pdl_begin();
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < s.count) token_ids[s.items[i].row] = results[s.items[i].source].token;
}
}  // namespace

void copy_sampled_tokens(int32_t* token_ids, const detail::SampleResult* results, const PendingToken* sources,
                         size_t count, cudaStream_t stream) {
  for (size_t begin = 0; begin < count; begin += kSourcesPerLaunch) {
    TokenSources s{};
    s.count = static_cast<int32_t>(std::min<size_t>(kSourcesPerLaunch, count - begin));
    for (int i = 0; i < s.count; ++i) s.items[i] = sources[begin + static_cast<size_t>(i)];
    launch_pdl(copy_sampled_tokens_kernel, 1, kSourcesPerLaunch, 0, stream, token_ids, results, s);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace spindle::kernels::cuda
