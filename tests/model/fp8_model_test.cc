// load_cpu_model on FP8 checkpoint folders (model/fp8_config.h, model/fp8_weights.h, CpuOps' FP8
// linear weights through kernels/cpu/fp8_linear.h) against independent truth.
//
// 1. Golden F32 checkpoints written as FP8 folders in the test (golden_fp8.h: 128x128 blocks with
//    weight_scale_inv, per-tensor with a static input_scale, compressed-tensors per channel and per
//    tensor): last prompt logits against a float64 forward (reference_forward.h) over the float64
//    dequantization of the same codes and scales (e4m3 from its definition, tests/support/
//    fp8_reference.h). Only f32 rounding differs (Spindle: each dequantized weight rounded once to
//    f32, f32 products and sums, f32 activations; W8A16, no activation rounding), so
//    kFp8Tolerance = 1e-5 of max|logit| (seen: 5e-7..1.4e-6, printed).
// 2. Negative control: the same codes with every scale written as 1.0 (what a loader that ignored
//    the scales computes) must miss that tolerance (the codes are W / s with s = max|W| / 448, so
//    the weights come out ~10^3-10^4 times too large).
// 3. --quantization fp8 (ModelOptions::quantize_fp8) on the golden F32 folders: the same check
//    against the float64 forward over the per-channel quantization golden_fp8.h writes (the codes
//    and scales as fp8_quantize.h defines them, computed by the test), within kFp8Tolerance.
// 4. Start-up errors name the folder and the tensor: a missing scale, a misshaped scale, an FP8
//    weight without a quantization_config, a scale of no FP8 weight.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "model/forward_scenarios.h"
#include "model/golden_fixtures.h"
#include "model/golden_fp8.h"
#include "model/model.h"
#include "model/model_loader.h"
#include "model/reference_forward.h"
#include "util/error.h"

namespace spindle {
namespace {

constexpr double kFp8Tolerance = 1e-5;

using testing::Fp8Format;
using testing::kPageSize;

ModelOptions quantizing_fp8() {
  ModelOptions o;
  o.quantize_fp8 = true;
  return o;
}

std::unique_ptr<testing::ModelStepper> load_with_best_backend(const std::filesystem::path& path,
                                                              std::vector<std::unique_ptr<attn::AttentionBackend>>& keep,
                                                              const ModelOptions& options = {}) {
  auto model = std::make_unique<testing::ModelStepper>(load_cpu_model(path, options));
  const attn::AttentionShape shape = model->attention_shape(DType::kF32, kPageSize);
  keep.push_back(attn::create_attention_backend(testing::best_cpu_backend(shape), shape, {}));
  model->set_attention_backends(keep.back().get(), keep.back().get());
  return model;
}

// The worst relative error of Spindle's last logits on `dir` against the float64 forward over
// `weights`, over the golden prompts of `model`.
double worst_error(const std::string& model, const std::filesystem::path& dir, const testing::Float64Weights& weights,
                   const ModelOptions& options = {}) {
  std::vector<std::unique_ptr<attn::AttentionBackend>> backends;
  auto m = load_with_best_backend(dir, backends, options);
  const ModelConfig& c = m->config();
  const testing::ReferenceShape shape = testing::reference_shape(c);
  double worst = 0;
  for (const auto& prompt : testing::read_golden(model)) {
    const std::vector<float> ours = testing::prefill_alone(*m, prompt, DType::kF32);
    const std::vector<double> ref = testing::reference_last_logits(shape, weights, prompt.ids);
    const double err = testing::relative_error(ours, std::vector<float>(ref.begin(), ref.end()));
    worst = std::isfinite(err) ? std::max(worst, err) : INFINITY;
  }
  return worst;
}

struct Fp8Case {
  std::string model;
  Fp8Format format;
  const char* label;
};

class Fp8GoldenTest : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8GoldenTest, LogitsMatchFloat64ForwardOverDequantizedWeights) {
  const Fp8Case& fc = GetParam();
  testing::TempDir dir;
  const testing::Float64Weights weights = testing::write_golden_fp8(fc.model, dir.path(), {.format = fc.format});
  const double err = worst_error(fc.model, dir.path(), weights);
  EXPECT_LE(err, kFp8Tolerance);
  std::printf("%s FP8 %s: relative error %.3g against the float64 forward (tolerance %.3g)\n", fc.model.c_str(),
              fc.label, err, kFp8Tolerance);
}

TEST_P(Fp8GoldenTest, NegativeControlScalesIgnoredMissTheTolerance) {
  const Fp8Case& fc = GetParam();
  testing::TempDir dir;
  const testing::Float64Weights weights =
      testing::write_golden_fp8(fc.model, dir.path(), {.format = fc.format, .unit_scales = true});
  const double err = worst_error(fc.model, dir.path(), weights);
  EXPECT_FALSE(err <= kFp8Tolerance) << err;
  std::printf("%s FP8 %s with every scale 1: relative error %.3g\n", fc.model.c_str(), fc.label, err);
}

std::vector<Fp8Case> fp8_cases() {
  std::vector<Fp8Case> cases;
  for (const char* model : {"llama-gqa-f32", "qwen2-tied-f32", "qwen3-qknorm-f32"}) {
    cases.push_back({model, Fp8Format::kFp8Block, "block128"});
    cases.push_back({model, Fp8Format::kFp8Tensor, "per_tensor_static"});
    cases.push_back({model, Fp8Format::kCtChannel, "ct_channel"});
    cases.push_back({model, Fp8Format::kCtTensor, "ct_tensor"});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Golden, Fp8GoldenTest, ::testing::ValuesIn(fp8_cases()), [](const auto& info) {
  std::string n = info.param.model + "_" + info.param.label;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

TEST(Fp8QuantizeAtLoad, LogitsMatchFloat64ForwardOverPerChannelFp8) {
  for (const std::string model : {"llama-gqa-f32", "qwen2-tied-f32", "qwen3-qknorm-f32"}) {
    testing::TempDir dir;  // (only the float64 weights of this folder are used)
    const testing::Float64Weights weights =
        testing::write_golden_fp8(model, dir.path(), {.format = Fp8Format::kCtChannel});
    const double err = worst_error(model, testing::model_dir(model), weights, quantizing_fp8());
    EXPECT_LE(err, kFp8Tolerance) << model;
    std::printf("%s with --quantization fp8: relative error %.3g against the float64 forward\n", model.c_str(), err);
  }
}

std::string load_error(const std::filesystem::path& dir, const ModelOptions& options = {}) {
  try {
    load_cpu_model(dir, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Fp8Errors, MissingScaleNamesTheTensor) {
  testing::TempDir dir;
  const std::string scale = "model.layers.1.mlp.down_proj.weight_scale_inv";
  testing::write_golden_fp8("llama-gqa-f32", dir.path(), {.edit = [&](testing::NamedTensor& t) { return t.name != scale; }});
  const std::string error = load_error(dir.path());
  EXPECT_NE(error.find(dir.path().string()), std::string::npos) << error;
  EXPECT_NE(error.find("missing tensors"), std::string::npos) << error;
  EXPECT_NE(error.find(scale + " [1, 2]"), std::string::npos) << error;
  EXPECT_NE(error.find("FP8 weight model.layers.1.mlp.down_proj.weight"), std::string::npos) << error;
}

TEST(Fp8Errors, QuantizeAtLoadRefusesAnFp8Folder) {
  testing::TempDir dir;
  testing::write_golden_fp8("llama-gqa-f32", dir.path());
  const std::string error = load_error(dir.path(), quantizing_fp8());
  EXPECT_NE(error.find("--quantization fp8 was given, but the checkpoint is FP8 already (fp8)"), std::string::npos)
      << error;
}

TEST(Fp8Errors, MisshapedScaleNamesTheTensor) {
  testing::TempDir dir;
  const std::string scale = "model.layers.0.self_attn.q_proj.weight_scale";
  testing::write_golden_fp8("llama-gqa-f32", dir.path(), {.format = Fp8Format::kCtChannel, .edit = [&](testing::NamedTensor& t) {
    if (t.name == scale) t.shape = {1, t.shape[0]};  // [1, out] instead of [out, 1]
    return true;
  }});
  const std::string error = load_error(dir.path());
  EXPECT_NE(error.find(dir.path().string()), std::string::npos) << error;
  EXPECT_NE(error.find(scale + ": expected [256, 1] (per-channel scale of model.layers.0.self_attn.q_proj.weight"),
            std::string::npos)
      << error;
}

TEST(Fp8Errors, ScaleOfWrongTypeNamesTheTensor) {
  testing::TempDir dir;
  const std::string scale = "model.layers.0.mlp.up_proj.weight_scale";
  testing::write_golden_fp8("llama-gqa-f32", dir.path(), {.format = Fp8Format::kCtTensor, .edit = [&](testing::NamedTensor& t) {
    if (t.name == scale) {
      t.dtype = DType::kI8;
      t.data.resize(1);
    }
    return true;
  }});
  const std::string error = load_error(dir.path());
  EXPECT_NE(error.find(scale + ": I8 (FP8 scales must be F32, BF16 or F16)"), std::string::npos) << error;
}

TEST(Fp8Errors, Fp8WeightWithoutQuantizationConfig) {
  testing::TempDir dir;
  testing::write_golden_fp8("llama-gqa-f32", dir.path());
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir.path() / "config.json"));
  config.erase("quantization_config");
  std::ofstream(dir.path() / "config.json") << config.dump();
  const std::string error = load_error(dir.path());
  EXPECT_NE(error.find("model.layers.0.self_attn.q_proj.weight: F8_E4M3"), std::string::npos) << error;
  EXPECT_NE(error.find("needs an FP8 quantization_config"), std::string::npos) << error;
}

TEST(Fp8Errors, IgnoredModuleStoredAsFp8) {
  testing::TempDir dir;
  testing::write_golden_fp8("llama-gqa-f32", dir.path(), {.format = Fp8Format::kCtChannel});
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir.path() / "config.json"));
  config["quantization_config"]["ignore"] = {"lm_head", "re:.*mlp\\.up_proj"};
  std::ofstream(dir.path() / "config.json") << config.dump();
  const std::string error = load_error(dir.path());
  EXPECT_NE(error.find("model.layers.0.mlp.up_proj.weight: F8_E4M3"), std::string::npos) << error;
  EXPECT_NE(error.find("listed as not converted"), std::string::npos) << error;
}

// X.input_scale (activation_scheme static) travels with its weight's scale (joining compares it:
// model/fp8_join.h); a dynamic checkpoint has none; one of another type is refused naming it.
TEST(Fp8Weights, StaticInputScaleTravelsWithTheWeight) {
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  for (Fp8Format format : {Fp8Format::kFp8Tensor, Fp8Format::kFp8Block}) {
    testing::TempDir dir;
    testing::write_golden_fp8("llama-gqa-f32", dir.path(), {.format = format});
    const nlohmann::json config = nlohmann::json::parse(std::ifstream(dir.path() / "config.json"));
    CheckpointWeights weights(std::make_unique<Checkpoint>(dir.path()), parse_quantization_config(config, "c"));
    const WeightView w = weights.weight(q);
    ASSERT_TRUE(w.scale.has_value());
    if (format == Fp8Format::kFp8Tensor) {
      EXPECT_EQ(w.scale->input_scale, std::optional<float>(0.05f));  // golden_fp8.h writes 0.05
    } else {
      EXPECT_FALSE(w.scale->input_scale.has_value());
    }
  }
}

TEST(Fp8Errors, InputScaleOfWrongTypeNamesTheTensor) {
  testing::TempDir dir;
  const std::string input = "model.layers.0.mlp.up_proj.input_scale";
  testing::write_golden_fp8("llama-gqa-f32", dir.path(), {.format = Fp8Format::kFp8Tensor, .edit = [&](testing::NamedTensor& t) {
    if (t.name == input) {
      t.dtype = DType::kI8;
      t.data.resize(1);
    }
    return true;
  }});
  const std::string error = load_error(dir.path());
  EXPECT_NE(error.find("its input scale " + input + " is I8 []; one F32, BF16 or F16 value expected"),
            std::string::npos) << error;
}

}  // namespace
}  // namespace spindle
