// Forward-pass scenarios shared by the CPU test (tests/model/model_forward_test.cc,
// load_cpu_model) and the CUDA test (tests/cuda/cuda_model_test.cc, load_cuda_model), written
// against the Transformer through ModelStepper (below) and the golden fixtures
// (golden_fixtures.h). The caller loads the model, sets its attention backends and states the
// tolerances (at the top of its file); KV pages live on model.device(). Every check is a gtest
// EXPECT, so one scenario reports all its failures. Needs no CUDA headers in a build without CUDA.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "attn/attention_types.h"
#include "golden_fixtures.h"
#include "kv/kv_layout.h"
#include "kv/page_pool.h"
#include "engine/runner.h"
#include "kernels/step_batch.h"
#include "model/transformer.h"
#include "model/model_config.h"
#include "platform/device_info.h"
#include "util/dtype.h"
#include "util/error.h"

#ifdef SPINDLE_WITH_CUDA
#include "kernels/cuda/device_buffer.h"
#endif

namespace spindle::testing {

inline constexpr int kPageSize = 16;

// "reference" or the highest-priority CPU backend usable here for this shape.
inline std::string best_cpu_backend(const attn::AttentionShape& shape) {
  static const DeviceInfo device = detect_device_info();
  std::string best = "reference";
  int best_priority = -1;
  for (const auto* d : attn::attention_registry().list()) {
    if (d->device != attn::Device::kCpu || d->name == "reference") continue;
    if (!d->unsupported_reasons(device, shape).empty()) continue;
    if (d->priority > best_priority) best = d->name, best_priority = d->priority;
  }
  return best;
}

// One sequence of a test step: its new tokens' count, the tokens already in its pages, its pages.
struct SequenceMetadata {
  int num_new_tokens = 0;
  int num_cached_tokens = 0;
  std::vector<int32_t> page_table;
};
struct BatchMetadata {
  std::vector<SequenceMetadata> sequences;
};

// A Transformer driven through engine::Runner (the engine's own step path: one StepBatch,
// uploaded once, the phase's backend prepared, the forward) by the scenarios' step description:
// token ids, per-sequence metadata and the rows whose logits are wanted, in any order (they come
// back in that order). Rows must be the last rows of their sequences, as the engine asks for them.
// The StepBatch is built as given: token ids and logit rows are taken as they are, so a step
// that does not add up reaches the model's own checks.
class ModelStepper {
 public:
  explicit ModelStepper(std::unique_ptr<Transformer> model) : model_(std::move(model)) {}

  Transformer& transformer() { return *model_; }
  const ModelConfig& config() const { return model_->config(); }
  attn::Device device() const { return model_->device(); }
  uint64_t weight_bytes() const { return model_->weight_bytes(); }
  uint64_t workspace_bytes() const { return model_->workspace_bytes(); }
  const char* linear_kernel_name() const { return model_->linear_kernel_name(); }
  int num_fused_gate_up() const { return model_->num_fused_gate_up(); }
  int num_fused_qkv() const { return model_->num_fused_qkv(); }
  attn::AttentionShape attention_shape(DType kv_dtype, int page_size) const {
    return model_->attention_shape(kv_dtype, page_size);
  }

  // Throws for a null backend or one on another device (engine::Runner's checks). Re-binds the
  // KV caches given so far.
  void set_attention_backends(attn::AttentionBackend* prefill, attn::AttentionBackend* decode) {
    check_attention_backends(prefill, decode, model_->device());
    runner_ = std::make_unique<engine::Runner>(*model_, *prefill, *decode);
    if (!caches_.empty()) runner_->bind_kv_caches(caches_);
  }
  void bind_kv_caches(std::span<const attn::LayerKvCache> caches) {
    check_kv_caches(caches, model_->config().num_hidden_layers, model_->device());
    caches_.assign(caches.begin(), caches.end());
    if (runner_) runner_->bind_kv_caches(caches_);
  }

  void forward(std::span<const int32_t> tokens, const BatchMetadata& batch, std::span<const int64_t> rows,
               float* logits) {
    SPINDLE_CHECK(runner_ != nullptr, "forward: no attention backends set");
    StepBatch step;
    std::vector<int64_t> sorted(rows.begin(), rows.end());
    std::sort(sorted.begin(), sorted.end());
    int64_t begin = 0;
    for (const auto& s : batch.sequences) {
      const int64_t end = begin + s.num_new_tokens;
      const auto wanted = std::count_if(sorted.begin(), sorted.end(), [&](int64_t r) { return r >= begin && r < end; });
      for (int64_t k = 0; k < wanted; ++k) {
        EXPECT_TRUE(std::binary_search(sorted.begin(), sorted.end(), end - 1 - k)) << "rows must end their sequence";
      }
      const std::vector<TokenId> none(static_cast<size_t>(s.num_new_tokens), 0);
      step.add_sequence(none.data(), s.num_new_tokens, s.num_cached_tokens, s.page_table.data(),
                        static_cast<int32_t>(s.page_table.size()), static_cast<int32_t>(wanted));
      begin = end;
    }
    step.token_ids.assign(tokens.begin(), tokens.end());
    step.logit_rows = sorted;
    const std::span<const float> out = runner_->run(step);
    const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
    for (size_t k = 0; k < rows.size(); ++k) {
      const size_t at = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), rows[k]) - sorted.begin());
      std::copy_n(out.data() + at * vocab, vocab, logits + k * vocab);
    }
  }

 private:
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<engine::Runner> runner_;
  std::vector<attn::LayerKvCache> caches_;
};
// Greedy ids checked per prompt: one prefill, then kGreedySteps - 1 single-token decode steps.
inline constexpr int kGreedySteps = 32;

// KV pages for every layer of one model in a kv::PagePool on `device` (host memory, or the
// current CUDA device), filled with 0xff bytes (NaN in f32 and bf16: unwritten slots must not be
// read) and handed out from a shuffled free list so sequences never own contiguous pages.
class KvPages {
 public:
  KvPages(const ModelConfig& c, DType dtype, int num_pages, attn::Device device, uint64_t seed = 7)
      : pool_(kv::KvLayout{.num_layers = c.num_hidden_layers,
                           .num_kv_heads = c.num_key_value_heads,
                           .head_dim = c.head_dim,
                           .dtype = dtype,
                           .page_size = kPageSize},
              num_pages, /*dp_size=*/1, device),
        caches_(pool_.layer_caches()) {
    const size_t bytes = size_t(num_pages) * pool_.layout().bytes_per_layer_page();
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      fill_ff(pool_.k_page(l, 0), bytes);
      fill_ff(pool_.v_page(l, 0), bytes);
    }
    free_.resize(num_pages);
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), std::mt19937_64(seed));
  }
  std::span<const attn::LayerKvCache> caches() const { return caches_; }

  // Metadata for `num_new` tokens of a sequence with `num_cached` in its pages; grows its pages.
  SequenceMetadata step(std::vector<int32_t>& pages, int num_cached, int num_new) {
    const size_t needed = size_t(num_cached + num_new + kPageSize - 1) / kPageSize;
    while (pages.size() < needed) {
      EXPECT_FALSE(free_.empty()) << "test KV pool exhausted";
      pages.push_back(free_.back());
      free_.pop_back();
    }
    return {num_new, num_cached, pages};
  }

 private:
  void fill_ff(std::byte* dst, size_t bytes) const {
    if (pool_.device() == attn::Device::kCpu) {
      std::memset(dst, 0xff, bytes);
      return;
    }
#ifdef SPINDLE_WITH_CUDA  // without CUDA, PagePool has already refused a kCuda pool
    const std::vector<std::byte> ff(bytes, std::byte{0xff});
    kernels::cuda::copy_to_device(dst, ff.data(), bytes);
#endif
  }

  kv::PagePool pool_;
  std::vector<attn::LayerKvCache> caches_;
  std::vector<int32_t> free_;
};

inline int vocab_size(const ModelStepper& model) { return model.config().vocab_size; }

// The last logits of one prompt, prefilled alone into fresh pages (KV dtype kv_dtype).
inline std::vector<float> prefill_alone(ModelStepper& model, const GoldenPrompt& prompt, DType kv_dtype) {
  KvPages kv(model.config(), kv_dtype, 8, model.device());
  model.bind_kv_caches(kv.caches());
  std::vector<int32_t> pages;
  BatchMetadata batch;
  batch.sequences.push_back(kv.step(pages, 0, static_cast<int>(prompt.ids.size())));
  const int64_t last = static_cast<int64_t>(prompt.ids.size()) - 1;
  std::vector<float> logits(vocab_size(model));
  model.forward(prompt.ids, batch, {&last, 1}, logits.data());
  return logits;
}

// One prefill of `prompt` into fresh f32 pages (last logits vs HF within `tolerance`), then
// kGreedySteps - 1 single-token decode steps through the pages (greedy ids equal to HF's).
// Returns the prefill's relative error.
inline double expect_prefill_and_greedy_decode(ModelStepper& model, const GoldenPrompt& prompt, double tolerance) {
  KvPages kv(model.config(), DType::kF32, 8, model.device());
  model.bind_kv_caches(kv.caches());
  std::vector<int32_t> pages;
  const int n = static_cast<int>(prompt.ids.size());
  BatchMetadata batch;
  batch.sequences.push_back(kv.step(pages, 0, n));
  std::vector<float> logits(vocab_size(model));
  const int64_t last = n - 1;
  model.forward(prompt.ids, batch, {&last, 1}, logits.data());
  const double error = relative_error(logits, prompt.last_logits);
  EXPECT_LE(error, tolerance);

  std::vector<int32_t> ids = {argmax(logits)};
  for (int step = 1; step < kGreedySteps; ++step) {
    BatchMetadata decode;
    decode.sequences.push_back(kv.step(pages, n + step - 1, 1));
    const int64_t row = 0;
    model.forward({&ids.back(), 1}, decode, {&row, 1}, logits.data());
    ids.push_back(argmax(logits));
  }
  EXPECT_EQ(ids, prompt.greedy);
  return error;
}

// expect_prefill_and_greedy_decode for every prompt; prints the largest error under `label`.
inline void expect_golden_prefill_and_greedy(ModelStepper& model, const std::vector<GoldenPrompt>& golden,
                                             double tolerance, const std::string& label) {
  double max_error = 0;
  for (const auto& prompt : golden) {
    SCOPED_TRACE(prompt.text);
    max_error = std::max(max_error, expect_prefill_and_greedy_decode(model, prompt, tolerance));
  }
  std::printf("[ golden   ] %s: max relative error %.3g (tolerance %.0e)\n", label.c_str(), max_error, tolerance);
}

// All prompts in one forward (ragged lengths) give the same last logits as one at a time (within
// batch_tolerance) and HF's (within tolerance).
inline void expect_ragged_batch_matches_one_at_a_time(ModelStepper& model, const std::vector<GoldenPrompt>& golden,
                                                      double tolerance, double batch_tolerance) {
  const int vocab = vocab_size(model);
  std::vector<std::vector<float>> alone;
  for (const auto& prompt : golden) alone.push_back(prefill_alone(model, prompt, DType::kF32));

  KvPages kv(model.config(), DType::kF32, 16, model.device());
  model.bind_kv_caches(kv.caches());
  std::vector<std::vector<int32_t>> pages(golden.size());
  BatchMetadata batch;
  std::vector<int32_t> tokens;
  std::vector<int64_t> rows;
  for (size_t s = 0; s < golden.size(); ++s) {
    const auto& ids = golden[s].ids;
    batch.sequences.push_back(kv.step(pages[s], 0, static_cast<int>(ids.size())));
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
  }
  std::vector<float> logits(rows.size() * vocab);
  model.forward(tokens, batch, rows, logits.data());
  for (size_t s = 0; s < golden.size(); ++s) {
    SCOPED_TRACE(golden[s].text);
    std::span<const float> row(logits.data() + s * vocab, vocab);
    EXPECT_LE(relative_error(row, alone[s]), batch_tolerance);
    EXPECT_LE(relative_error(row, golden[s].last_logits), tolerance);
  }
}

// One step mixing a decode (A = golden[0]), a whole prefill (B = golden[1]) and the second chunk
// of a chunked prefill (C = golden[3]), then all three decode together: ragged rows, per-token
// positions and the logit-row gather, in f32 pages. rows_out_of_batch_order: the mixed step asks
// for its logit rows as C, A, B (they come back in logit_rows order) instead of A, B, C.
inline void expect_mixed_prefill_and_decode(ModelStepper& model, const std::vector<GoldenPrompt>& golden,
                                            double tolerance, bool rows_out_of_batch_order) {
  const int vocab = vocab_size(model);
  KvPages kv(model.config(), DType::kF32, 24, model.device());
  model.bind_kv_caches(kv.caches());
  const GoldenPrompt& a = golden[0];
  const GoldenPrompt& b = golden[1];
  const GoldenPrompt& c = golden[3];
  const int na = static_cast<int>(a.ids.size()), nb = static_cast<int>(b.ids.size());
  const int nc = static_cast<int>(c.ids.size()), half = nc / 2;
  std::vector<int32_t> pa, pb, pc;

  // Step 1: A whole, C's first half (no logits wanted for C).
  {
    BatchMetadata batch;
    batch.sequences = {kv.step(pa, 0, na), kv.step(pc, 0, half)};
    std::vector<int32_t> tokens = a.ids;
    tokens.insert(tokens.end(), c.ids.begin(), c.ids.begin() + half);
    const int64_t row = na - 1;
    std::vector<float> logits(vocab);
    model.forward(tokens, batch, {&row, 1}, logits.data());
    EXPECT_LE(relative_error(logits, a.last_logits), tolerance);
    EXPECT_EQ(argmax(logits), a.greedy[0]);
  }
  // Step 2: A decodes its first greedy token, B prefills, C prefills its second half.
  std::vector<int32_t> next(3);
  {
    BatchMetadata batch;
    batch.sequences = {kv.step(pa, na, 1), kv.step(pb, 0, nb), kv.step(pc, half, nc - half)};
    std::vector<int32_t> tokens = {a.greedy[0]};
    tokens.insert(tokens.end(), b.ids.begin(), b.ids.end());
    tokens.insert(tokens.end(), c.ids.begin() + half, c.ids.end());
    const std::array<int64_t, 3> last_rows = {0, nb, static_cast<int64_t>(tokens.size()) - 1};  // A, B, C
    // order[k]: the sequence whose logits are the k-th row asked for.
    const std::array<int, 3> order = rows_out_of_batch_order ? std::array{2, 0, 1} : std::array{0, 1, 2};
    std::vector<int64_t> rows;
    std::array<int, 3> slot{};  // slot[s]: where sequence s's logits come back
    for (int k = 0; k < 3; ++k) {
      rows.push_back(last_rows[order[k]]);
      slot[order[k]] = k;
    }
    std::vector<float> logits(3 * vocab);
    model.forward(tokens, batch, rows, logits.data());
    auto logits_of = [&](int s) { return std::span<const float>(logits).subspan(slot[s] * vocab, vocab); };
    EXPECT_EQ(argmax(logits_of(0)), a.greedy[1]);
    EXPECT_LE(relative_error(logits_of(1), b.last_logits), tolerance);
    EXPECT_LE(relative_error(logits_of(2), c.last_logits), tolerance);
    next = {argmax(logits_of(0)), argmax(logits_of(1)), argmax(logits_of(2))};
    EXPECT_EQ(next[1], b.greedy[0]);
    EXPECT_EQ(next[2], c.greedy[0]);
  }
  // Steps 3..: all three decode in one batch; ids follow each prompt's greedy continuation.
  std::vector<int> produced = {2, 1, 1};  // greedy ids produced so far per sequence
  for (int step = 0; step < 12; ++step) {
    BatchMetadata batch;
    batch.sequences = {kv.step(pa, na + produced[0] - 1, 1), kv.step(pb, nb + produced[1] - 1, 1),
                       kv.step(pc, nc + produced[2] - 1, 1)};
    const std::vector<int64_t> rows = {0, 1, 2};
    std::vector<float> logits(3 * vocab);
    model.forward(next, batch, rows, logits.data());
    const GoldenPrompt* prompts[] = {&a, &b, &c};
    for (int s = 0; s < 3; ++s) {
      next[s] = argmax(std::span<const float>(logits).subspan(s * vocab, vocab));
      EXPECT_EQ(next[s], prompts[s]->greedy[produced[s]]) << "sequence " << s << " step " << step;
      ++produced[s];
    }
  }
}

// A bf16 KV cache (the serving default; the caller's backends must be made for it) rounds K and
// V: every prompt's last logits stay within kv_tolerance of HF's. Prints the largest error.
inline void expect_bf16_kv_cache_close(ModelStepper& model, const std::vector<GoldenPrompt>& golden,
                                       double kv_tolerance, const std::string& label) {
  double max_error = 0;
  for (const auto& prompt : golden) {
    max_error = std::max(max_error, relative_error(prefill_alone(model, prompt, DType::kBF16), prompt.last_logits));
  }
  EXPECT_LE(max_error, kv_tolerance);
  std::printf("[ bf16 KV  ] %s: max relative error %.3g\n", label.c_str(), max_error);
}

// workspace_bytes grows with the batch (at least the f32 activations of the longest prompt) and
// never shrinks: shorter prompts afterwards leave it unchanged.
inline void expect_workspace_grows_with_the_batch(ModelStepper& model, const std::vector<GoldenPrompt>& golden) {
  const ModelConfig& c = model.config();
  const uint64_t before = model.workspace_bytes();
  const GoldenPrompt& longest = *std::max_element(golden.begin(), golden.end(), [](const auto& a, const auto& b) {
    return a.ids.size() < b.ids.size();
  });
  prefill_alone(model, longest, DType::kF32);
  const uint64_t after_long = model.workspace_bytes();
  const int64_t t = static_cast<int64_t>(longest.ids.size());
  const int64_t per_token = 4 * (3 * int64_t{c.hidden_size} + 2 * c.q_size() + 2 * c.kv_size() +
                                 3 * int64_t{c.intermediate_size});
  EXPECT_GE(after_long - before, static_cast<uint64_t>(t * per_token));
  for (const auto& prompt : golden) prefill_alone(model, prompt, DType::kF32);  // none longer: nothing grows
  EXPECT_EQ(model.workspace_bytes(), after_long);
}

// golden[2] and golden[3] prefilled in one step (two sequences: an unfused MLP keeps gate and up
// rows in separate halves) into `num_kv_pages` f32 pages; both last logits within tolerance.
inline void expect_two_prompts_in_one_step(ModelStepper& model, const std::vector<GoldenPrompt>& golden,
                                           int num_kv_pages, double tolerance) {
  KvPages kv(model.config(), DType::kF32, num_kv_pages, model.device());
  model.bind_kv_caches(kv.caches());
  std::vector<int32_t> pa, pb;
  BatchMetadata batch;
  const auto& a = golden[2].ids;
  const auto& b = golden[3].ids;
  batch.sequences = {kv.step(pa, 0, static_cast<int>(a.size())), kv.step(pb, 0, static_cast<int>(b.size()))};
  std::vector<int32_t> tokens = a;
  tokens.insert(tokens.end(), b.begin(), b.end());
  const std::vector<int64_t> rows = {static_cast<int64_t>(a.size()) - 1, static_cast<int64_t>(tokens.size()) - 1};
  const int vocab = vocab_size(model);
  std::vector<float> logits(2 * vocab);
  model.forward(tokens, batch, rows, logits.data());
  EXPECT_LE(relative_error(std::span<const float>(logits).first(vocab), golden[2].last_logits), tolerance);
  EXPECT_LE(relative_error(std::span<const float>(logits).last(vocab), golden[3].last_logits), tolerance);
}

// With backends set and pages bound for `batch` (whose tokens are `tokens`), a step is rejected
// for a logit row past the batch, one token id too few, or an id outside the vocabulary
// (spindle::Error each); then the step itself runs, writing its `row` logits to `logits`.
inline void expect_bad_steps_rejected(ModelStepper& model, std::span<const int32_t> tokens,
                                      const BatchMetadata& batch, int64_t row, std::span<float> logits) {
  const int64_t bad_row = static_cast<int64_t>(tokens.size());
  EXPECT_THROW(model.forward(tokens, batch, {&bad_row, 1}, logits.data()), Error);
  EXPECT_THROW(model.forward(tokens.first(tokens.size() - 1), batch, {&row, 1}, logits.data()), Error);
  std::vector<int32_t> bad_ids(tokens.begin(), tokens.end());
  bad_ids.back() = 1 << 20;
  EXPECT_THROW(model.forward(bad_ids, batch, {&row, 1}, logits.data()), Error);
  model.forward(tokens, batch, {&row, 1}, logits.data());
}

}  // namespace spindle::testing
