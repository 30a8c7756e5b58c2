#include "kernels/cuda/device_sampler.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/cuda/cuda_check.h"
#include "util/error.h"

namespace spindle::kernels::cuda {
namespace {

constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

void check_batch(const SamplingBatch& b, int64_t vocab) {
  const int64_t num_penalties = static_cast<int64_t>(b.penalty_tokens.size());
  const int64_t num_biases = static_cast<int64_t>(b.biases.size());
  for (size_t i = 0; i < b.rows.size(); ++i) {
    const SamplingRow& r = b.rows[i];
    SPINDLE_CHECK(r.penalty_offset >= 0 && r.penalty_count >= 0 &&
                      int64_t{r.penalty_offset} + r.penalty_count <= num_penalties,
                  "device sampling: row {}'s penalty tokens [{}, +{}) are outside the batch's {}", i, r.penalty_offset,
                  r.penalty_count, num_penalties);
    SPINDLE_CHECK(r.bias_offset >= 0 && r.bias_count >= 0 && int64_t{r.bias_offset} + r.bias_count <= num_biases,
                  "device sampling: row {}'s logit biases [{}, +{}) are outside the batch's {}", i, r.bias_offset,
                  r.bias_count, num_biases);
    SPINDLE_CHECK(r.top_logprobs >= 0 && r.top_logprobs <= kMaxTopLogprobs,
                  "device sampling: row {} asks for {} top logprobs (0 to {})", i, r.top_logprobs, kMaxTopLogprobs);
    SPINDLE_CHECK(r.repetition_penalty > 0.0f, "device sampling: row {}: repetition penalty {} must be positive", i,
                  r.repetition_penalty);
  }
  for (const PenaltyToken& p : b.penalty_tokens) {
    SPINDLE_CHECK(p.token >= 0 && p.token < vocab, "device sampling: penalty token {} is outside [0, {})", p.token,
                  vocab);
  }
  for (const LogitBiasEntry& e : b.biases) {
    SPINDLE_CHECK(e.token >= 0 && e.token < vocab, "device sampling: logit bias token {} is outside [0, {})", e.token,
                  vocab);
  }
}

}  // namespace

DeviceSampler::~DeviceSampler() {
  if (staging_ != nullptr) cudaFreeHost(staging_);
}

void DeviceSampler::sample(float* logits, int64_t vocab, const SamplingBatch& batch, cudaStream_t stream,
                           std::vector<SampledRow>& out) {
  const size_t num_rows = batch.rows.size();
  out.resize(num_rows);
  if (num_rows == 0) return;
  SPINDLE_CHECK(vocab > 0 && vocab <= INT32_MAX, "device sampling: vocabulary of {} tokens", vocab);
  check_batch(batch, vocab);

  // Device layout: rows | penalty tokens | biases | saved penalty logits | saved bias logits | results.
  const size_t rows_bytes = num_rows * sizeof(SamplingRow);
  const size_t pen_bytes = batch.penalty_tokens.size() * sizeof(PenaltyToken);
  const size_t bias_bytes = batch.biases.size() * sizeof(LogitBiasEntry);
  const size_t saved_pen_bytes = batch.penalty_tokens.size() * sizeof(float);
  const size_t saved_bias_bytes = batch.biases.size() * sizeof(float);
  const size_t result_bytes = num_rows * sizeof(detail::SampleResult);
  const size_t off_pen = aligned(rows_bytes);
  const size_t off_bias = off_pen + aligned(pen_bytes);
  const size_t upload_bytes = off_bias + bias_bytes;
  const size_t off_saved_pen = aligned(upload_bytes);
  const size_t off_saved_bias = off_saved_pen + aligned(saved_pen_bytes);
  const size_t off_results = off_saved_bias + aligned(saved_bias_bytes);
  const size_t total = off_results + result_bytes;

  const size_t staging = std::max(upload_bytes, result_bytes);
  if (staging > staging_bytes_) {
    CUDA_CHECK(cudaStreamSynchronize(stream));  // nothing of ours is in flight after sample() returns
    if (staging_ != nullptr) CUDA_CHECK(cudaFreeHost(staging_));
    staging_ = nullptr;
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging_), staging));
    staging_bytes_ = staging;
  }
  if (total > device_.size()) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    device_.reserve(std::max(total, device_.size() + device_.size() / 2));
  }
  std::memcpy(staging_, batch.rows.data(), rows_bytes);
  if (pen_bytes > 0) std::memcpy(staging_ + off_pen, batch.penalty_tokens.data(), pen_bytes);
  if (bias_bytes > 0) std::memcpy(staging_ + off_bias, batch.biases.data(), bias_bytes);
  auto* base = device_.as<std::byte>();
  CUDA_CHECK(cudaMemcpyAsync(base, staging_, upload_bytes, cudaMemcpyHostToDevice, stream));

  detail::SampleLaunch a{};
  a.logits = logits;
  a.vocab = vocab;
  a.num_rows = static_cast<int32_t>(num_rows);
  a.rows = reinterpret_cast<const SamplingRow*>(base);
  a.penalty_tokens = reinterpret_cast<const PenaltyToken*>(base + off_pen);
  a.biases = reinterpret_cast<const LogitBiasEntry*>(base + off_bias);
  a.saved_penalty = reinterpret_cast<float*>(base + off_saved_pen);
  a.saved_bias = reinterpret_cast<float*>(base + off_saved_bias);
  a.results = reinterpret_cast<detail::SampleResult*>(base + off_results);
  detail::launch_sample_rows(a, stream);
  // The staging is read by the upload above before this copy writes it (same stream, in order).
  CUDA_CHECK(cudaMemcpyAsync(staging_, a.results, result_bytes, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));

  const auto* results = reinterpret_cast<const detail::SampleResult*>(staging_);
  std::vector<int> order;
  for (size_t i = 0; i < num_rows; ++i) {
    const detail::SampleResult& res = results[i];
    const SamplingRow& r = batch.rows[i];
    SampledRow& o = out[i];
    o.token = res.token;
    o.non_finite = res.non_finite != 0;
    o.logprob = res.logprob;
    o.top_tokens.clear();
    o.top_logprobs.clear();
    if (r.top_logprobs <= 0) continue;
    // Best first: by logit, then by id (engine::raw_logprobs' order).
    order.resize(static_cast<size_t>(res.num_candidates));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int x, int y) {
      const float lx = res.candidate_logits[x], ly = res.candidate_logits[y];
      return lx > ly || (lx == ly && res.candidate_tokens[x] < res.candidate_tokens[y]);
    });
    const size_t k = std::min<size_t>(order.size(), static_cast<size_t>(r.top_logprobs));
    for (size_t j = 0; j < k; ++j) {
      o.top_tokens.push_back(res.candidate_tokens[order[j]]);
      o.top_logprobs.push_back(static_cast<float>(static_cast<double>(res.candidate_logits[order[j]]) - res.log_z));
    }
  }
}

}  // namespace spindle::kernels::cuda
