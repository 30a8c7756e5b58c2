#include "engine/sampler.h"

#include "util/error.h"
#include "util/switches.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <limits>
#include <numeric>

namespace spindle::engine {

Sampler::Sampler(SamplingParams params, uint64_t default_seed)
    : params_(std::move(params)), seed_(params_.seed.value_or(default_seed)), rng_(seed_) {}

void Sampler::apply_penalties(std::span<float> logits, std::span<const TokenId> prompt,
                              std::span<const TokenId> output) {
  const int vocab = static_cast<int>(logits.size());
  if (params_.repetition_penalty != 1.0f) {
    // HF: a seen token's logit is divided by the penalty when positive, multiplied when negative.
    auto penalise = [&](int t) {
      if (t < 0 || t >= vocab) return;
      float& l = logits[t];
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    };
    std::vector<bool> seen(vocab, false);
    for (auto span : {prompt, output}) {
      for (int t : span) {
        if (t >= 0 && t < vocab && !seen[t]) {
          seen[t] = true;
          penalise(t);
        }
      }
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    counts_.assign(vocab, 0);
    for (int t : output) {
      if (t >= 0 && t < vocab) ++counts_[t];
    }
    for (int t = 0; t < vocab; ++t) {
      if (counts_[t] > 0) logits[t] -= params_.presence_penalty + params_.frequency_penalty * counts_[t];
    }
  }
  for (const auto& [token, bias] : params_.logit_bias) {
    if (token >= 0 && token < vocab) logits[token] += bias;
  }
}

double Sampler::candidates_unsorted(std::span<float> logits) {
  // Temperature (and min-p) alone need no ordering: one pass for the weights relative to the
  // largest (so the largest is exactly 1 and min-p is a plain threshold); candidates in id order.
  const int vocab = static_cast<int>(logits.size());
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  order_.clear();
  probs_.clear();
  double kept = 0;
  for (int i = 0; i < vocab; ++i) {
    const double w = std::exp((double{logits[i]} - max_logit) / params_.temperature);
    if (w >= params_.min_p && w > 0.0) {
      order_.push_back(i);
      probs_.push_back(w);
      kept += w;
    }
  }
  return kept;
}

double Sampler::candidates(std::span<float> logits) {
  if (params_.top_k <= 0 && params_.top_p >= 1.0f) return candidates_unsorted(logits);
  const int vocab = static_cast<int>(logits.size());
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), 0);
  // Candidates sorted by logit (only as many as top-k needs when it is set).
  const int k = params_.top_k > 0 ? std::min(params_.top_k, vocab) : vocab;
  auto by_logit = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_logit);
  order_.resize(k);

  // Softmax over the candidates at the temperature.
  const double max_logit = logits[order_[0]];
  std::vector<double>& probs = probs_;
  probs.resize(k);
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    probs[i] = std::exp((double{logits[order_[i]]} - max_logit) / params_.temperature);
    sum += probs[i];
  }
  for (int i = 0; i < k; ++i) probs[i] /= sum;

  // top-p: the smallest prefix whose mass reaches top_p (always at least one token).
  int keep = k;
  if (params_.top_p < 1.0f) {
    double mass = 0;
    for (int i = 0; i < k; ++i) {
      mass += probs[i];
      if (mass >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  // min-p: drop tokens whose probability is below min_p times the largest.
  if (params_.min_p > 0.0f) {
    const double floor = params_.min_p * probs[0];
    int i = 1;
    while (i < keep && probs[i] >= floor) ++i;
    keep = i;
  }
  order_.resize(keep);
  probs.resize(keep);
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += probs[i];
  return kept;
}

int Sampler::draw(std::span<float> logits) {
  const double kept = candidates(logits);
  std::uniform_real_distribution<double> uniform(0.0, kept);
  const double u = uniform(rng_);
  double acc = 0;
  for (size_t i = 0; i < order_.size(); ++i) {
    acc += probs_[i];
    if (u < acc) return order_[i];
  }
  return order_.back();
}

std::vector<TokenProb> Sampler::distribution(std::span<float> logits, std::span<const TokenId> prompt,
                                             std::span<const TokenId> output) {
  apply_penalties(logits, prompt, output);
  if (params_.greedy()) {
    return {{static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin()), 1.0}};
  }
  const double kept = candidates(logits);
  std::vector<TokenProb> dist(order_.size());
  for (size_t i = 0; i < order_.size(); ++i) dist[i] = {order_[i], probs_[i] / kept};
  return dist;
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

TokenId Sampler::draw_from(std::span<const TokenProb> dist) {
  double total = 0;
  for (const TokenProb& t : dist) total += t.prob;
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double acc = 0;
  for (const TokenProb& t : dist) {
    acc += t.prob;
    if (u < acc) return t.token;
  }
  return dist.back().token;
}

void raw_logprobs(std::span<const float> logits, TokenId token, int k, SampledToken& out) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, double{l});
  double sum = 0;
  for (float l : logits) sum += std::exp(double{l} - max_logit);
  const double log_z = max_logit + std::log(sum);
  out.logprob = static_cast<float>(logits[token] - log_z);
  out.top.clear();
  if (k <= 0) return;
  std::vector<int> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  k = std::min<int>(k, static_cast<int>(ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int i = 0; i < k; ++i) {
    if (std::isinf(logits[ids[i]])) break;  // refused by a grammar mask (the row is finite otherwise)
    out.top.push_back({ids[i], static_cast<float>(logits[ids[i]] - log_z)});
  }
}

int apply_grammar_mask(std::span<float> logits, std::span<const uint32_t> mask) {
  const size_t n = logits.size();
  SPINDLE_CHECK(mask.size() * 32 >= n, "grammar mask of {} words for a row of {} logits", mask.size(), n);
  int allowed = 0;
  for (size_t w = 0; w * 32 < n; ++w) {
    const uint32_t bits = mask[w];
    const size_t end = std::min(n, w * 32 + 32);
    if (bits == 0xffffffffu && end == w * 32 + 32) {
      allowed += 32;
      continue;
    }
    for (size_t i = w * 32; i < end; ++i) {
      if ((bits >> (i % 32)) & 1u) {
        ++allowed;
      } else {
        logits[i] = -std::numeric_limits<float>::infinity();
      }
    }
  }
  return allowed;
}

namespace {

struct SamplerFault {
  enum class Kind { kNone, kNan, kThrow } kind = Kind::kNone;
  uint64_t seed = 0;
};

// switches().sampler_fault (SPINDLE_SAMPLER_FAULT: "nan:SEED" or "throw:SEED", checked by the
// registry's parser); empty, the normal case, costs one comparison per sample.
SamplerFault sampler_fault() {
  SamplerFault f;
  const std::string& s = switches().sampler_fault;
  if (s.empty()) return f;
  const size_t colon = s.find(':');
  if (colon == std::string::npos) return f;
  const std::string kind = s.substr(0, colon);
  f.kind = kind == "nan" ? SamplerFault::Kind::kNan : kind == "throw" ? SamplerFault::Kind::kThrow : SamplerFault::Kind::kNone;
  f.seed = std::strtoull(s.c_str() + colon + 1, nullptr, 10);
  return f;
}

}  // namespace

bool all_finite(std::span<const float> logits) {
  // Summing is cheaper than a branch per element and catches both: NaN or Inf anywhere makes the
  // sum NaN or Inf (finite floats cannot overflow a double sum of a vocabulary row).
  double sum = 0;
  for (float x : logits) sum += static_cast<double>(x) * 0.0;
  return sum == 0.0;
}

SampledToken Sampler::sample(std::span<float> logits, std::span<const TokenId> prompt,
                             std::span<const TokenId> output, std::span<const uint32_t> mask) {
  if (const SamplerFault fault = sampler_fault(); fault.kind != SamplerFault::Kind::kNone && fault.seed == seed_) {
    SPINDLE_CHECK(fault.kind != SamplerFault::Kind::kThrow, "injected step failure (SPINDLE_SAMPLER_FAULT)");
    std::fill(logits.begin(), logits.end(), std::numeric_limits<float>::quiet_NaN());
  }
  if (!all_finite(logits)) {
    SampledToken bad;
    bad.non_finite = true;
    return bad;
  }
  if (!mask.empty()) {
    SPINDLE_CHECK(apply_grammar_mask(logits, mask) > 0, "the grammar mask allows no token");
  }
  const bool want_logprobs = params_.logprobs || params_.top_logprobs > 0;
  std::vector<float> raw;
  if (want_logprobs) raw.assign(logits.begin(), logits.end());
  apply_penalties(logits, prompt, output);

  SampledToken result;
  if (params_.greedy()) {
    result.token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    result.token = draw(logits);
  }
  if (want_logprobs) raw_logprobs(raw, result.token, params_.top_logprobs, result);
  return result;
}

PromptLogprob prompt_logprob(std::span<const float> logits, TokenId token, int k) {
  SampledToken raw;
  raw_logprobs(logits, token, k, raw);
  PromptLogprob out{token, raw.logprob, 1, std::move(raw.top)};
  const float own = logits[static_cast<size_t>(token)];
  for (float l : logits) out.rank += l > own ? 1 : 0;
  return out;
}

void add_sampling_row(const SamplingParams& p, uint64_t seed, uint64_t counter, std::span<const TokenId> prompt,
                      std::span<const TokenId> output, size_t row, SamplingBatch& batch) {
  SamplingRow& r = batch.rows.at(row);
  r = SamplingRow{};
  r.temperature = p.greedy() ? 0.0f : p.temperature;
  r.top_k = p.top_k > 0 ? p.top_k : 0;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.repetition_penalty = p.repetition_penalty;
  r.presence_penalty = p.presence_penalty;
  r.frequency_penalty = p.frequency_penalty;
  r.top_logprobs = p.top_logprobs;
  r.want_logprob = p.logprobs || p.top_logprobs > 0 ? 1 : 0;
  r.seed = seed;
  r.counter = counter;

  r.penalty_offset = static_cast<int32_t>(batch.penalty_tokens.size());
  const bool repetition = p.repetition_penalty != 1.0f;
  if (repetition || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    // Distinct tokens, with their output counts (repetition looks at the prompt too).
    std::vector<TokenId> seen(output.begin(), output.end());
    if (repetition) seen.insert(seen.end(), prompt.begin(), prompt.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    std::vector<TokenId> out_sorted(output.begin(), output.end());
    std::sort(out_sorted.begin(), out_sorted.end());
    for (const TokenId t : seen) {
      const auto range = std::equal_range(out_sorted.begin(), out_sorted.end(), t);
      batch.penalty_tokens.push_back({t, static_cast<int32_t>(range.second - range.first)});
    }
  }
  r.penalty_count = static_cast<int32_t>(batch.penalty_tokens.size()) - r.penalty_offset;
  r.bias_offset = static_cast<int32_t>(batch.biases.size());
  for (const auto& [token, bias] : p.logit_bias) batch.biases.push_back({token, bias});
  r.bias_count = static_cast<int32_t>(batch.biases.size()) - r.bias_offset;
}

SampledToken to_sampled_token(const SampledRow& row) {
  SampledToken t;
  t.token = row.token;
  t.non_finite = row.non_finite;
  t.logprob = row.logprob;
  for (size_t i = 0; i < row.top_tokens.size(); ++i) t.top.push_back({row.top_tokens[i], row.top_logprobs[i]});
  return t;
}

namespace {
uint64_t mix64(uint64_t z) {  // splitmix64's finaliser, as device_sampler.cu draws with it
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double gumbel(uint64_t stream, int64_t i) {  // Gumbel(0, 1) noise of token i of the draw
  const uint64_t h = mix64(stream ^ static_cast<uint64_t>(i));
  const double u = (static_cast<double>(h >> 40) + 0.5) / 16777216.0;  // (0, 1)
  return -std::log(-std::log(u));
}
}  // namespace

void sample_rows_on_host(std::span<float> logits, int vocab, const SamplingBatch& batch, std::vector<SampledRow>& out) {
  SPINDLE_CHECK(vocab > 0 && logits.size() >= batch.rows.size() * static_cast<size_t>(vocab),
                "host sampling: {} rows of {} logits asked for, {} given", batch.rows.size(), vocab, logits.size());
  out.resize(batch.rows.size());
  std::vector<float> raw;
  for (size_t i = 0; i < batch.rows.size(); ++i) {
    const SamplingRow& r = batch.rows[i];
    const std::span<float> row = logits.subspan(i * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
    SampledRow& o = out[i];
    o = SampledRow{};
    if (!all_finite(row)) {
      o.non_finite = true;
      continue;
    }
    if (r.mask_offset >= 0) {
      const size_t words = (static_cast<size_t>(vocab) + 31) / 32;
      SPINDLE_CHECK(static_cast<size_t>(r.mask_offset) + words <= batch.masks.size(),
                    "host sampling: row {}'s grammar mask is outside the batch's {} words", i, batch.masks.size());
      apply_grammar_mask(row, std::span<const uint32_t>(batch.masks).subspan(static_cast<size_t>(r.mask_offset), words));
    }
    const bool want_logprobs = r.want_logprob != 0 || r.top_logprobs > 0;
    if (want_logprobs) raw.assign(row.begin(), row.end());
    for (int j = 0; j < r.penalty_count; ++j) {
      const PenaltyToken& p = batch.penalty_tokens.at(static_cast<size_t>(r.penalty_offset + j));
      float& v = row[static_cast<size_t>(p.token)];
      if (r.repetition_penalty != 1.0f) v = v > 0.0f ? v / r.repetition_penalty : v * r.repetition_penalty;
      if (p.output_count > 0) v -= r.presence_penalty + r.frequency_penalty * static_cast<float>(p.output_count);
    }
    for (int j = 0; j < r.bias_count; ++j) {
      const LogitBiasEntry& b = batch.biases.at(static_cast<size_t>(r.bias_offset + j));
      row[static_cast<size_t>(b.token)] += b.bias;
    }
    if (r.temperature <= 0.0f || r.top_k == 1) {
      o.token = static_cast<TokenId>(std::max_element(row.begin(), row.end()) - row.begin());
    } else {
      SamplingParams kept_params;
      kept_params.temperature = r.temperature;
      kept_params.top_k = r.top_k;
      kept_params.top_p = r.top_p;
      kept_params.min_p = r.min_p;
      Sampler kept(kept_params, r.seed);
      const uint64_t stream = mix64(mix64(r.seed) ^ r.counter);
      double best = -std::numeric_limits<double>::infinity();
      for (const TokenProb& t : kept.distribution(row, {}, {})) {
        const double key = std::log(t.prob) + gumbel(stream, t.token);
        if (key > best) {
          best = key;
          o.token = t.token;
        }
      }
    }
    if (want_logprobs) {
      SampledToken t;
      raw_logprobs(raw, o.token, r.top_logprobs, t);
      o.logprob = t.logprob;
      for (const TokenLogprob& a : t.top) {
        o.top_tokens.push_back(a.token);
        o.top_logprobs.push_back(a.logprob);
      }
    }
  }
}

}  // namespace spindle::engine
