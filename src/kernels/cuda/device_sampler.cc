#include "kernels/cuda/device_sampler.h"

#include <algorithm>
#include <cmath>
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
    const int64_t mask_words = (vocab + 31) / 32;
    SPINDLE_CHECK(r.mask_offset < 0 || r.mask_offset + mask_words <= static_cast<int64_t>(b.masks.size()),
                  "device sampling: row {}'s grammar mask [{}, +{}) is outside the batch's {} words", i, r.mask_offset,
                  mask_words, b.masks.size());
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
  if (uploaded_ != nullptr) cudaEventDestroy(uploaded_);
  for (Slot& slot : slots_) {
    if (slot.pinned != nullptr) cudaFreeHost(slot.pinned);
    if (slot.copied != nullptr) cudaEventDestroy(slot.copied);
  }
}

void DeviceSampler::sample(float* logits, int64_t vocab, const SamplingBatch& batch, cudaStream_t stream,
                           std::vector<SampledRow>& out) {
  queue(logits, vocab, batch, stream);
  collect(out);
}

namespace {
// Grows pinned host memory to `bytes` (contents lost); the caller made sure nothing reads it.
void grow_pinned(std::byte*& p, size_t& have, size_t bytes) {
  if (bytes <= have) return;
  if (p != nullptr) CUDA_CHECK(cudaFreeHost(p));
  p = nullptr;
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&p), bytes));
  have = bytes;
}
}  // namespace

void DeviceSampler::queue(float* logits, int64_t vocab, const SamplingBatch& batch, cudaStream_t stream) {
  SPINDLE_CHECK(num_queued_ < kMaxQueued, "device sampling: {} samplings are queued already (collect one first)",
                num_queued_);
  const size_t num_rows = batch.rows.size();
  SPINDLE_CHECK(vocab > 0 && vocab <= INT32_MAX, "device sampling: vocabulary of {} tokens", vocab);
  check_batch(batch, vocab);
  Slot& slot = slots_[next_slot_];
  slot.top_logprobs.resize(num_rows);
  for (size_t i = 0; i < num_rows; ++i) slot.top_logprobs[i] = batch.rows[i].top_logprobs;
  if (slot.copied == nullptr) CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
  if (uploaded_ == nullptr) CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
  next_slot_ = (next_slot_ + 1) % kMaxQueued;
  ++num_queued_;
  last_results_ = nullptr;
  last_num_rows_ = 0;
  if (num_rows == 0) {
    CUDA_CHECK(cudaEventRecord(slot.copied, stream));
    return;
  }

  // Device layout: rows | penalty tokens | biases | grammar masks | saved penalty logits | saved
  // bias logits | results.
  const size_t rows_bytes = num_rows * sizeof(SamplingRow);
  const size_t pen_bytes = batch.penalty_tokens.size() * sizeof(PenaltyToken);
  const size_t bias_bytes = batch.biases.size() * sizeof(LogitBiasEntry);
  const size_t mask_bytes = batch.masks.size() * sizeof(uint32_t);
  const size_t saved_pen_bytes = batch.penalty_tokens.size() * sizeof(float);
  const size_t saved_bias_bytes = batch.biases.size() * sizeof(float);
  const size_t result_bytes = num_rows * sizeof(detail::SampleResult);
  const size_t off_pen = aligned(rows_bytes);
  const size_t off_bias = off_pen + aligned(pen_bytes);
  const size_t off_masks = off_bias + aligned(bias_bytes);
  const size_t upload_bytes = off_masks + mask_bytes;
  const size_t off_saved_pen = aligned(upload_bytes);
  const size_t off_saved_bias = off_saved_pen + aligned(saved_pen_bytes);
  const size_t off_results = off_saved_bias + aligned(saved_bias_bytes);
  const size_t total = off_results + result_bytes;

  // The staging's last upload has been read (it was queued before the previous sampling), and this
  // slot's last results were collected (num_queued_ < kMaxQueued).
  CUDA_CHECK(cudaEventSynchronize(uploaded_));
  if (upload_bytes > staging_bytes_ || result_bytes > slot.pinned_bytes || total > device_.size()) {
    // Nothing of ours may be in flight while buffers move: the other slot's copy, the pending
    // tokens read from the last results.
    CUDA_CHECK(cudaStreamSynchronize(stream));
    grow_pinned(staging_, staging_bytes_, upload_bytes);
    grow_pinned(slot.pinned, slot.pinned_bytes, result_bytes);
    if (total > device_.size()) device_.reserve(std::max(total, device_.size() + device_.size() / 2));
  }
  std::memcpy(staging_, batch.rows.data(), rows_bytes);
  if (pen_bytes > 0) std::memcpy(staging_ + off_pen, batch.penalty_tokens.data(), pen_bytes);
  if (bias_bytes > 0) std::memcpy(staging_ + off_bias, batch.biases.data(), bias_bytes);
  if (mask_bytes > 0) std::memcpy(staging_ + off_masks, batch.masks.data(), mask_bytes);
  auto* base = device_.as<std::byte>();
  CUDA_CHECK(cudaMemcpyAsync(base, staging_, upload_bytes, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaEventRecord(uploaded_, stream));

  detail::SampleLaunch a{};
  a.logits = logits;
  a.vocab = vocab;
  a.num_rows = static_cast<int32_t>(num_rows);
  a.rows = reinterpret_cast<const SamplingRow*>(base);
  a.penalty_tokens = reinterpret_cast<const PenaltyToken*>(base + off_pen);
  a.biases = reinterpret_cast<const LogitBiasEntry*>(base + off_bias);
  a.masks = reinterpret_cast<const uint32_t*>(base + off_masks);
  a.saved_penalty = reinterpret_cast<float*>(base + off_saved_pen);
  a.saved_bias = reinterpret_cast<float*>(base + off_saved_bias);
  a.results = reinterpret_cast<detail::SampleResult*>(base + off_results);
  detail::launch_sample_rows(a, stream);
  CUDA_CHECK(cudaMemcpyAsync(slot.pinned, a.results, result_bytes, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaEventRecord(slot.copied, stream));
  last_results_ = a.results;
  last_num_rows_ = static_cast<int>(num_rows);
}

void DeviceSampler::collect(std::vector<SampledRow>& out) {
  SPINDLE_CHECK(num_queued_ > 0, "device sampling: nothing queued to collect");
  Slot& slot = slots_[(next_slot_ - num_queued_ + kMaxQueued) % kMaxQueued];
  --num_queued_;
  CUDA_CHECK(cudaEventSynchronize(slot.copied));
  const size_t num_rows = slot.top_logprobs.size();
  out.resize(num_rows);
  const auto* results = reinterpret_cast<const detail::SampleResult*>(slot.pinned);
  std::vector<int> order;
  for (size_t i = 0; i < num_rows; ++i) {
    const detail::SampleResult& res = results[i];
    const int top_logprobs = slot.top_logprobs[i];
    SampledRow& o = out[i];
    o.token = res.token;
    o.non_finite = res.non_finite != 0;
    o.logprob = res.logprob;
    o.top_tokens.clear();
    o.top_logprobs.clear();
    if (top_logprobs <= 0) continue;
    // Best first: by logit, then by id (engine::raw_logprobs' order).
    order.resize(static_cast<size_t>(res.num_candidates));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int x, int y) {
      const float lx = res.candidate_logits[x], ly = res.candidate_logits[y];
      return lx > ly || (lx == ly && res.candidate_tokens[x] < res.candidate_tokens[y]);
    });
    const size_t k = std::min<size_t>(order.size(), static_cast<size_t>(top_logprobs));
    for (size_t j = 0; j < k; ++j) {
      if (std::isinf(res.candidate_logits[order[j]])) break;  // refused by the grammar mask
      o.top_tokens.push_back(res.candidate_tokens[order[j]]);
      o.top_logprobs.push_back(static_cast<float>(static_cast<double>(res.candidate_logits[order[j]]) - res.log_z));
    }
  }
}

}  // namespace spindle::kernels::cuda
