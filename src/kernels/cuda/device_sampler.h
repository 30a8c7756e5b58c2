// DeviceSampler: chooses every logit row's next token on the CUDA device (kernels/sampling_batch.h
// says what a row asks for); only the chosen ids, and the log-probabilities asked for, come back.
//
// One block per row (device_sampler.cu):
//   raw log-probabilities, when wanted: max and log-sum-exp of the raw row (f64 sums), the top
//     top_logprobs candidates by radix select (ties at the boundary included, the host orders
//     them by logit then id, as engine::raw_logprobs does);
//   penalties and logit bias on the row's listed tokens (in place; f32 arithmetic as the CPU
//     sampler, no FMA contraction);
//   greedy: argmax, the lowest id on ties (std::max_element's choice);
//   otherwise the kept set is top-k (radix select of the k-th largest logit) ∩ top-p (radix select
//     over the top-k weights w = exp((l - max) / T), summed in 2^-40 fixed point so the result does
//     not depend on the order of the sums) ∩ min-p (w >= min_p), and the token is
//     argmax over the kept set of (l - max) / T + Gumbel noise, which draws from the renormalised
//     softmax of the kept set. The noise of token i is a hash of (seed, counter, i): deterministic.
// Ties at a top-k or top-p boundary keep every tied token (the CPU sampler keeps the lowest ids).
//
// Not thread-safe; one device, one stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/sampling_batch.h"

namespace spindle::kernels::cuda {

class DeviceSampler {
 public:
  DeviceSampler() { device_.mark_outside_graphs(); }
  ~DeviceSampler();
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  // Samples logits [batch.rows.size(), vocab] (device f32, modified in place by penalties) on
  // `stream`, waits, and writes one result per row into `out`. Throws spindle::Error for a bad
  // batch (offsets outside its lists, token ids outside [0, vocab)).
  void sample(float* logits, int64_t vocab, const SamplingBatch& batch, cudaStream_t stream,
              std::vector<SampledRow>& out);

  // Device and pinned bytes held.
  uint64_t device_bytes() const { return device_.size(); }

 private:
  DeviceBuffer device_;           // rows, lists, saved raw values, results
  std::byte* staging_ = nullptr;  // pinned: the upload, then the results
  size_t staging_bytes_ = 0;
};

// The per-row launch (device_sampler.cu); every pointer is device memory.
namespace detail {
struct SampleResult {
  double log_z;            // raw log-sum-exp of the row (when log-probabilities are wanted)
  int32_t token;
  int32_t num_candidates;  // filled slots of candidates
  int32_t non_finite;      // 1: the row (after penalties and bias) held NaN or Inf
  float logprob;           // raw log-probability of token (want_logprob or top_logprobs)
  int32_t candidate_tokens[kTopLogprobCandidates];
  float candidate_logits[kTopLogprobCandidates];
};
struct SampleLaunch {
  float* logits;  // [num_rows, vocab]
  int64_t vocab;
  int32_t num_rows;
  const SamplingRow* rows;
  const PenaltyToken* penalty_tokens;
  const LogitBiasEntry* biases;
  float* saved_penalty;  // [num penalty tokens] raw logits before the penalties
  float* saved_bias;     // [num biases] logits before the bias
  SampleResult* results;  // [num_rows]
};
void launch_sample_rows(const SampleLaunch& a, cudaStream_t stream);
}  // namespace detail

}  // namespace spindle::kernels::cuda
