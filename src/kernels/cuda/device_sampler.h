// DeviceSampler: chooses every logit row's next token on the CUDA device (kernels/sampling_batch.h
// says what a row asks for); only the chosen ids, and the log-probabilities asked for, come back.
//
// One block per row (device_sampler.cu):
//   the grammar mask (structured output), when the row has one: a refused token's logit becomes
//     -inf before anything reads the row (a NaN or Inf among the original logits still makes the
//     row non-finite; the -inf written here does not);
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
  const uint32_t* masks;  // the rows' grammar masks (SamplingRow::mask_offset)
  float* saved_penalty;  // [num penalty tokens] raw logits before the penalties
  float* saved_bias;     // [num biases] logits before the bias
  SampleResult* results;  // [num_rows]
};
void launch_sample_rows(const SampleLaunch& a, cudaStream_t stream);
}  // namespace detail

// token_ids[s.row] = results[s.source].token for every s (kernels/sampling_batch.h), on `stream`
// (token_ids and results in device memory).
void copy_sampled_tokens(int32_t* token_ids, const detail::SampleResult* results, const PendingToken* sources,
                         size_t count, cudaStream_t stream);

class DeviceSampler {
 public:
  DeviceSampler() { device_.mark_outside_graphs(); }
  ~DeviceSampler();
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  // Samples logits [batch.rows.size(), vocab] (device f32, modified in place by penalties) on
  // `stream`, waits, and writes one result per row into `out`. Throws spindle::Error for a bad
  // batch (offsets outside its lists, token ids outside [0, vocab)). = queue() then collect().
  void sample(float* logits, int64_t vocab, const SamplingBatch& batch, cudaStream_t stream,
              std::vector<SampledRow>& out);
  // The same, in two halves: queue() checks the batch and queues the sampling and the copy of its
  // results to pinned memory on `stream` without waiting (the batch may be reused on return);
  // collect() waits for the oldest queued sampling and writes its rows. At most kMaxQueued are
  // queued at once (the overlap schedule's step in flight and the next one).
  static constexpr int kMaxQueued = 2;
  void queue(float* logits, int64_t vocab, const SamplingBatch& batch, cudaStream_t stream);
  void collect(std::vector<SampledRow>& out);
  int num_queued() const { return num_queued_; }
  // The device results of the last queued sampling (row r's token at last_results()[r].token),
  // valid on its stream until the next queue(): the next step's pending tokens are read there.
  const detail::SampleResult* last_results() const { return last_results_; }
  int last_num_rows() const { return last_num_rows_; }

  // Device and pinned bytes held.
  uint64_t device_bytes() const { return device_.size(); }

 private:
  // One queued sampling's results on the host side: pinned results, the event of their copy, and
  // what collect() needs of its batch.
  struct Slot {
    std::byte* pinned = nullptr;
    size_t pinned_bytes = 0;
    cudaEvent_t copied = nullptr;
    std::vector<int32_t> top_logprobs;  // per row
  };
  DeviceBuffer device_;           // rows, lists, saved raw values, results
  std::byte* staging_ = nullptr;  // pinned: the upload
  size_t staging_bytes_ = 0;
  cudaEvent_t uploaded_ = nullptr;  // the last upload's copy out of staging_ finished
  Slot slots_[kMaxQueued];
  int next_slot_ = 0;   // the slot the next queue() fills
  int num_queued_ = 0;  // queued and not yet collected (the oldest: next_slot_ - num_queued_)
  const detail::SampleResult* last_results_ = nullptr;
  int last_num_rows_ = 0;
};

}  // namespace spindle::kernels::cuda
