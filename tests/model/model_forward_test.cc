// Model::forward against Hugging Face transformers 5.17 golden fixtures (tests/golden/<model>/,
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
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "platform/device_info.h"
#include "golden_fixtures.h"
#include "safetensors_writer.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/half.h"

namespace spindle {
namespace {

constexpr double kF32Tolerance = 1e-4;
constexpr double kBf16Tolerance = 2e-2;
constexpr double kBatchTolerance = 1e-4;
constexpr double kBf16KvTolerance = 5e-2;
constexpr int kPageSize = 16;
constexpr int kGreedySteps = 32;

using testing::argmax;
using testing::GoldenPrompt;
using testing::kGoldenDir;
using testing::model_dir;
using testing::read_golden;
using testing::relative_error;

// KV pages for every layer of one model, handed out from a shuffled free list so sequences
// never own contiguous pages. Stands in for kv/PagePool in these tests.
class TestKvPages {
 public:
  TestKvPages(const ModelConfig& c, DType dtype, int num_pages, uint64_t seed = 7) {
    const size_t bytes = size_t(num_pages) * kPageSize * c.kv_size() * dtype_size(dtype);
    storage_.resize(size_t(c.num_hidden_layers) * 2);
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      auto& k = storage_[2 * l];
      auto& v = storage_[2 * l + 1];
      k.assign(bytes, std::byte{0xff});  // NaN in f32 and bf16: unwritten slots must not be read
      v.assign(bytes, std::byte{0xff});
      caches_.push_back({k.data(), v.data(), num_pages, kPageSize, c.num_key_value_heads, c.head_dim, dtype});
    }
    free_.resize(num_pages);
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), std::mt19937_64(seed));
  }
  std::span<const attn::LayerKvCache> caches() const { return caches_; }

  // Metadata for `num_new` tokens of a sequence with `num_cached` in its pages; grows its pages.
  attn::SequenceMetadata step(std::vector<int32_t>& pages, int num_cached, int num_new) {
    const size_t needed = size_t(num_cached + num_new + kPageSize - 1) / kPageSize;
    while (pages.size() < needed) {
      EXPECT_FALSE(free_.empty()) << "test KV pool exhausted";
      pages.push_back(free_.back());
      free_.pop_back();
    }
    return {num_new, num_cached, pages};
  }

 private:
  std::vector<std::vector<std::byte>> storage_;
  std::vector<attn::LayerKvCache> caches_;
  std::vector<int32_t> free_;
};

// "reference" or the highest-priority CPU backend usable here for this shape.
std::string best_cpu_backend(const attn::AttentionShape& shape) {
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
    model_ = Model::load(model_dir(GetParam().model), options);
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

  int vocab() const { return model_->config().vocab_size; }

  std::unique_ptr<Model> model_;
  std::vector<GoldenPrompt> golden_;
  std::vector<std::unique_ptr<attn::AttentionBackend>> backends_;
  double tolerance_ = 0;
};

// One prefill of each prompt (last logits vs HF), then 31 decode steps (greedy ids vs HF).
TEST_P(ModelForwardTest, PrefillLogitsAndGreedyDecodeMatchHuggingFace) {
  attn::AttentionBackend* backend = make_backend(DType::kF32, GetParam().best_backend);
  model_->set_attention_backends(backend, backend);
  double max_error = 0;
  for (const auto& prompt : golden_) {
    SCOPED_TRACE(prompt.text);
    TestKvPages kv(model_->config(), DType::kF32, 8);
    model_->bind_kv_caches(kv.caches());
    std::vector<int32_t> pages;
    const int n = static_cast<int>(prompt.ids.size());
    attn::BatchMetadata batch;
    batch.sequences.push_back(kv.step(pages, 0, n));
    std::vector<float> logits(vocab());
    const int64_t last = n - 1;
    model_->forward(prompt.ids, batch, {&last, 1}, logits.data());
    const double error = relative_error(logits, prompt.last_logits);
    EXPECT_LE(error, tolerance_);
    max_error = std::max(max_error, error);

    std::vector<int32_t> ids = {argmax(logits)};
    for (int step = 1; step < kGreedySteps; ++step) {
      attn::BatchMetadata decode;
      decode.sequences.push_back(kv.step(pages, n + step - 1, 1));
      const int64_t row = 0;
      model_->forward({&ids.back(), 1}, decode, {&row, 1}, logits.data());
      ids.push_back(argmax(logits));
    }
    EXPECT_EQ(ids, prompt.greedy);
  }
  std::printf("[ golden   ] %s with %s attention, %s linear: max relative error %.3g (tolerance %.0e)\n",
              GetParam().model.c_str(), std::string(backend->name()).c_str(), model_->linear_kernel_name(),
              max_error, tolerance_);
}

// All four prompts in one forward (ragged lengths) give the same last logits as one at a time.
TEST_P(ModelForwardTest, RaggedBatchMatchesOneAtATime) {
  attn::AttentionBackend* backend = make_backend(DType::kF32, GetParam().best_backend);
  model_->set_attention_backends(backend, backend);
  std::vector<std::vector<float>> alone;
  for (const auto& prompt : golden_) {
    TestKvPages kv(model_->config(), DType::kF32, 8);
    model_->bind_kv_caches(kv.caches());
    std::vector<int32_t> pages;
    attn::BatchMetadata batch;
    batch.sequences.push_back(kv.step(pages, 0, static_cast<int>(prompt.ids.size())));
    const int64_t last = static_cast<int64_t>(prompt.ids.size()) - 1;
    alone.emplace_back(vocab());
    model_->forward(prompt.ids, batch, {&last, 1}, alone.back().data());
  }

  TestKvPages kv(model_->config(), DType::kF32, 16);
  model_->bind_kv_caches(kv.caches());
  std::vector<std::vector<int32_t>> pages(golden_.size());
  attn::BatchMetadata batch;
  std::vector<int32_t> tokens;
  std::vector<int64_t> rows;
  for (size_t s = 0; s < golden_.size(); ++s) {
    const auto& ids = golden_[s].ids;
    batch.sequences.push_back(kv.step(pages[s], 0, static_cast<int>(ids.size())));
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
  }
  std::vector<float> logits(rows.size() * vocab());
  model_->forward(tokens, batch, rows, logits.data());
  for (size_t s = 0; s < golden_.size(); ++s) {
    SCOPED_TRACE(golden_[s].text);
    std::span<const float> row(logits.data() + s * vocab(), vocab());
    EXPECT_LE(relative_error(row, alone[s]), kBatchTolerance);
    EXPECT_LE(relative_error(row, golden_[s].last_logits), tolerance_);
  }
}

// One step mixing a decode (A), a whole prefill (B) and the second chunk of a chunked prefill (C),
// then all three decode together. Prefill steps run on "reference", decode steps on the case's
// backend: both read and write the same pages.
TEST_P(ModelForwardTest, MixedPrefillAndDecodeBatch) {
  attn::AttentionBackend* prefill = make_backend(DType::kF32, false);
  attn::AttentionBackend* decode = make_backend(DType::kF32, GetParam().best_backend);
  model_->set_attention_backends(prefill, decode);
  TestKvPages kv(model_->config(), DType::kF32, 24);
  model_->bind_kv_caches(kv.caches());
  const GoldenPrompt& a = golden_[0];
  const GoldenPrompt& b = golden_[1];
  const GoldenPrompt& c = golden_[3];
  const int na = static_cast<int>(a.ids.size()), nb = static_cast<int>(b.ids.size());
  const int nc = static_cast<int>(c.ids.size()), half = nc / 2;
  std::vector<int32_t> pa, pb, pc;

  // Step 1: A whole, C's first half (no logits wanted for C).
  {
    attn::BatchMetadata batch;
    batch.sequences = {kv.step(pa, 0, na), kv.step(pc, 0, half)};
    std::vector<int32_t> tokens = a.ids;
    tokens.insert(tokens.end(), c.ids.begin(), c.ids.begin() + half);
    const int64_t row = na - 1;
    std::vector<float> logits(vocab());
    model_->forward(tokens, batch, {&row, 1}, logits.data());
    EXPECT_LE(relative_error(logits, a.last_logits), tolerance_);
    EXPECT_EQ(argmax(logits), a.greedy[0]);
  }
  // Step 2: A decodes its first greedy token, B prefills, C prefills its second half.
  std::vector<int32_t> next(3);
  {
    attn::BatchMetadata batch;
    batch.sequences = {kv.step(pa, na, 1), kv.step(pb, 0, nb), kv.step(pc, half, nc - half)};
    std::vector<int32_t> tokens = {a.greedy[0]};
    tokens.insert(tokens.end(), b.ids.begin(), b.ids.end());
    tokens.insert(tokens.end(), c.ids.begin() + half, c.ids.end());
    const std::vector<int64_t> rows = {0, nb, static_cast<int64_t>(tokens.size()) - 1};
    std::vector<float> logits(3 * vocab());
    model_->forward(tokens, batch, rows, logits.data());
    std::span<const float> all(logits);
    EXPECT_EQ(argmax(all.subspan(0, vocab())), a.greedy[1]);
    EXPECT_LE(relative_error(all.subspan(vocab(), vocab()), b.last_logits), tolerance_);
    EXPECT_LE(relative_error(all.subspan(2 * vocab(), vocab()), c.last_logits), tolerance_);
    next = {argmax(all.subspan(0, vocab())), argmax(all.subspan(vocab(), vocab())),
            argmax(all.subspan(2 * vocab(), vocab()))};
    EXPECT_EQ(next[1], b.greedy[0]);
    EXPECT_EQ(next[2], c.greedy[0]);
  }
  // Steps 3..: all three decode in one batch; ids follow each prompt's greedy continuation.
  std::vector<int> produced = {2, 1, 1};  // greedy ids produced so far per sequence
  for (int step = 0; step < 12; ++step) {
    attn::BatchMetadata batch;
    batch.sequences = {kv.step(pa, na + produced[0] - 1, 1), kv.step(pb, nb + produced[1] - 1, 1),
                       kv.step(pc, nc + produced[2] - 1, 1)};
    const std::vector<int64_t> rows = {0, 1, 2};
    std::vector<float> logits(3 * vocab());
    model_->forward(next, batch, rows, logits.data());
    const GoldenPrompt* prompts[] = {&a, &b, &c};
    for (int s = 0; s < 3; ++s) {
      next[s] = argmax(std::span<const float>(logits).subspan(s * vocab(), vocab()));
      EXPECT_EQ(next[s], prompts[s]->greedy[produced[s]]) << "sequence " << s << " step " << step;
      ++produced[s];
    }
  }
}

// A bf16 KV cache (the serving default) rounds K and V; the logits stay close.
TEST_P(ModelForwardTest, Bf16KvCacheStaysClose) {
  attn::AttentionBackend* backend = make_backend(DType::kBF16, GetParam().best_backend);
  model_->set_attention_backends(backend, backend);
  double max_error = 0;
  for (const auto& prompt : golden_) {
    TestKvPages kv(model_->config(), DType::kBF16, 8);
    model_->bind_kv_caches(kv.caches());
    std::vector<int32_t> pages;
    attn::BatchMetadata batch;
    batch.sequences.push_back(kv.step(pages, 0, static_cast<int>(prompt.ids.size())));
    const int64_t last = static_cast<int64_t>(prompt.ids.size()) - 1;
    std::vector<float> logits(vocab());
    model_->forward(prompt.ids, batch, {&last, 1}, logits.data());
    max_error = std::max(max_error, relative_error(logits, prompt.last_logits));
  }
  EXPECT_LE(max_error, kBf16KvTolerance);
  std::printf("[ bf16 KV  ] %s with %s attention: max relative error %.3g\n", GetParam().model.c_str(),
              std::string(backend->name()).c_str(), max_error);
}

// weight_bytes counts every tensor the forward reads (these checkpoints hold nothing else) plus
// the f32 bias copies; workspace_bytes grows with the batch and never shrinks.
TEST_P(ModelForwardTest, WeightAndWorkspaceBytes) {
  const ModelConfig& c = model_->config();
  const Checkpoint checkpoint(model_dir(GetParam().model));
  uint64_t bias_bytes = 0;
  if (c.attention_bias) bias_bytes = uint64_t(c.num_hidden_layers) * (c.q_size() + 2 * c.kv_size()) * 4;
  EXPECT_EQ(model_->weight_bytes(), checkpoint.total_bytes() + bias_bytes);

  attn::AttentionBackend* backend = make_backend(DType::kF32, GetParam().best_backend);
  model_->set_attention_backends(backend, backend);
  TestKvPages kv(c, DType::kF32, 8);
  model_->bind_kv_caches(kv.caches());
  const uint64_t before = model_->workspace_bytes();
  auto run = [&](const GoldenPrompt& prompt) {
    std::vector<int32_t> pages;
    attn::BatchMetadata batch;
    batch.sequences.push_back(kv.step(pages, 0, static_cast<int>(prompt.ids.size())));
    const int64_t last = static_cast<int64_t>(prompt.ids.size()) - 1;
    std::vector<float> logits(vocab());
    model_->forward(prompt.ids, batch, {&last, 1}, logits.data());
  };
  const GoldenPrompt& longest = *std::max_element(golden_.begin(), golden_.end(), [](const auto& a, const auto& b) {
    return a.ids.size() < b.ids.size();
  });
  run(longest);
  const uint64_t after_long = model_->workspace_bytes();
  const int64_t t = static_cast<int64_t>(longest.ids.size());
  const int64_t per_token = 4 * (3 * int64_t{c.hidden_size} + 2 * c.q_size() + 2 * c.kv_size() +
                                 3 * int64_t{c.intermediate_size});
  EXPECT_GE(after_long - before, static_cast<uint64_t>(t * per_token));
  for (const auto& prompt : golden_) run(prompt);  // none longer: nothing grows
  EXPECT_EQ(model_->workspace_bytes(), after_long);
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

// Copies a golden model into dir with its tensors in reverse name order (so gate_proj and up_proj
// are no longer back to back), converting `f16_tensor` (if named) to F16.
void rewrite_checkpoint(const std::string& model, const std::filesystem::path& dir,
                        const std::string& f16_tensor = "") {
  std::filesystem::copy_file(kGoldenDir / model / "config.json", dir / "config.json");
  const Checkpoint checkpoint(kGoldenDir / model);
  std::vector<testing::NamedTensor> tensors;
  for (const auto& info : checkpoint.tensors()) {
    const TensorView view = checkpoint.tensor(info.name);
    testing::NamedTensor t{info.name, info.dtype, info.shape, {view.bytes.begin(), view.bytes.end()}};
    if (info.name == f16_tensor) {
      ASSERT_EQ(info.dtype, DType::kF32);
      const auto* f = reinterpret_cast<const float*>(view.bytes.data());
      t.dtype = DType::kF16;
      t.data.resize(info.num_elements() * 2);
      for (uint64_t i = 0; i < info.num_elements(); ++i) {
        const uint16_t h = float_to_fp16_bits(f[i]);
        std::memcpy(t.data.data() + 2 * i, &h, 2);
      }
    }
    tensors.insert(tensors.begin(), std::move(t));
  }
  testing::write_safetensors(dir / "model.safetensors", tensors);
}

// gate_proj and up_proj apart in the file: two kernels, same logits.
TEST(ModelLoadTest, UnfusedGateUpMatchesHuggingFace) {
  testing::TempDir dir;
  rewrite_checkpoint("llama-gqa-f32", dir.path());
  auto model = Model::load(dir.path());
  EXPECT_EQ(model->num_fused_gate_up(), 0);
  const auto golden = read_golden("llama-gqa-f32");
  auto backend = attn::create_attention_backend("reference", model->attention_shape(DType::kF32, kPageSize), {});
  model->set_attention_backends(backend.get(), backend.get());
  TestKvPages kv(model->config(), DType::kF32, 8);
  model->bind_kv_caches(kv.caches());
  // Two sequences in one step (the unfused MLP keeps gate and up rows in separate halves).
  std::vector<int32_t> pa, pb;
  attn::BatchMetadata batch;
  const auto& a = golden[2].ids;
  const auto& b = golden[3].ids;
  batch.sequences = {kv.step(pa, 0, static_cast<int>(a.size())), kv.step(pb, 0, static_cast<int>(b.size()))};
  std::vector<int32_t> tokens = a;
  tokens.insert(tokens.end(), b.begin(), b.end());
  const std::vector<int64_t> rows = {static_cast<int64_t>(a.size()) - 1, static_cast<int64_t>(tokens.size()) - 1};
  const int vocab = model->config().vocab_size;
  std::vector<float> logits(2 * vocab);
  model->forward(tokens, batch, rows, logits.data());
  EXPECT_LE(relative_error(std::span<const float>(logits).first(vocab), golden[2].last_logits), kF32Tolerance);
  EXPECT_LE(relative_error(std::span<const float>(logits).last(vocab), golden[3].last_logits), kF32Tolerance);
}

// Projections must be F32 or BF16 (the linear kernels' dtypes); the error names the tensor.
TEST(ModelLoadTest, F16ProjectionIsRejectedWithItsName) {
  testing::TempDir dir;
  rewrite_checkpoint("llama-gqa-f32", dir.path(), "model.layers.1.mlp.down_proj.weight");
  try {
    Model::load(dir.path());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("model.layers.1.mlp.down_proj.weight is F16"), std::string::npos) << e.message();
  }
}

// Bad calls fail with a message instead of reading out of bounds.
TEST(ModelLoadTest, ForwardChecksItsArguments) {
  auto model = Model::load(kGoldenDir / "qwen3-qknorm-f32");
  const std::vector<int32_t> tokens = {1, 2, 3};
  attn::BatchMetadata batch;
  batch.sequences.push_back({3, 0, {0}});
  std::vector<float> logits(model->config().vocab_size);
  const int64_t row = 2;
  EXPECT_THROW(model->forward(tokens, batch, {&row, 1}, logits.data()), Error);  // no backend
  auto backend = attn::create_attention_backend("reference", model->attention_shape(DType::kF32, kPageSize), {});
  model->set_attention_backends(backend.get(), backend.get());
  EXPECT_THROW(model->forward(tokens, batch, {&row, 1}, logits.data()), Error);  // no KV caches
  TestKvPages kv(model->config(), DType::kF32, 4);
  EXPECT_THROW(model->bind_kv_caches(kv.caches().first(1)), Error);  // one cache for two layers
  model->bind_kv_caches(kv.caches());
  const int64_t bad_row = 3;
  EXPECT_THROW(model->forward(tokens, batch, {&bad_row, 1}, logits.data()), Error);
  EXPECT_THROW(model->forward(std::span(tokens).first(2), batch, {&row, 1}, logits.data()), Error);
  const std::vector<int32_t> bad_ids = {1, 2, 1 << 20};
  EXPECT_THROW(model->forward(bad_ids, batch, {&row, 1}, logits.data()), Error);
  model->forward(tokens, batch, {&row, 1}, logits.data());
}

INSTANTIATE_TEST_SUITE_P(Golden, ModelForwardTest, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace spindle
