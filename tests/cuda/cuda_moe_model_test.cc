// Mixtures of experts (Qwen3-MoE, Mixtral, Qwen2-MoE) on CUDA (CudaOps::moe, model/cuda_moe.h)
// against the Hugging Face transformers 5.17 golden fixtures (tests/golden/{qwen3-moe,mixtral,
// qwen2-moe}-bf16, tools/golden/make_moe_golden.py: f32 compute on the stored bf16 weights; every
// router's top-k vs (k+1)-th logit gap >= 2.1e-3, MANIFEST_moe.json), with the cuda_reference
// attention backend and f32 KV pages in device memory.
//
// Tolerances (those of the bf16 CUDA model tests, cuda_model_test.cc):
//   kBf16Tolerance  = 2e-2  relative error of a logits row vs HF, max_i |ours - HF| / max_i |HF|
//   kBatchTolerance = 1e-4  a prompt alone vs inside a ragged batch (the dense products take other
//                           cuBLAS kernels at other row counts; the expert kernels are batch-invariant
//                           within a path: steps of <= kMoeFusedMaxRows rows run the small-step path's
//                           f32 FMA products, larger ones the tensor cores' split products, which
//                           differ by ~2^-16 of a product's magnitude)
//   kCpuTolerance   = 2e-3  CUDA vs Spindle's CPU path on the same prompt: both compute f32
//                           activations against the bf16 weights; CUDA's dense products split the
//                           activations into two bf16 parts (~16 significant bits; <= 2.2e-5 on the
//                           dense goldens) and sum in other orders. A wrong routing weight or expert
//                           moves a row by more than 1e-2.
// Greedy: the 32 argmax ids (a prefill, then 31 decode steps) equal HF's, eagerly (ModelStepper),
// through the engine with decode steps replayed from CUDA graphs, and with n-gram speculation
// (verify steps of 1 + 4 tokens per sequence, graphs on).
// Skips (but for the load-error test) when no CUDA device with cc >= 8.0 is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "cuda/cuda_golden_engine.h"
#include "cuda/cuda_skip.h"
#include "engine/spec_harness.h"
#include "model/cuda_model.h"
#include "model/forward_scenarios.h"
#include "model/golden_fixtures.h"
#include "model/model.h"
#include "model/model_loader.h"
#include "util/error.h"

namespace spindle {
namespace {

using testing::GoldenPrompt;
using testing::kPageSize;
using testing::model_dir;
using testing::read_golden;

constexpr double kBf16Tolerance = 2e-2;
constexpr double kBatchTolerance = 1e-4;
constexpr double kCpuTolerance = 2e-3;

std::string case_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class CudaMoeModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_CUDA_DEVICE();
    golden_ = read_golden(GetParam());
    ASSERT_EQ(golden_.size(), 4u);
    model_ = std::make_unique<testing::ModelStepper>(load_cuda_model(model_dir(GetParam())));
    ASSERT_TRUE(model_->config().moe.enabled());
    backend_ = attn::create_attention_backend("cuda_reference", model_->attention_shape(DType::kF32, kPageSize), {});
    model_->set_attention_backends(backend_.get(), backend_.get());
  }

  std::unique_ptr<testing::ModelStepper> model_;
  std::unique_ptr<attn::AttentionBackend> backend_;
  std::vector<GoldenPrompt> golden_;
};

TEST_P(CudaMoeModelTest, PrefillLogitsAndGreedyDecodeMatchHuggingFace) {
  testing::expect_golden_prefill_and_greedy(*model_, golden_, kBf16Tolerance,
                                            GetParam() + " on CUDA (" + model_->linear_kernel_name() + ")");
}

TEST_P(CudaMoeModelTest, RaggedBatchMatchesOneAtATime) {
  testing::expect_ragged_batch_matches_one_at_a_time(*model_, golden_, kBf16Tolerance, kBatchTolerance);
}

TEST_P(CudaMoeModelTest, MixedPrefillAndDecodeBatch) {
  testing::expect_mixed_prefill_and_decode(*model_, golden_, kBf16Tolerance, /*rows_out_of_batch_order=*/true);
}

// The same prompts on Spindle's CPU path (reference linear kernels, reference attention).
TEST_P(CudaMoeModelTest, MatchesTheCpuPath) {
  ModelOptions options;
  options.make_linear = kernels::cpu::make_reference_linear_kernel;
  testing::ModelStepper cpu(load_cpu_model(model_dir(GetParam()), options));
  auto cpu_backend = attn::create_attention_backend("reference", cpu.attention_shape(DType::kF32, kPageSize), {});
  cpu.set_attention_backends(cpu_backend.get(), cpu_backend.get());
  double max_error = 0;
  for (const GoldenPrompt& prompt : golden_) {
    const std::vector<float> want = testing::prefill_alone(cpu, prompt, DType::kF32);
    const std::vector<float> got = testing::prefill_alone(*model_, prompt, DType::kF32);
    const double error = testing::relative_error(got, want);
    EXPECT_LE(error, kCpuTolerance) << prompt.text;
    max_error = std::max(max_error, error);
  }
  std::printf("[ cpu      ] %s: CUDA vs CPU max relative error %.3g (tolerance %.0e)\n", GetParam().c_str(),
              max_error, kCpuTolerance);
}

// weight_bytes counts every expert; the workspace (MoE scratch included) grows with the batch.
TEST_P(CudaMoeModelTest, WeightAndWorkspaceBytes) {
  const Checkpoint checkpoint(model_dir(GetParam()));
  uint64_t expected = checkpoint.total_bytes();
  for (const auto& t : checkpoint.tensors()) {
    if (t.name.ends_with(".bias")) expected += t.num_elements() * sizeof(float) - t.num_bytes();
  }
  EXPECT_EQ(model_->weight_bytes(), expected);
  testing::expect_workspace_grows_with_the_batch(*model_, golden_);
}

// Decode steps replayed from CUDA graphs: the routing of each replay is read on the device.
TEST_P(CudaMoeModelTest, GraphReplayedDecodeMatchesHuggingFaceGreedy) {
  const testing::Served served =
      testing::serve_on_cuda(GetParam(), {}, testing::golden_ids(golden_), testing::greedy_params(32));
  EXPECT_GT(served.graphs.replays, 0) << "no decode step replayed a graph";
  testing::expect_golden_greedy(served.tokens, golden_, GetParam() + " with graphs");
}

// Verify steps (1 + 4 tokens per sequence, n-gram drafts) with graphs on: HF's greedy tokens.
TEST_P(CudaMoeModelTest, SpeculativeVerifyStepsMatchHuggingFaceGreedy) {
  testing::SpecRun run = testing::exact_cuda_spec_run();
  run.proposer = "ngram";
  const testing::SpecResult spec = testing::serve_speculative(model_dir(GetParam()), run, testing::golden_ids(golden_),
                                                              {testing::greedy_params(32)});
  EXPECT_TRUE(spec.integrity_ok);
  EXPECT_GT(spec.metrics.spec_total_num_forward_ct, 0u) << "no verify step ran";
  testing::expect_golden_greedy(spec.tokens, golden_, GetParam() + " n-gram speculation");
}

INSTANTIATE_TEST_SUITE_P(Golden, CudaMoeModelTest,
                         ::testing::Values("qwen3-moe-bf16", "mixtral-bf16", "qwen2-moe-bf16"), case_name);

// Quantized experts are refused on CUDA, naming the tensor and its type, before a device is
// touched (so this runs without a GPU): --quantization fp8 turns Qwen3-MoE's expert projections
// into F8_E4M3.
TEST(CudaMoeLoadTest, QuantizedExpertsAreRefusedNamingTheTensor) {
  CudaModelOptions options;
  options.quantize_fp8 = true;
  try {
    load_cuda_model(model_dir("qwen3-moe-bf16"), options);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("model.layers.0.mlp.experts.0.gate_proj.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("F8_E4M3"), std::string::npos) << m;
    EXPECT_NE(m.find("--device cpu"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace spindle
