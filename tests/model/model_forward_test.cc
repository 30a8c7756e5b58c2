// Transformer::forward (load_cpu_model) against Hugging Face transformers 5.17 golden fixtures (tests/golden/<model>/,
// made by tools/golden/make_golden.py: f32 compute on the stored weights).
//
// Relative error of a logits row: max_i |ours_i - golden_i| / max_i |golden_i|.
// Tolerances:
//   kF32Tolerance  = 1e-4  f32 weights; ours and HF differ only by f32 rounding order (our linear
//                          and attention kernels accumulate differently from torch).
//   kBf16Tolerance = 2e-2  bf16 weights. HF also computes in f32 on the same bf16 weights, so the
//                          observed error is as small as for f32; the bound leaves room for kernels
//                          that round activations.
//   kBatchTolerance = 1e-4 the same prompt run alone and inside a ragged batch (different row
//                          counts may take different linear/attention code paths).
//   kBf16KvTolerance = 5e-2 a bf16 KV cache instead of f32: K and V rounded to bf16 (2^-9
//                          relative), amplified by these small random models' large logits.
//                          Observed max (2026-11-29): 1.1e-2 reference, 1.1e-2 cpu_avx2 (EPYC),
//                          1.8e-2 cpu_amx (Xeon; it also rounds q and P to bf16). Catches O(1) bugs.
// Greedy: the next 32 argmax ids (one prefill, then 31 single-token decode steps through the KV
// cache) must equal HF's exactly. The fixtures' smallest top-2 margin is ~6e-4 logits, so the
// golden runs use an f32 KV cache (a bf16 cache rounds K/V; one test checks it stays close).
// Every model runs twice: attention "reference" with the float64 reference linear kernels (the
// ground truth), and the best CPU attention backend here with make_linear_kernel's choice.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "kernels/step_batch.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "platform/device_info.h"
#include "forward_scenarios.h"
#include "golden_fixtures.h"
#include "safetensors_writer.h"
#include "util/dtype.h"
#include "util/error.h"

namespace spindle {
namespace {

constexpr double kF32Tolerance = 1e-4;
constexpr double kBf16Tolerance = 2e-2;
constexpr double kBatchTolerance = 1e-4;
constexpr double kBf16KvTolerance = 5e-2;

using testing::GoldenPrompt;
using testing::kGoldenDir;
using testing::KvPages;
using testing::kPageSize;
using testing::model_dir;
using testing::read_golden;

using testing::BatchMetadata;
using testing::best_cpu_backend;

struct Case {
  std::string model;  // folder under tests/golden
  bool best_backend;  // false: "reference"
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << (c.best_backend ? " best" : " reference"); }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.model + (info.param.best_backend ? "_best" : "_reference");
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class ModelForwardTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    ModelOptions options;
    if (!GetParam().best_backend) options.make_linear = kernels::cpu::make_reference_linear_kernel;
    model_ = std::make_unique<testing::ModelStepper>(load_cpu_model(model_dir(GetParam().model), options));
    ASSERT_EQ(model_->num_fused_gate_up(), model_->config().num_hidden_layers)
        << "HF writes gate_proj and up_proj back to back";
    golden_ = read_golden(GetParam().model);
    ASSERT_EQ(golden_.size(), 4u);
    tolerance_ = testing::is_bf16_model(GetParam().model) ? kBf16Tolerance : kF32Tolerance;
  }

  // Creates the backend for the case with KV dtype `kv_dtype` (kept alive by the fixture).
  attn::AttentionBackend* make_backend(DType kv_dtype, bool best) {
    const attn::AttentionShape shape = model_->attention_shape(kv_dtype, kPageSize);
    const std::string name = best ? best_cpu_backend(shape) : "reference";
    backends_.push_back(attn::create_attention_backend(name, shape, {}));
    return backends_.back().get();
  }

  // The case's backend for prefill and decode; returns what the scenarios print: the model and
  // its attention backend.
  std::string use_case_backend(DType kv_dtype) {
    attn::AttentionBackend* backend = make_backend(kv_dtype, GetParam().best_backend);
    model_->set_attention_backends(backend, backend);
    return GetParam().model + " with " + std::string(backend->name()) + " attention";
  }

  std::unique_ptr<testing::ModelStepper> model_;
  std::vector<GoldenPrompt> golden_;
  std::vector<std::unique_ptr<attn::AttentionBackend>> backends_;
  double tolerance_ = 0;
};

// One prefill of each prompt (last logits vs HF), then 31 decode steps (greedy ids vs HF).
TEST_P(ModelForwardTest, PrefillLogitsAndGreedyDecodeMatchHuggingFace) {
  const std::string label = use_case_backend(DType::kF32) + ", " + model_->linear_kernel_name() + " linear";
  testing::expect_golden_prefill_and_greedy(*model_, golden_, tolerance_, label);
}

// All four prompts in one forward (ragged lengths) give the same last logits as one at a time.
TEST_P(ModelForwardTest, RaggedBatchMatchesOneAtATime) {
  use_case_backend(DType::kF32);
  testing::expect_ragged_batch_matches_one_at_a_time(*model_, golden_, tolerance_, kBatchTolerance);
}

// One step mixing a decode, a whole prefill and the second chunk of a chunked prefill, then all
// three decode together (logit rows in batch order). Prefill steps run on "reference", decode
// steps on the case's backend: both read and write the same pages.
TEST_P(ModelForwardTest, MixedPrefillAndDecodeBatch) {
  attn::AttentionBackend* prefill = make_backend(DType::kF32, false);
  model_->set_attention_backends(prefill, make_backend(DType::kF32, GetParam().best_backend));
  testing::expect_mixed_prefill_and_decode(*model_, golden_, tolerance_, /*rows_out_of_batch_order=*/false);
}

// A bf16 KV cache (the serving default) rounds K and V; the logits stay close.
TEST_P(ModelForwardTest, Bf16KvCacheStaysClose) {
  testing::expect_bf16_kv_cache_close(*model_, golden_, kBf16KvTolerance, use_case_backend(DType::kBF16));
}

// weight_bytes counts every tensor the forward reads (these checkpoints hold nothing else) plus
// the f32 bias copies; workspace_bytes grows with the batch and never shrinks.
TEST_P(ModelForwardTest, WeightAndWorkspaceBytes) {
  const ModelConfig& c = model_->config();
  const Checkpoint checkpoint(model_dir(GetParam().model));
  uint64_t bias_bytes = 0;
  if (c.attention_bias) bias_bytes = uint64_t(c.num_hidden_layers) * (c.q_size() + 2 * c.kv_size()) * 4;
  EXPECT_EQ(model_->weight_bytes(), checkpoint.total_bytes() + bias_bytes);
  use_case_backend(DType::kF32);
  testing::expect_workspace_grows_with_the_batch(*model_, golden_);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const char* model : {"llama-gqa", "qwen2-tied", "qwen3-qknorm", "mistral"}) {
    for (const char* dtype : {"f32", "bf16"}) {
      for (const bool best : {false, true}) cases.push_back({std::string(model) + "-" + dtype, best});
    }
  }
  // The embedded model (models/kjv-tiny, bf16 weights), fixtures by tools/train_tiny/train.py.
  for (const bool best : {false, true}) cases.push_back({"kjv-tiny", best});
  return cases;
}

// gate_proj and up_proj apart in the file: two kernels, same logits for two sequences in one step.
TEST(ModelLoadTest, UnfusedGateUpMatchesHuggingFace) {
  testing::TempDir dir;
  testing::rewrite_golden_checkpoint("llama-gqa-f32", dir.path(), /*drop=*/"", /*f16=*/"", /*reverse_order=*/true);
  auto model = std::make_unique<testing::ModelStepper>(load_cpu_model(dir.path()));
  EXPECT_EQ(model->num_fused_gate_up(), 0);
  auto backend = attn::create_attention_backend("reference", model->attention_shape(DType::kF32, kPageSize), {});
  model->set_attention_backends(backend.get(), backend.get());
  testing::expect_two_prompts_in_one_step(*model, read_golden("llama-gqa-f32"), 8, kF32Tolerance);
}

// The weights copied into transparent huge pages (--weights-memory huge-pages) compute what HF
// computes, as the mapped checkpoint does (kF32Tolerance, greedy exact).
TEST(ModelLoadTest, HugePageWeightsMatchHuggingFace) {
  ModelOptions options;
  options.weights_memory = FileMemory::kHugePageCopy;
  auto model = std::make_unique<testing::ModelStepper>(load_cpu_model(model_dir("llama-gqa-f32"), options));
  auto backend = attn::create_attention_backend("reference", model->attention_shape(DType::kF32, kPageSize), {});
  model->set_attention_backends(backend.get(), backend.get());
  testing::expect_two_prompts_in_one_step(*model, read_golden("llama-gqa-f32"), 8, kF32Tolerance);
}

// An F16 projection is widened to f32 at load (the CPU linear kernels read F32 or BF16): the model
// computes what HF computes on the weights rounded to f16 (a relative 2^-11 per weight of one
// tensor, so within kF16WeightTolerance = 1e-2 of HF's f32 logits for two prompts in one step),
// and weight_bytes counts the f32 copy instead of the stored F16 tensor.
TEST(ModelLoadTest, F16ProjectionIsWidened) {
  constexpr double kF16WeightTolerance = 1e-2;
  testing::TempDir dir;
  const std::string name = "model.layers.1.mlp.down_proj.weight";
  testing::rewrite_golden_checkpoint("llama-gqa-f32", dir.path(), /*drop=*/"", name, /*reverse_order=*/true);
  auto model = std::make_unique<testing::ModelStepper>(load_cpu_model(dir.path()));
  const Checkpoint checkpoint(dir.path());
  const uint64_t f16_bytes = checkpoint.find(name)->num_bytes();
  EXPECT_EQ(model->weight_bytes(), checkpoint.total_bytes() + f16_bytes);  // f32: twice the f16 bytes
  auto backend = attn::create_attention_backend("reference", model->attention_shape(DType::kF32, kPageSize), {});
  model->set_attention_backends(backend.get(), backend.get());
  testing::expect_two_prompts_in_one_step(*model, read_golden("llama-gqa-f32"), 8, kF16WeightTolerance);
}

// Bad calls fail with a message instead of reading out of bounds.
TEST(ModelLoadTest, ForwardChecksItsArguments) {
  auto model = std::make_unique<testing::ModelStepper>(load_cpu_model(kGoldenDir / "qwen3-qknorm-f32"));
  const std::vector<int32_t> tokens = {1, 2, 3};
  testing::BatchMetadata batch;
  batch.sequences.push_back({3, 0, {0}});
  std::vector<float> logits(model->config().vocab_size);
  const int64_t row = 2;
  EXPECT_THROW(model->forward(tokens, batch, {&row, 1}, logits.data()), Error);  // no backend
  auto backend = attn::create_attention_backend("reference", model->attention_shape(DType::kF32, kPageSize), {});
  model->set_attention_backends(backend.get(), backend.get());
  EXPECT_THROW(model->forward(tokens, batch, {&row, 1}, logits.data()), Error);  // no KV caches
  KvPages kv(model->config(), DType::kF32, 4, attn::Device::kCpu);
  EXPECT_THROW(model->bind_kv_caches(kv.caches().first(1)), Error);  // one cache for two layers
  model->bind_kv_caches(kv.caches());
  testing::expect_bad_steps_rejected(*model, tokens, batch, row, logits);
}

// A StepBatch that does not add up is refused by Transformer::upload before anything reads it:
// a page table too short for its tokens, maxima or positions edited after add_sequence.
TEST(ModelLoadTest, UploadChecksTheStepBatch) {
  auto model = load_cpu_model(kGoldenDir / "qwen3-qknorm-f32");
  const std::vector<TokenId> tokens = {1, 2, 3, 4, 5};
  const std::vector<int32_t> pages = {0, 1};
  auto make = [&](int num_pages) {
    StepBatch b;
    b.add_sequence(tokens.data(), 5, 0, pages.data(), num_pages, 1);
    return b;
  };
  EXPECT_NO_THROW(model->upload(make(1), 16));  // 5 tokens fit one page of 16
  EXPECT_THROW(model->upload(make(1), 4), Error);  // but not one page of 4
  EXPECT_NO_THROW(model->upload(make(2), 4));
  StepBatch maxima = make(1);
  maxima.max_new_tokens = 1;  // would make the step look like decode
  EXPECT_THROW(model->upload(maxima, 16), Error);
  StepBatch positions = make(1);
  positions.positions[2] = 7;
  EXPECT_THROW(model->upload(positions, 16), Error);
}

// widen_logit_rows: compact rows of num_ids entries spread to rows of vocab entries, in place,
// the rest of each row kExcludedLogit.
TEST(ModelLoadTest, WidenLogitRows) {
  const float x = kExcludedLogit;
  std::vector<float> logits = {1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0};  // 3 rows of 2, room for 3 rows of 5
  widen_logit_rows(logits.data(), 3, 2, 5);
  EXPECT_EQ(logits, (std::vector<float>{1, 2, x, x, x, 3, 4, x, x, x, 5, 6, x, x, x}));
  std::vector<float> whole = {1, 2, 3, 4};
  widen_logit_rows(whole.data(), 2, 2, 2);
  EXPECT_EQ(whole, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_THROW(widen_logit_rows(whole.data(), 1, 3, 2), Error);
}

// limit_logit_ids(n): the LM head computes token ids [0, n) only; those logits are HF's (every
// prompt's last row, four rows in one ragged step), every other entry is kExcludedLogit; n =
// vocab_size restores the whole head. Out-of-range n is refused.
TEST(ModelLoadTest, LimitedLogitIdsMatchHuggingFace) {
  for (const char* name : {"llama-gqa-bf16", "qwen2-tied-f32"}) {
    SCOPED_TRACE(name);
    auto model = std::make_unique<testing::ModelStepper>(load_cpu_model(model_dir(name)));
    Transformer& t = model->transformer();
    const int vocab = model->config().vocab_size;
    EXPECT_EQ(t.num_logit_ids(), vocab);
    EXPECT_THROW(t.limit_logit_ids(0), Error);
    EXPECT_THROW(t.limit_logit_ids(vocab + 1), Error);
    const auto golden = read_golden(name);
    const double tolerance = testing::is_bf16_model(name) ? kBf16Tolerance : kF32Tolerance;
    auto backend = attn::create_attention_backend("reference", model->attention_shape(DType::kF32, kPageSize), {});
    model->set_attention_backends(backend.get(), backend.get());
    for (const int n : {vocab / 2 + 3, 1, vocab}) {
      SCOPED_TRACE(n);
      t.limit_logit_ids(n);
      EXPECT_EQ(t.num_logit_ids(), n);
      KvPages kv(model->config(), DType::kF32, 16, model->device());
      model->bind_kv_caches(kv.caches());
      std::vector<std::vector<int32_t>> pages(golden.size());
      BatchMetadata batch;
      std::vector<int32_t> tokens;
      std::vector<int64_t> rows;
      for (size_t s = 0; s < golden.size(); ++s) {
        batch.sequences.push_back(kv.step(pages[s], 0, static_cast<int>(golden[s].ids.size())));
        tokens.insert(tokens.end(), golden[s].ids.begin(), golden[s].ids.end());
        rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
      }
      std::vector<float> logits(rows.size() * vocab, 0.0f);
      model->forward(tokens, batch, rows, logits.data());
      for (size_t s = 0; s < golden.size(); ++s) {
        const std::span<const float> row(logits.data() + s * vocab, static_cast<size_t>(vocab));
        const std::span<const float> expected(golden[s].last_logits.data(), static_cast<size_t>(n));
        EXPECT_LE(testing::relative_error(row.first(static_cast<size_t>(n)), expected), tolerance) << "prompt " << s;
        EXPECT_EQ(std::count(row.begin() + n, row.end(), kExcludedLogit), vocab - n) << "prompt " << s;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, ModelForwardTest, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace spindle
