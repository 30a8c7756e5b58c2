// Transformer::forward on CUDA (load_cuda_model) against the Hugging Face golden fixtures (tests/golden, see
// tests/model/model_forward_test.cc), with the cuda_reference attention backend and KV pages in
// device memory. Skips (except the load-error test) when no CUDA device with cc >= 8.0 is usable.
//
// Relative error of a logits row: max_i |ours_i - golden_i| / max_i |golden_i|.
// Tolerances (those of the CPU test):
//   kF32Tolerance  = 1e-4  f32 weights: cuBLAS f32 products (no TF32), f32 ops.
//   kBf16Tolerance = 2e-2  bf16 weights. cuBLAS multiplies bf16 by bf16, so the activations are
//                          converted: by default split into hi + lo bf16 parts (~16 significant
//                          bits); a CPU simulation of that rounding on these fixtures gave <= 2.2e-5
//                          and identical greedy continuations.
//   kRound16Tolerance = 5e-2 allow_16bit_activations (activations rounded to one bf16): the CPU
//                          simulation gave up to 1.9e-2 (and greedy continuations that diverge on
//                          3 of 16 prompts, so greedy is not checked in that mode).
//   kBf16KvTolerance = 5e-2 a bf16 KV cache (the CPU test's bound and reasoning).
//   kFp8KvTolerance = 0.25  an fp8_e4m3 KV cache (tests/startup/kv_scale_setup_test.cc's bound and reasoning).
//   kF16WeightTolerance = 2e-2 one up_proj converted to f16 (weights rounded to 2^-11).
//   kBatchTolerance = 1e-4 the same prompt alone and inside a ragged batch (other row counts take
//                          other cuBLAS kernels and, for bf16, the other split path).
// Greedy: the next 32 argmax ids (one prefill, then 31 single-token decode steps through the
// device KV pages) must equal HF's exactly; the golden runs use an f32 KV cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "model/cuda_model.h"
#include "model/forward_scenarios.h"
#include "model/golden_fixtures.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "cuda/cuda_skip.h"
#include "platform/cuda_info.h"
#include "platform/device_info.h"
#include "util/dtype.h"
#include "util/error.h"

namespace spindle {
namespace {

using testing::GoldenPrompt;
using testing::kGoldenDir;
using testing::KvPages;
using testing::kPageSize;
using testing::model_dir;
using testing::prefill_alone;
using testing::read_golden;
using testing::relative_error;

constexpr double kF32Tolerance = 1e-4;
constexpr double kBf16Tolerance = 2e-2;
constexpr double kRound16Tolerance = 5e-2;
constexpr double kBf16KvTolerance = 5e-2;
constexpr double kFp8KvTolerance = 0.25;  // an fp8_e4m3 KV cache (tests/startup/kv_scale_setup_test.cc)
constexpr double kF16WeightTolerance = 2e-2;
constexpr double kBatchTolerance = 1e-4;

using testing::no_cuda_device_reason;

std::string case_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class CudaModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_CUDA_DEVICE();
    golden_ = read_golden(GetParam());
    ASSERT_EQ(golden_.size(), 4u);
    bf16_ = testing::is_bf16_model(GetParam());
    tolerance_ = bf16_ ? kBf16Tolerance : kF32Tolerance;
  }

  void load(const CudaModelOptions& options = {}) {
    model_ = std::make_unique<testing::ModelStepper>(load_cuda_model(model_dir(GetParam()), options));
    ASSERT_EQ(model_->num_fused_gate_up(), model_->config().num_hidden_layers);
  }

  // A cuda_reference backend with KV dtype `kv_dtype` (kept alive by the fixture).
  attn::AttentionBackend* make_backend(DType kv_dtype) {
    backends_.push_back(
        attn::create_attention_backend("cuda_reference", model_->attention_shape(kv_dtype, kPageSize), {}));
    return backends_.back().get();
  }

  // A cuda_reference backend for prefill and decode.
  void use_backend(DType kv_dtype) {
    attn::AttentionBackend* backend = make_backend(kv_dtype);
    model_->set_attention_backends(backend, backend);
  }

  std::unique_ptr<testing::ModelStepper> model_;
  std::vector<GoldenPrompt> golden_;
  std::vector<std::unique_ptr<attn::AttentionBackend>> backends_;
  bool bf16_ = false;
  double tolerance_ = 0;
};

// One prefill of each prompt (last logits vs HF), then 31 decode steps (greedy ids vs HF).
TEST_P(CudaModelTest, PrefillLogitsAndGreedyDecodeMatchHuggingFace) {
  load();
  use_backend(DType::kF32);
  testing::expect_golden_prefill_and_greedy(
      *model_, golden_, tolerance_, GetParam() + " on CUDA (" + model_->linear_kernel_name() + ", cuda_reference)");
}

// Prompt logprobs and embeddings where the device samples (engine::HostRows): a forward whose
// logits stay on the device (logits null), read back with read_logits, gives every row of the
// forward that writes host logits bit for bit (the same kernels over the same batch), and the same
// final normed rows; every prompt position is a logit row, the last one HF's within the model's
// tolerance. Reading more rows than the step has throws.
TEST_P(CudaModelTest, LogitsLeftOnTheDeviceReadBackAsHostLogits) {
  load();
  attn::AttentionBackend* backend = make_backend(DType::kF32);
  Transformer& t = model_->transformer();
  const GoldenPrompt& g = golden_.back();
  const int n = static_cast<int>(g.ids.size());
  const size_t vocab = static_cast<size_t>(t.config().vocab_size), hidden = static_cast<size_t>(t.config().hidden_size);
  KvPages kv(t.config(), DType::kF32, 8, t.device());
  backend->bind_kv_caches(kv.caches());
  std::vector<int32_t> pages;
  const testing::SequenceMetadata seq = kv.step(pages, 0, n);
  StepBatch batch;
  batch.add_sequence(g.ids.data(), n, 0, seq.page_table.data(), static_cast<int32_t>(seq.page_table.size()), n);
  std::vector<float> host(static_cast<size_t>(n) * vocab), device(host.size());
  std::vector<float> host_final(static_cast<size_t>(n) * hidden), device_final(host_final.size());
  for (const bool on_host : {true, false}) {
    backend->prepare(batch, t.upload(batch, kPageSize));
    t.forward(batch, *backend, on_host ? host.data() : nullptr);
    if (!on_host) t.read_logits(device.data(), n);
    t.read_final_rows((on_host ? host_final : device_final).data(), n);
  }
  EXPECT_EQ(device, host);
  EXPECT_EQ(device_final, host_final);
  const std::span<const float> last(device.data() + static_cast<size_t>(n - 1) * vocab, vocab);
  EXPECT_LE(relative_error(last, g.last_logits), tolerance_) << GetParam();
  EXPECT_THROW(t.read_logits(device.data(), n + 1), Error);
}

// All four prompts in one forward (ragged lengths; over kFusedSplitMaxRows rows for all but
// kjv-tiny, so bf16 products take the two-product path) give the same last logits as one at a time.
TEST_P(CudaModelTest, RaggedBatchMatchesOneAtATime) {
  load();
  use_backend(DType::kF32);
  testing::expect_ragged_batch_matches_one_at_a_time(*model_, golden_, tolerance_, kBatchTolerance);
}

// A RoPE table of 4 positions: later positions are computed on the device (f64 cos/sin of the
// f32 angle, as RopeTable does past its table) and give the same results.
TEST_P(CudaModelTest, RopePastTheTableMatches) {
  CudaModelOptions options;
  options.rope_table_positions = 4;
  load(options);
  use_backend(DType::kF32);
  testing::expect_prefill_and_greedy_decode(*model_, golden_.back(), tolerance_);
}

// One step mixing a decode, a whole prefill and the second chunk of a chunked prefill, then all
// three decode together: ragged rows, per-token positions and the logit-row gather (rows asked
// for out of batch order on purpose: logits come back in logit_rows order).
TEST_P(CudaModelTest, MixedPrefillAndDecodeBatch) {
  load();
  use_backend(DType::kF32);
  testing::expect_mixed_prefill_and_decode(*model_, golden_, tolerance_, /*rows_out_of_batch_order=*/true);
}

// A bf16 KV cache (the serving default) rounds K and V; the logits stay close.
TEST_P(CudaModelTest, Bf16KvCacheStaysClose) {
  load();
  use_backend(DType::kBF16);
  testing::expect_bf16_kv_cache_close(*model_, golden_, kBf16KvTolerance, GetParam() + " on CUDA");
}

// An fp8_e4m3 KV cache (scales 1.0: the test pool's default) through cuda_reference and cuda_flash
// (flash prefill reading FP8 pages): the last prefill logits stay within the CPU FP8 test's bound
// of HF's (kFp8KvTolerance, tests/startup/kv_scale_setup_test.cc: 0.199 observed there at scale 1.0
// against the f32-KV run, which is within 1e-4 of HF).
TEST_P(CudaModelTest, Fp8KvCacheStaysClose) {
  load();
  for (const char* backend : {"cuda_reference", "cuda_flash"}) {
    const attn::AttentionShape shape = model_->attention_shape(DType::kF8E4M3, kPageSize);
    if (!attn::attention_registry().get(backend).unsupported_reasons(detect_device_info(), shape).empty()) continue;
    backends_.push_back(attn::create_attention_backend(backend, shape, {}));
    model_->set_attention_backends(backends_.back().get(), backends_.back().get());
    double worst = 0;
    for (const auto& prompt : golden_) {
      worst = std::max(worst, testing::relative_error(testing::prefill_alone(*model_, prompt, DType::kF8E4M3),
                                                      prompt.last_logits));
    }
    std::printf("[ fp8 KV   ] %s on CUDA, %s: max relative error %.3g\n", GetParam().c_str(), backend, worst);
    EXPECT_LE(worst, kFp8KvTolerance) << backend;
    EXPECT_GT(worst, 0.0) << backend;
  }
}

// allow_16bit_activations: bf16 products on rounded activations stay close; f32 weights are
// unaffected.
TEST_P(CudaModelTest, Round16ActivationsStayClose) {
  CudaModelOptions options;
  options.allow_16bit_activations = true;
  load(options);
  EXPECT_STREQ(model_->linear_kernel_name(), "cublas_round16+gemv16");
  use_backend(DType::kF32);
  double max_error = 0;
  for (const auto& prompt : golden_) {
    max_error = std::max(max_error, relative_error(prefill_alone(*model_, prompt, DType::kF32), prompt.last_logits));
  }
  EXPECT_LE(max_error, bf16_ ? kRound16Tolerance : kF32Tolerance);
  std::printf("[ round16  ] %s on CUDA: max relative error %.3g\n", GetParam().c_str(), max_error);
}

// weight_bytes counts the uploaded tensors (biases as f32); workspace_bytes grows with the batch
// and never shrinks.
TEST_P(CudaModelTest, WeightAndWorkspaceBytes) {
  load();
  const Checkpoint checkpoint(model_dir(GetParam()));
  uint64_t expected = checkpoint.total_bytes();
  for (const auto& t : checkpoint.tensors()) {
    if (t.name.ends_with(".bias")) expected += t.num_elements() * sizeof(float) - t.num_bytes();
  }
  EXPECT_EQ(model_->weight_bytes(), expected);

  use_backend(DType::kF32);
  testing::expect_workspace_grows_with_the_batch(*model_, golden_);
}

INSTANTIATE_TEST_SUITE_P(Golden, CudaModelTest,
                         ::testing::Values("llama-gqa-f32", "llama-gqa-bf16", "qwen2-tied-f32", "qwen2-tied-bf16",
                                           "qwen3-qknorm-f32", "qwen3-qknorm-bf16", "mistral-f32", "mistral-bf16",
                                           "kjv-tiny"),
                         case_name);

// Both models check the folder with the same code before anything touches a device, so this
// runs without a GPU too.
TEST(CudaModelLoadTest, BadModelFolderGivesTheSameErrorAsModel) {
  auto message = [](auto&& load) -> std::string {
    try {
      load();
    } catch (const Error& e) {
      return e.message();
    }
    ADD_FAILURE() << "expected an error";
    return "";
  };
  const std::filesystem::path missing = kGoldenDir / "no-such-model";
  const std::string cpu_missing = message([&] { load_cpu_model(missing); });
  EXPECT_EQ(message([&] { load_cuda_model(missing); }), cpu_missing);
  EXPECT_NE(cpu_missing.find("no-such-model"), std::string::npos) << cpu_missing;

  testing::TempDir dir;
  testing::rewrite_golden_checkpoint("llama-gqa-f32", dir.path(), "model.layers.1.mlp.down_proj.weight", /*f16=*/"",
                                     /*reverse_order=*/false);
  const std::string cpu_incomplete = message([&] { load_cpu_model(dir.path()); });
  EXPECT_EQ(message([&] { load_cuda_model(dir.path()); }), cpu_incomplete);
  EXPECT_NE(cpu_incomplete.find("model.layers.1.mlp.down_proj.weight"), std::string::npos) << cpu_incomplete;
}

// gate_proj F32 and up_proj F16: the two run as separate products (F16 through cuBLAS with split
// activations), and the logits stay within the rounding of one weight to f16.
TEST(CudaModelLoadTest, MixedDtypeGateUpRunsUnfused) {
  SKIP_WITHOUT_CUDA_DEVICE();
  testing::TempDir dir;
  testing::rewrite_golden_checkpoint("llama-gqa-f32", dir.path(), /*drop=*/"", "model.layers.0.mlp.up_proj.weight",
                                     /*reverse_order=*/false);
  auto model = std::make_unique<testing::ModelStepper>(load_cuda_model(dir.path()));
  EXPECT_EQ(model->num_fused_gate_up(), model->config().num_hidden_layers - 1);
  auto backend = attn::create_attention_backend("cuda_reference", model->attention_shape(DType::kF32, kPageSize), {});
  model->set_attention_backends(backend.get(), backend.get());
  testing::expect_two_prompts_in_one_step(*model, read_golden("llama-gqa-f32"), 16, kF16WeightTolerance);
}

// Bad calls fail with a message instead of reading out of bounds.
TEST(CudaModelLoadTest, ForwardChecksItsArguments) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto model = std::make_unique<testing::ModelStepper>(load_cuda_model(kGoldenDir / "qwen3-qknorm-f32"));
  EXPECT_EQ(model->device(), attn::Device::kCuda);
  const std::vector<int32_t> tokens = {1, 2, 3};
  testing::BatchMetadata batch;
  batch.sequences.push_back({3, 0, {0}});
  std::vector<float> logits(model->config().vocab_size);
  const int64_t row = 2;
  EXPECT_THROW(model->forward(tokens, batch, {&row, 1}, logits.data()), Error);  // no backend
  const attn::AttentionShape shape = model->attention_shape(DType::kF32, kPageSize);
  auto cpu_backend = attn::create_attention_backend("reference", shape, {});
  EXPECT_THROW(model->set_attention_backends(cpu_backend.get(), cpu_backend.get()), Error);  // a CPU backend
  auto backend = attn::create_attention_backend("cuda_reference", shape, {});
  model->set_attention_backends(backend.get(), backend.get());
  EXPECT_THROW(model->forward(tokens, batch, {&row, 1}, logits.data()), Error);  // no KV caches
  KvPages kv(model->config(), DType::kF32, 4, attn::Device::kCuda);
  EXPECT_THROW(model->bind_kv_caches(kv.caches().first(1)), Error);  // one cache for two layers
  std::vector<attn::LayerKvCache> host(kv.caches().begin(), kv.caches().end());
  for (auto& c : host) c.device = attn::Device::kCpu;
  EXPECT_THROW(model->bind_kv_caches(host), Error);  // pages said to be host memory
  model->bind_kv_caches(kv.caches());
  testing::expect_bad_steps_rejected(*model, tokens, batch, row, logits);
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
}

}  // namespace
}  // namespace spindle
