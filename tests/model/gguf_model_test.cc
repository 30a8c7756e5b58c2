// load_cpu_model on GGUF files (model/gguf_weights.h, CpuOps' GGUF types) against independent truth.
//
// 1. F32 files converted in the test from the Hugging Face golden checkpoints (golden_gguf.h: the
//    llama q/k rows permuted as llama.cpp's convert_hf_to_gguf.py defines it): prefill logits and
//    32 greedy ids against HF transformers' (tests/golden), at the safetensors tests' tolerance
//    kF32Tolerance = 1e-4 (model_forward_test.cc: f32 rounding order only). Negative control: the
//    same llama file with q/k rows NOT permuted must miss that tolerance by far (> 1e-2).
// 2. Quantized files (every 2-D tensor Q8_0, Q4_0, Q4_K, Q5_K or Q6_K where its rows are whole
//    blocks, else Q8_0; the embedding table and a tied LM head included): last logits against a
//    float64 forward (reference_forward.h) over the float64 dequantization of the same blocks
//    (tests/gguf/ggml_reference.h), twice:
//    a. with unquantized activations: kQuantTolerance = 1e-1 of max|logit|. The int8 kernels round
//       each activation block of 32 to int8 (a step of max|x_b| / 127: each element moves by up to
//       0.4% of its block's largest), which dominates; through 2 layers and the LM head of these
//       small random models that is 2e-2..7e-2 (printed). A wrong scale, nibble or row order is
//       O(1) (the F32 negative control above: 1.5-1.8).
//    b. with the activations rounded as the kernels round them (ReferenceShape::
//       quantize_activations): only f32 rounding differs, ~2e-7, so kQuantSameActivationsTolerance
//       = 1e-5, asserted on every prompt where the rounded forward is stable at f32 precision
//       (compare_quantized's two probes leave it within 1e-5). Elsewhere an int8 rounding sits at
//       a half step, the f32 activations upstream may flip it, and that moves the logits by ~1e-2
//       (the MoE files of gguf_moe_test.cc show it prompt by prompt).
// 3. weight_bytes: the repacked sizes from quant_linear.h's layout (per 16 rows and block: Q8_0 544
//    bytes per 32, Q4_0 288 per 32, Q4_K 2368, Q5_K 2880, Q6_K 3392 per 256), the in-place tables
//    and norms, exactly.
// 4. Errors name the file, the tensor and what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "gguf/gguf_test_writer.h"
#include "model/forward_scenarios.h"
#include "model/golden_fixtures.h"
#include "model/golden_gguf.h"
#include "model/model.h"
#include "model/model_loader.h"
#include "model/reference_forward.h"
#include "util/error.h"

namespace spindle {
namespace {

constexpr double kF32Tolerance = 1e-4;
constexpr double kNegativeControlMinError = 1e-2;
constexpr double kQuantTolerance = 1e-1;
constexpr double kQuantSameActivationsTolerance = 1e-5;

using testing::kPageSize;

std::unique_ptr<testing::ModelStepper> load_with_best_backend(const std::filesystem::path& path,
                                                              std::vector<std::unique_ptr<attn::AttentionBackend>>& keep) {
  auto model = std::make_unique<testing::ModelStepper>(load_cpu_model(path));
  const attn::AttentionShape shape = model->attention_shape(DType::kF32, kPageSize);
  keep.push_back(attn::create_attention_backend(testing::best_cpu_backend(shape), shape, {}));
  model->set_attention_backends(keep.back().get(), keep.back().get());
  return model;
}

class GgufF32Test : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufF32Test, PrefillLogitsAndGreedyDecodeMatchHuggingFace) {
  testing::TempDir dir;
  const auto path = dir.path() / "model.gguf";
  testing::write_golden_gguf(GetParam() + "-f32", path);
  std::vector<std::unique_ptr<attn::AttentionBackend>> backends;
  auto model = load_with_best_backend(path, backends);
  testing::expect_golden_prefill_and_greedy(*model, testing::read_golden(GetParam() + "-f32"), kF32Tolerance,
                                            GetParam() + " GGUF F32, " + model->linear_kernel_name() + " linear");
}

INSTANTIATE_TEST_SUITE_P(Golden, GgufF32Test, ::testing::Values("llama-gqa", "mistral", "qwen2-tied", "qwen3-qknorm"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// The converter's q/k permutation matters: a llama file whose rows were not permuted, un-permuted
// at load all the same, computes something else.
TEST(GgufNegativeControl, UnpermutedQkRowsMissHuggingFace) {
  for (const std::string model : {"llama-gqa", "mistral"}) {
    testing::TempDir dir;
    const auto path = dir.path() / "model.gguf";
    testing::write_golden_gguf(model + "-f32", path, {.permute_qk = false});
    std::vector<std::unique_ptr<attn::AttentionBackend>> backends;
    auto m = load_with_best_backend(path, backends);
    double worst = 0;
    for (const auto& prompt : testing::read_golden(model + "-f32")) {
      const auto logits = testing::prefill_alone(*m, prompt, DType::kF32);
      worst = std::max(worst, testing::relative_error(logits, prompt.last_logits));
    }
    EXPECT_GT(worst, kNegativeControlMinError) << model;
    std::printf("%s without the q/k permutation: relative error %.3g\n", model.c_str(), worst);
  }
}

// --weights-memory huge-pages: a file of plain tensors is copied into huge pages and computes what
// HF computes; a file with block types is mapped instead (its repacked weights are the copies the
// kernels read) and computes what the mapped file computes, bit for bit.
TEST(GgufHugePages, PlainFileCopiedAndQuantizedFileMappedBothCompute) {
  testing::TempDir dir;
  const auto f32 = dir.path() / "f32.gguf", q8 = dir.path() / "q8.gguf";
  testing::write_golden_gguf("qwen3-qknorm-f32", f32);
  testing::write_golden_gguf("qwen3-qknorm-f32", q8, {.type = gguf::GgmlType::kQ4_0});
  ModelOptions huge;
  huge.weights_memory = FileMemory::kHugePageCopy;
  const auto golden = testing::read_golden("qwen3-qknorm-f32");
  std::vector<std::unique_ptr<attn::AttentionBackend>> backends;
  auto with = [&](const std::filesystem::path& path, const ModelOptions& options) {
    auto model = std::make_unique<testing::ModelStepper>(load_cpu_model(path, options));
    const attn::AttentionShape shape = model->attention_shape(DType::kF32, kPageSize);
    backends.push_back(attn::create_attention_backend("reference", shape, {}));
    model->set_attention_backends(backends.back().get(), backends.back().get());
    return testing::prefill_alone(*model, golden[1], DType::kF32);
  };
  EXPECT_LE(testing::relative_error(with(f32, huge), golden[1].last_logits), kF32Tolerance);
  EXPECT_EQ(with(q8, huge), with(q8, {}));
}

// An embedding table in a type read by the lookup's dequantization (Q5_0, Q4_1: gguf::dequantize_row;
// Q4_1 has no linear kernel) and F32 projections: the logits match a float64 forward over the
// reference-decoded table at kF32Tolerance (nothing is rounded but in f32). The table's blocks are
// random: fp16 scales of magnitude in [2^-8, 2^-7), random signs, quants and high bits.
TEST(GgufEmbeddingTable, BlockTypesWithoutLinearKernelsAreLookedUp) {
  for (const gguf::GgmlType type : {gguf::GgmlType::kQ5_0, gguf::GgmlType::kQ4_1}) {
    testing::TempDir dir;
    const auto path = dir.path() / "model.gguf";
    std::vector<uint8_t> table;
    std::mt19937 rng(11);
    testing::Float64Weights weights = testing::write_golden_gguf("llama-gqa-f32", path, {.edit = [&](auto& t) {
      if (t.name != "token_embd.weight") return true;
      const size_t bb = gguf::ggml_block_bytes(type), blocks = t.ne[0] * t.ne[1] / gguf::ggml_block_elements(type);
      t.type = static_cast<uint32_t>(type);
      t.data.resize(blocks * bb);
      for (auto& byte : t.data) byte = static_cast<uint8_t>(rng());
      for (size_t b = 0; b < blocks; ++b) {  // d (and Q4_1's m): fp16 exponent field 7, so |d| in [2^-8, 2^-7)
        t.data[b * bb + 1] = static_cast<uint8_t>((t.data[b * bb + 1] & 0x83) | 0x1c);
        if (type == gguf::GgmlType::kQ4_1) t.data[b * bb + 3] = static_cast<uint8_t>((t.data[b * bb + 3] & 0x83) | 0x1c);
      }
      table = t.data;
      return true;
    }});
    std::vector<double>& values = weights.at("model.embed_tokens.weight");
    const size_t be = gguf::ggml_block_elements(type), bb = gguf::ggml_block_bytes(type);
    for (size_t e = 0; e < values.size(); ++e)
      values[e] = gguf::reference::element(type, table.data() + e / be * bb, static_cast<int>(e % be));
    std::vector<std::unique_ptr<attn::AttentionBackend>> backends;
    auto model = load_with_best_backend(path, backends);
    const ModelConfig& c = model->config();
    const testing::ReferenceShape shape = testing::reference_shape(c);
    for (const auto& prompt : testing::read_golden("llama-gqa-f32")) {
      const std::vector<double> ref = testing::reference_last_logits(shape, weights, prompt.ids);
      EXPECT_LE(testing::relative_error(testing::prefill_alone(*model, prompt, DType::kF32),
                                        std::vector<float>(ref.begin(), ref.end())),
                kF32Tolerance)
          << gguf::ggml_type_name(type) << ": " << prompt.text;
    }
  }
}

// Repacked bytes of a [n, k] weight (quant_linear.h's layout): ceil(n / 16) groups of k / block
// units of the type's bytes per 16 rows.
uint64_t repacked_bytes(gguf::GgmlType type, int64_t n, int64_t k) {
  int64_t block = 32, unit = 0;
  switch (type) {
    case gguf::GgmlType::kQ8_0: unit = 544; break;
    case gguf::GgmlType::kQ4_0: unit = 288; break;
    case gguf::GgmlType::kQ4_K: block = 256, unit = 2368; break;
    case gguf::GgmlType::kQ5_K: block = 256, unit = 2880; break;
    case gguf::GgmlType::kQ6_K: block = 256, unit = 3392; break;
    default: ADD_FAILURE() << "no repacked size for " << gguf::ggml_type_name(type);
  }
  return static_cast<uint64_t>((n + 15) / 16 * (k / block) * unit);
}

// What CpuOps holds for a quantized golden file: norms (F32, in place), the embedding table (in
// place), every projection repacked (gate and up joined: 2I rows), a tied LM head repacked too.
uint64_t expected_weight_bytes(const ModelConfig& c, gguf::GgmlType type) {
  auto t = [&](int64_t k) { return k % gguf::ggml_block_elements(type) == 0 ? type : gguf::GgmlType::kQ8_0; };
  const int64_t h = c.hidden_size, im = c.intermediate_size, q = c.q_size(), kv = c.kv_size();
  uint64_t per_layer = 2 * h * 4 + repacked_bytes(t(h), q, h) + 2 * repacked_bytes(t(h), kv, h) +
                       repacked_bytes(t(q), h, q) + repacked_bytes(t(h), 2 * im, h) + repacked_bytes(t(im), h, im);
  if (c.qk_norm) per_layer += 2 * c.head_dim * 4;
  if (c.attention_bias) per_layer += 2 * (q + 2 * kv) * 4;  // the stored F32 biases and their f32 copies
  const gguf::GgmlType et = t(h);
  const uint64_t table = static_cast<uint64_t>(c.vocab_size) * (h / gguf::ggml_block_elements(et)) * gguf::ggml_block_bytes(et);
  return per_layer * c.num_hidden_layers + h * 4 + table + repacked_bytes(et, c.vocab_size, h);
}

struct QuantCase {
  std::string model;
  gguf::GgmlType type;
};

class GgufQuantTest : public ::testing::TestWithParam<QuantCase> {};

TEST_P(GgufQuantTest, LogitsMatchFloat64ForwardOverDequantizedWeights) {
  const QuantCase& qc = GetParam();
  testing::TempDir dir;
  const auto path = dir.path() / "model.gguf";
  const testing::Float64Weights weights = testing::write_golden_gguf(qc.model + "-f32", path, {.type = qc.type});
  std::vector<std::unique_ptr<attn::AttentionBackend>> backends;
  auto model = load_with_best_backend(path, backends);
  const ModelConfig& c = model->config();
  const testing::QuantizedComparison q = testing::compare_quantized(
      testing::reference_shape(c), weights, testing::read_golden(qc.model + "-f32"),
      [&](const testing::GoldenPrompt& prompt) { return testing::prefill_alone(*model, prompt, DType::kF32); },
      kQuantTolerance, kQuantSameActivationsTolerance);
  std::printf("%s %s (%s linear): relative error %.3g against f64 activations (tolerance %.3g); against the "
              "same int8-rounded activations %d of %d prompts within %.3g (worst %.3g; %d stable under the probes)\n", qc.model.c_str(),
              std::string(gguf::ggml_type_name(qc.type)).c_str(), model->linear_kernel_name(), q.worst, kQuantTolerance,
              q.within_same_activations, q.prompts, kQuantSameActivationsTolerance, q.worst_same_activations, q.stable);
  EXPECT_EQ(model->weight_bytes(), expected_weight_bytes(c, qc.type));
}

std::vector<QuantCase> quant_cases() {
  std::vector<QuantCase> cases;
  for (const char* model : {"llama-gqa", "qwen2-tied", "qwen3-qknorm"})
    for (auto type : {gguf::GgmlType::kQ8_0, gguf::GgmlType::kQ4_0, gguf::GgmlType::kQ4_K, gguf::GgmlType::kQ5_K,
                      gguf::GgmlType::kQ6_K})
      cases.push_back({model, type});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Golden, GgufQuantTest, ::testing::ValuesIn(quant_cases()), [](const auto& info) {
  std::string n = info.param.model + "_" + std::string(gguf::ggml_type_name(info.param.type));
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

// The float64 reference itself agrees with HF on the F32 weights (so the quantized comparison
// measures the quantization, not a reference bug).
TEST(GgufReferenceForward, MatchesHuggingFaceOnF32Weights) {
  for (const std::string model : {"llama-gqa", "qwen2-tied", "qwen3-qknorm"}) {
    testing::TempDir dir;
    const testing::Float64Weights weights = testing::write_golden_gguf(model + "-f32", dir.path() / "m.gguf");
    const ModelConfig c = load_model_config(testing::model_dir(model + "-f32"));
    const testing::ReferenceShape shape = testing::reference_shape(c);
    for (const auto& prompt : testing::read_golden(model + "-f32")) {
      const std::vector<double> ref = testing::reference_last_logits(shape, weights, prompt.ids);
      EXPECT_LE(testing::relative_error(std::vector<float>(ref.begin(), ref.end()), prompt.last_logits), kF32Tolerance)
          << model << ": " << prompt.text;
    }
  }
}

// --- Errors ------------------------------------------------------------------------------------

std::string load_error(const std::filesystem::path& path, attn::Device device = attn::Device::kCpu) {
  try {
    LoadOptions options;
    options.device = device;
    load_model(path, options);
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

// The golden llama-gqa file with one tensor edited.
std::filesystem::path edited(const testing::TempDir& dir, std::function<bool(gguf::testing::TestTensor&)> edit,
                             std::optional<gguf::GgmlType> type = std::nullopt) {
  const auto path = dir.path() / "model.gguf";
  testing::write_golden_gguf("llama-gqa-f32", path, {.type = type, .edit = std::move(edit)});
  return path;
}

TEST(GgufLoadErrors, MissingTensorIsNamed) {
  testing::TempDir dir;
  const auto path = edited(dir, [](auto& t) { return t.name != "blk.1.ffn_up.weight"; });
  const std::string e = load_error(path);
  EXPECT_NE(e.find(path.string()), std::string::npos) << e;
  EXPECT_NE(e.find("blk.1.ffn_up.weight [256, 128]"), std::string::npos) << e;
}

TEST(GgufLoadErrors, MisshapedTensorIsNamed) {
  testing::TempDir dir;
  const auto path = edited(dir, [](auto& t) {
    if (t.name == "blk.0.attn_output.weight") std::swap(t.ne[0], t.ne[1]);  // [128, 256] stored as [256, 128]
    return true;
  });
  const std::string e = load_error(path);
  EXPECT_NE(e.find("blk.0.attn_output.weight: expected [128, 256]"), std::string::npos) << e;
}

TEST(GgufLoadErrors, UnexpectedTensorIsNamed) {
  testing::TempDir dir;
  const auto path = edited(dir, [](auto& t) {
    if (t.name == "blk.0.ffn_gate.weight") t.name = "blk.0.ffn_gate_exps.weight";
    return true;
  });
  const std::string e = load_error(path);
  EXPECT_NE(e.find("blk.0.ffn_gate_exps.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("blk.0.ffn_gate.weight"), std::string::npos) << e;
}

// A type Spindle does not read at all (IQ4_NL), and one it reads but has no CPU linear kernel for
// (Q4_1): each an error naming the type, the tensor and the file.
TEST(GgufLoadErrors, UnsupportedTypesAreNamed) {
  for (const auto [type, expected] : {std::pair{gguf::GgmlType::kIQ4_NL, "blk.1.ffn_down.weight: IQ4_NL"},
                                      std::pair{gguf::GgmlType::kQ4_1, "tensor blk.1.ffn_down.weight is Q4_1"}}) {
    testing::TempDir dir;
    const auto path = edited(dir, [type](auto& t) {
      if (t.name != "blk.1.ffn_down.weight") return true;
      t.type = static_cast<uint32_t>(type);  // zero blocks: valid bytes of the type
      t.data.assign(t.ne[0] * t.ne[1] / gguf::ggml_block_elements(type) * gguf::ggml_block_bytes(type), 0);
      return true;
    });
    const std::string e = load_error(path);
    EXPECT_NE(e.find(path.string()), std::string::npos) << e;
    EXPECT_NE(e.find(expected), std::string::npos) << e;
  }
}

TEST(GgufLoadErrors, CudaIsRefusedAtStart) {
  testing::TempDir dir;
  const auto path = dir.path() / "model.gguf";
  testing::write_golden_gguf("llama-gqa-f32", path);
  const std::string e = load_error(path, attn::Device::kCuda);
  EXPECT_NE(e.find("GGUF files are served on the CPU only"), std::string::npos) << e;
}

}  // namespace
}  // namespace spindle
