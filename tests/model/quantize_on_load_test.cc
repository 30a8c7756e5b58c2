// --quantization q8_0 (ModelOptions::quantization, CpuOps::quantize_parts) against independent truth.
//
// The golden llama-gqa-f32 folder loaded with q8_0 quantizes every linear weight (q/k/v/o,
// gate/up/down, lm_head; hidden 128 and intermediate multiples of 32) and leaves the embedding
// table and norms F32. Truth: the same folder written as a GGUF file whose linear weights are Q8_0
// blocks from the test's own quantizer (tests/model/gguf_quantize.h, written from the format's
// definition) and whose embedding table stays F32 (golden_gguf.h, quantize_embedding = false);
// the float64 dequantization of those blocks drives a float64 forward (reference_forward.h).
// 1. Last logits against that forward, with gguf_model_test.cc's tolerances and reasoning:
//    kQuantTolerance = 1e-1 of max|logit| with unquantized activations (the kernels' per-block int8
//    activation rounding dominates: 2e-2..7e-2 on these models), and kQuantSameActivationsTolerance
//    = 1e-5 against the activations rounded as the kernels round them (only f32 rounding differs;
//    on every prompt where compare_quantized's probes find the rounded forward stable).
// 2. The blocks made at load are byte-identical to the test quantizer's (ggml's reference
//    arithmetic; quantize_q8_0_test.cc checks quantize_row_q8_0 against llama.cpp's own bytes), tensor
//    by tensor; and the logits equal the Q8_0 GGUF file's within kSameWeightsTolerance = 1e-5 (not bit
//    for bit: the F32 folder and F32 GGUF file already differ in the last bits on main, the file's
//    metadata holding eps and the llama3 RoPE factors as f32; measured ~1e-7).
// 3. weight_bytes: the two loads hold the same bytes (repacked Q8_0 linears, F32 table and norms),
//    fewer than the unquantized folder's.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "gguf/quantize_q8_0.h"
#include "model/forward_scenarios.h"
#include "model/golden_fixtures.h"
#include "model/golden_gguf.h"
#include "model/model.h"
#include "model/reference_forward.h"

namespace spindle {
namespace {

constexpr double kQuantTolerance = 1e-1;
constexpr double kQuantSameActivationsTolerance = 1e-5;
constexpr double kSameWeightsTolerance = 1e-5;

using testing::kPageSize;

std::unique_ptr<testing::ModelStepper> load(const std::filesystem::path& path, WeightQuantization quantization,
                                            std::vector<std::unique_ptr<attn::AttentionBackend>>& keep) {
  ModelOptions options;
  options.quantization = quantization;
  auto model = std::make_unique<testing::ModelStepper>(load_cpu_model(path, options));
  const attn::AttentionShape shape = model->attention_shape(DType::kF32, kPageSize);
  keep.push_back(attn::create_attention_backend(testing::best_cpu_backend(shape), shape, {}));
  model->set_attention_backends(keep.back().get(), keep.back().get());
  return model;
}

TEST(QuantizeOnLoad, Q8_0FolderMatchesFloat64ForwardAndTheQ8_0GgufFile) {
  const std::string golden = "llama-gqa-f32";
  testing::TempDir dir;
  const auto gguf_path = dir.path() / "model.gguf";
  const testing::Float64Weights weights =
      testing::write_golden_gguf(golden, gguf_path, {.type = gguf::GgmlType::kQ8_0, .quantize_embedding = false});
  std::vector<std::unique_ptr<attn::AttentionBackend>> backends;
  auto model = load(testing::model_dir(golden), WeightQuantization::kQ8_0, backends);
  auto from_gguf = load(gguf_path, WeightQuantization::kNone, backends);
  const ModelConfig& c = model->config();
  double worst_gguf = 0;
  const testing::QuantizedComparison q = testing::compare_quantized(
      testing::reference_shape(c), weights, testing::read_golden(golden),
      [&](const testing::GoldenPrompt& prompt) {
        std::vector<float> ours = testing::prefill_alone(*model, prompt, DType::kF32);
        const double err_gguf = testing::relative_error(ours, testing::prefill_alone(*from_gguf, prompt, DType::kF32));
        EXPECT_LE(err_gguf, kSameWeightsTolerance) << prompt.text;
        worst_gguf = std::max(worst_gguf, err_gguf);
        return ours;
      },
      kQuantTolerance, kQuantSameActivationsTolerance);
  std::printf("%s --quantization q8_0 (%s linear): relative error %.3g against f64 activations (tolerance %.3g); "
              "against the same int8-rounded activations %d of %d prompts within %.3g (worst %.3g; %d stable); against the Q8_0 "
              "GGUF file %.3g\n",
              golden.c_str(), model->linear_kernel_name(), q.worst, kQuantTolerance, q.within_same_activations,
              q.prompts, kQuantSameActivationsTolerance, q.worst_same_activations, q.stable, worst_gguf);
  EXPECT_EQ(model->weight_bytes(), from_gguf->weight_bytes());
  auto plain = load(testing::model_dir(golden), WeightQuantization::kNone, backends);
  EXPECT_LT(model->weight_bytes(), plain->weight_bytes());
}

// Every linear weight's Q8_0 blocks as quantize_row_q8_0 makes them at load equal the test
// quantizer's, which wrote the GGUF file above (so the two loads read the same blocks).
TEST(QuantizeOnLoad, BlocksEqualTheGgufWritersBlocks) {
  const Checkpoint checkpoint(testing::model_dir("llama-gqa-f32"));
  int checked = 0;
  for (const TensorInfo& info : checkpoint.tensors()) {
    if (info.shape.size() != 2 || info.name == "model.embed_tokens.weight") continue;
    const auto* f = reinterpret_cast<const float*>(checkpoint.tensor(info.name).bytes.data());
    const std::span<const float> values(f, static_cast<size_t>(info.num_elements()));
    std::vector<std::byte> ours(static_cast<size_t>(gguf::q8_0_bytes(static_cast<int64_t>(values.size()))));
    gguf::quantize_row_q8_0(values, ours);
    const std::vector<uint8_t> theirs = testing::quantize_row(gguf::GgmlType::kQ8_0, values);
    ASSERT_EQ(ours.size(), theirs.size()) << info.name;
    EXPECT_EQ(std::memcmp(ours.data(), theirs.data(), ours.size()), 0) << info.name;
    ++checked;
  }
  EXPECT_EQ(checked, 2 * 7 + 1);  // 2 layers x q/k/v/o/gate/up/down, lm_head
}

// Negative control: without --quantization the folder computes the F32 weights, which the
// same-activation Q8_0 reference must not match (so the comparison above can fail).
TEST(QuantizeOnLoad, UnquantizedFolderMissesTheQ8_0Reference) {
  const std::string golden = "llama-gqa-f32";
  testing::TempDir dir;
  const testing::Float64Weights weights = testing::write_golden_gguf(
      golden, dir.path() / "model.gguf", {.type = gguf::GgmlType::kQ8_0, .quantize_embedding = false});
  std::vector<std::unique_ptr<attn::AttentionBackend>> backends;
  auto plain = load(testing::model_dir(golden), WeightQuantization::kNone, backends);
  const ModelConfig& c = plain->config();
  testing::ReferenceShape shape = testing::reference_shape(c);
  shape.quantize_activations = true;
  const auto prompt = testing::read_golden(golden).front();
  const std::vector<double> ref_q = testing::reference_last_logits(shape, weights, prompt.ids);
  EXPECT_GT(testing::relative_error(testing::prefill_alone(*plain, prompt, DType::kF32),
                                    std::vector<float>(ref_q.begin(), ref_q.end())),
            kQuantSameActivationsTolerance * 10);
}

}  // namespace
}  // namespace spindle
