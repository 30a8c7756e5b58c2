// kernels::cuda::DeviceSampler against independent host computations:
//   - greedy (with repetition/presence/frequency penalties and logit bias): the CPU sampler's
//     choice (engine::Sampler, the same float arithmetic), exactly;
//   - log-probabilities: engine::raw_logprobs (f64 log-sum-exp on the host), within 1e-5 absolute;
//   - sampled draws: the exact distribution of the kept set computed here in f64 from the rule of
//     sampler.h (top-k -> softmax at the temperature -> top-p prefix -> min-p), compared with the
//     empirical frequencies of 40,000 draws (40 batches of 1,000 rows, counters 0..39,999) by a
//     chi-square test at significance 1e-6 (critical value from the Wilson-Hilferty
//     approximation); tokens outside the kept set must never be drawn;
//   - determinism: the same (seed, counter) gives the same token whatever row it sits in;
//   - grammar masks (structured output): every token drawn is allowed, greedy is the CPU sampler's
//     choice under the same mask, log-probabilities are engine::raw_logprobs of the masked row
//     (refused tokens never listed), a NaN at a refused position still makes the row non-finite.
// Skips when no CUDA device with cc >= 8.0 is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "engine/sampler.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_sampler.h"
#include "cuda/cuda_skip.h"
#include "util/error.h"

namespace spindle {
namespace {

namespace kcu = kernels::cuda;


std::vector<float> random_logits(int rows, int vocab, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(rows) * vocab);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<SampledRow> sample_on_device(const std::vector<float>& logits, int vocab, const SamplingBatch& batch) {
  kcu::DeviceBuffer buffer(logits.size() * sizeof(float));
  kcu::copy_to_device(buffer.data(), logits.data(), logits.size() * sizeof(float));
  kcu::DeviceSampler sampler;
  std::vector<SampledRow> out;
  sampler.sample(buffer.as<float>(), vocab, batch, nullptr, out);
  return out;
}

TEST(CudaSamplerTest, GreedyWithPenaltiesAndBiasIsTheCpuSamplersChoice) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kVocab = 32000, kRows = 24;
  const std::vector<float> logits = random_logits(kRows, kVocab, 7, 3.0f);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> token(0, kVocab - 1);
  SamplingBatch batch;
  batch.rows.resize(kRows);
  std::vector<engine::SamplingParams> params(kRows);
  std::vector<std::vector<TokenId>> prompts(kRows), outputs(kRows);
  for (int r = 0; r < kRows; ++r) {
    engine::SamplingParams& p = params[r];
    p.temperature = 0.0f;
    if (r % 2 == 1) p.repetition_penalty = 1.3f;
    if (r % 3 == 1) p.presence_penalty = 0.8f;
    if (r % 4 == 1) p.frequency_penalty = 0.5f;
    if (r % 5 == 1) p.logit_bias = {{token(rng), 9.0f}, {token(rng), -5.0f}};
    // Penalise the row's own top tokens so the penalties change the choice.
    std::vector<int> order(kVocab);
    std::iota(order.begin(), order.end(), 0);
    const float* row = logits.data() + static_cast<size_t>(r) * kVocab;
    std::partial_sort(order.begin(), order.begin() + 8, order.end(), [&](int a, int b) { return row[a] > row[b]; });
    for (int i = 0; i < 30; ++i) prompts[r].push_back(token(rng));
    for (int i = 0; i < 4; ++i) prompts[r].push_back(order[i]);
    for (int i = 0; i < 6; ++i) outputs[r].push_back(order[i % 3]);
    engine::add_sampling_row(p, 1234, outputs[r].size(), prompts[r], outputs[r], r, batch);
  }
  const std::vector<SampledRow> device = sample_on_device(logits, kVocab, batch);
  ASSERT_EQ(device.size(), static_cast<size_t>(kRows));
  for (int r = 0; r < kRows; ++r) {
    std::vector<float> row(logits.begin() + static_cast<ptrdiff_t>(r) * kVocab,
                           logits.begin() + static_cast<ptrdiff_t>(r + 1) * kVocab);
    engine::Sampler cpu(params[r], 1234);
    EXPECT_EQ(device[r].token, cpu.sample(row, prompts[r], outputs[r]).token) << "row " << r;
  }
}

// A row holding NaN or Inf anywhere is reported non-finite (greedy and sampled alike), as the
// CPU sampler reports it; the finite rows beside it are untouched.
TEST(CudaSamplerTest, NonFiniteRowsAreReportedAndTheOthersSampled) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kVocab = 3000, kRows = 6;
  std::vector<float> logits = random_logits(kRows, kVocab, 5, 2.0f);
  logits[1 * kVocab + 17] = std::numeric_limits<float>::quiet_NaN();
  logits[2 * kVocab + kVocab - 1] = std::numeric_limits<float>::infinity();
  logits[4 * kVocab + 5] = -std::numeric_limits<float>::infinity();
  logits[5 * kVocab + 2999] = std::numeric_limits<float>::quiet_NaN();
  SamplingBatch batch;
  batch.rows.resize(kRows);
  std::vector<engine::SamplingParams> params(kRows);
  for (int r = 0; r < kRows; ++r) {
    params[r].temperature = r < 3 ? 0.0f : 0.9f;
    if (r == 5) params[r].top_p = 0.8f;
    engine::add_sampling_row(params[r], 7, 0, {}, {}, r, batch);
  }
  const std::vector<SampledRow> device = sample_on_device(logits, kVocab, batch);
  ASSERT_EQ(device.size(), static_cast<size_t>(kRows));
  for (int r = 0; r < kRows; ++r) {
    std::vector<float> row(logits.begin() + static_cast<ptrdiff_t>(r) * kVocab,
                           logits.begin() + static_cast<ptrdiff_t>(r + 1) * kVocab);
    engine::Sampler cpu(params[r], 7);
    const engine::SampledToken host = cpu.sample(row, {}, {});
    EXPECT_EQ(device[r].non_finite, host.non_finite) << "row " << r;
    EXPECT_EQ(device[r].non_finite, r == 1 || r == 2 || r == 4 || r == 5) << "row " << r;
    if (r == 0) EXPECT_EQ(device[r].token, host.token) << "a finite greedy row is the CPU's choice";
  }
}

TEST(CudaSamplerTest, LogprobsMatchTheHostLogSoftmax) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kVocab = 5000, kRows = 6;
  const std::vector<float> logits = random_logits(kRows, kVocab, 3, 4.0f);
  SamplingBatch batch;
  batch.rows.resize(kRows);
  for (int r = 0; r < kRows; ++r) {
    engine::SamplingParams p;
    p.temperature = r < 3 ? 0.0f : 0.8f;
    p.logprobs = true;
    p.top_logprobs = r == 0 ? 0 : (r == 1 ? 1 : 20);
    if (r == 4) p.repetition_penalty = 2.0f;  // the chosen token's logprob stays the raw one
    const std::vector<TokenId> prompt = {1, 2, 3};
    engine::add_sampling_row(p, 99, 0, prompt, {}, r, batch);
  }
  const std::vector<SampledRow> device = sample_on_device(logits, kVocab, batch);
  for (int r = 0; r < kRows; ++r) {
    const std::span<const float> row(logits.data() + static_cast<size_t>(r) * kVocab, kVocab);
    engine::SampledToken host;
    raw_logprobs(row, device[r].token, batch.rows[r].top_logprobs, host);
    EXPECT_NEAR(device[r].logprob, host.logprob, 1e-5) << "row " << r;
    ASSERT_EQ(device[r].top_tokens.size(), host.top.size()) << "row " << r;
    for (size_t i = 0; i < host.top.size(); ++i) {
      EXPECT_EQ(device[r].top_tokens[i], host.top[i].token) << "row " << r << " alternative " << i;
      EXPECT_NEAR(device[r].top_logprobs[i], host.top[i].logprob, 1e-5) << "row " << r << " alternative " << i;
    }
  }
}

// The kept set's probabilities by sampler.h's rule, in f64 (ids sorted by logit, ties by id).
std::vector<double> expected_distribution(const std::vector<float>& l, const SamplingRow& p) {
  const int v = static_cast<int>(l.size());
  std::vector<int> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  const int k = p.top_k > 0 ? std::min(p.top_k, v) : v;
  std::vector<double> probs(k);
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += probs[i] = std::exp((double{l[order[i]]} - l[order[0]]) / p.temperature);
  for (double& q : probs) q /= sum;
  int keep = k;
  if (p.top_p < 1.0f) {
    double mass = 0;
    for (int i = 0; i < k; ++i) {
      mass += probs[i];
      if (mass >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    int i = 1;
    while (i < keep && probs[i] >= p.min_p * probs[0]) ++i;
    keep = i;
  }
  std::vector<double> out(v, 0.0);
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += probs[i];
  for (int i = 0; i < keep; ++i) out[order[i]] = probs[i] / kept;
  return out;
}

// Upper critical value of chi-square with df degrees of freedom at significance 1e-6
// (Wilson-Hilferty: chi2 ~ df (1 - 2/(9 df) + z sqrt(2/(9 df)))^3, z = 4.753 for 1e-6).
double chi_square_critical(int df) {
  const double z = 4.753, a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

TEST(CudaSamplerTest, DrawsFollowTheFilteredSoftmax) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kVocab = 40, kRowsPerCall = 1000, kCalls = 40;
  const std::vector<float> base = random_logits(1, kVocab, 5, 1.5f);
  struct Case {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
  };
  const Case cases[] = {{1.0f, 0, 1.0f, 0.0f}, {0.7f, 10, 1.0f, 0.0f}, {1.3f, 0, 0.8f, 0.0f},
                        {1.0f, 0, 1.0f, 0.1f}, {0.9f, 12, 0.9f, 0.02f}};
  for (const Case& c : cases) {
    SamplingRow row;
    row.temperature = c.temperature;
    row.top_k = c.top_k;
    row.top_p = c.top_p;
    row.min_p = c.min_p;
    row.seed = 2024;
    const std::vector<double> expected = expected_distribution(base, row);
    std::vector<int64_t> counts(kVocab, 0);
    std::vector<float> logits;
    for (int r = 0; r < kRowsPerCall; ++r) logits.insert(logits.end(), base.begin(), base.end());
    for (int call = 0; call < kCalls; ++call) {
      SamplingBatch batch;
      for (int r = 0; r < kRowsPerCall; ++r) {
        row.counter = static_cast<uint64_t>(call) * kRowsPerCall + r;
        batch.rows.push_back(row);
      }
      for (const SampledRow& s : sample_on_device(logits, kVocab, batch)) ++counts.at(s.token);
    }
    const double n = double{kRowsPerCall} * kCalls;
    double chi2 = 0;
    int kept = 0;
    for (int t = 0; t < kVocab; ++t) {
      if (expected[t] == 0.0) {
        EXPECT_EQ(counts[t], 0) << "token " << t << " is outside the kept set (T " << c.temperature << ", k "
                                << c.top_k << ", p " << c.top_p << ", min_p " << c.min_p << ")";
        continue;
      }
      ++kept;
      const double e = n * expected[t];
      chi2 += (counts[t] - e) * (counts[t] - e) / e;
    }
    ASSERT_GT(kept, 1);
    EXPECT_LT(chi2, chi_square_critical(kept - 1))
        << "T " << c.temperature << ", k " << c.top_k << ", p " << c.top_p << ", min_p " << c.min_p << ": " << kept
        << " kept tokens";
  }
}

TEST(CudaSamplerTest, TheSameSeedAndCounterGiveTheSameTokenInAnyRow) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kVocab = 1000;
  const std::vector<float> base = random_logits(1, kVocab, 9, 2.0f);
  SamplingRow row;
  row.temperature = 1.0f;
  row.top_p = 0.95f;
  row.seed = 77;
  auto batch_of = [&](const std::vector<uint64_t>& counters) {
    SamplingBatch b;
    for (uint64_t c : counters) {
      row.counter = c;
      b.rows.push_back(row);
    }
    return b;
  };
  std::vector<float> logits3, logits1(base);
  for (int i = 0; i < 3; ++i) logits3.insert(logits3.end(), base.begin(), base.end());
  const auto a = sample_on_device(logits3, kVocab, batch_of({5, 6, 7}));
  const auto b = sample_on_device(logits1, kVocab, batch_of({6}));
  const auto c = sample_on_device(logits3, kVocab, batch_of({7, 5, 6}));
  EXPECT_EQ(a[1].token, b[0].token);
  EXPECT_EQ(a[0].token, c[1].token);
  EXPECT_EQ(a[2].token, c[0].token);
  // And different counters draw different tokens somewhere (a broken hash would repeat).
  std::vector<uint64_t> many(200);
  std::iota(many.begin(), many.end(), 0);
  std::vector<float> logits200;
  for (int i = 0; i < 200; ++i) logits200.insert(logits200.end(), base.begin(), base.end());
  const auto d = sample_on_device(logits200, kVocab, batch_of(many));
  std::vector<TokenId> distinct;
  for (const auto& s : d) distinct.push_back(s.token);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  EXPECT_GT(distinct.size(), 5u);
}

TEST(CudaSamplerTest, BadBatchesAreRefused) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<float> logits(100, 0.0f);
  SamplingBatch batch;
  batch.rows.resize(1);
  batch.rows[0].bias_count = 1;  // no bias entries
  EXPECT_THROW(sample_on_device(logits, 100, batch), Error);
  batch.rows[0].bias_count = 0;
  batch.penalty_tokens.push_back({100, 1});  // outside the vocabulary
  batch.rows[0].penalty_count = 1;
  EXPECT_THROW(sample_on_device(logits, 100, batch), Error);
}

TEST(CudaSamplerTest, GrammarMasksRestrictEveryRow) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kVocab = 32003, kRows = 12, kWords = (kVocab + 31) / 32;
  std::vector<float> logits = random_logits(kRows, kVocab, 21, 3.0f);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> token(0, kVocab - 1);
  SamplingBatch batch;
  batch.rows.resize(kRows);
  std::vector<engine::SamplingParams> params(kRows);
  std::vector<std::vector<uint32_t>> masks(kRows, std::vector<uint32_t>(kWords, 0));
  std::vector<std::vector<TokenId>> prompts(kRows);
  for (int r = 0; r < kRows; ++r) {
    engine::SamplingParams& p = params[r];
    p.temperature = r % 2 == 0 ? 0.0f : 0.9f;
    if (r % 3 == 1) p.top_k = 40;
    if (r % 4 == 3) p.top_p = 0.7f;
    if (r % 5 == 2) p.repetition_penalty = 1.4f;
    p.logprobs = true;
    p.top_logprobs = r % 3 == 0 ? 20 : 2;
    const int allowed = r == 4 ? 1 : (r == 5 ? 3 : 300);  // fewer allowed than top_logprobs asks for too
    for (int i = 0; i < allowed; ++i) {
      const int t = token(rng);
      masks[r][t / 32] |= 1u << (t % 32);
    }
    prompts[r] = {token(rng), token(rng)};
    engine::add_sampling_row(p, 77, 3, prompts[r], {}, r, batch);
    if (r == kRows - 1) continue;  // the last row has no mask
    batch.rows[r].mask_offset = static_cast<int32_t>(batch.masks.size());
    batch.masks.insert(batch.masks.end(), masks[r].begin(), masks[r].end());
  }
  // A NaN where row 7's mask refuses: still a non-finite row.
  for (int t = 0; t < kVocab; ++t) {
    if (((masks[7][t / 32] >> (t % 32)) & 1u) == 0) {
      logits[7 * static_cast<size_t>(kVocab) + t] = std::numeric_limits<float>::quiet_NaN();
      break;
    }
  }
  const std::vector<SampledRow> device = sample_on_device(logits, kVocab, batch);
  ASSERT_EQ(device.size(), static_cast<size_t>(kRows));
  for (int r = 0; r < kRows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    EXPECT_EQ(device[r].non_finite, r == 7);
    if (r == 7 || r == kRows - 1) continue;
    const TokenId t = device[r].token;
    EXPECT_TRUE((masks[r][t / 32] >> (t % 32)) & 1u) << "token " << t << " is refused by the mask";
    std::vector<float> row(logits.begin() + static_cast<ptrdiff_t>(r) * kVocab,
                           logits.begin() + static_cast<ptrdiff_t>(r + 1) * kVocab);
    engine::apply_grammar_mask(row, masks[r]);
    engine::SampledToken host;
    engine::raw_logprobs(row, t, params[r].top_logprobs, host);
    EXPECT_NEAR(device[r].logprob, host.logprob, 1e-5);
    ASSERT_EQ(device[r].top_tokens.size(), host.top.size());
    for (size_t i = 0; i < host.top.size(); ++i) EXPECT_EQ(device[r].top_tokens[i], host.top[i].token);
    if (params[r].greedy()) {
      std::vector<float> raw(logits.begin() + static_cast<ptrdiff_t>(r) * kVocab,
                             logits.begin() + static_cast<ptrdiff_t>(r + 1) * kVocab);
      engine::Sampler cpu(params[r], 77);
      EXPECT_EQ(t, cpu.sample(raw, prompts[r], {}, masks[r]).token) << "greedy: the CPU sampler's masked choice";
    }
  }
}

}  // namespace
}  // namespace spindle
