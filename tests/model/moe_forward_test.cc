// Mixtures of experts (Qwen3-MoE, Mixtral, Qwen2-MoE) on the CPU against Hugging Face
// transformers 5.17 golden fixtures (tests/golden/{qwen3-moe,mixtral,qwen2-moe}-bf16, made by
// tools/golden/make_moe_golden.py: f32 compute on the stored bf16 weights; every router's top-2 vs
// 3rd logit gap in those runs >= 1e-3, MANIFEST_moe.json, so rounding cannot change a routing).
//
// Tolerances (those of the dense goldens, model_forward_test.cc):
//   kBf16Tolerance  = 2e-2  relative error of a logits row, max_i |ours - HF| / max_i |HF|
//   kBatchTolerance = 1e-4  a prompt alone vs inside a ragged batch (experts see other row counts)
// Greedy: the 32 argmax ids (a prefill, then 31 decode steps through the KV cache) equal HF's.
// Every model runs twice: the float64 reference linear kernels with "reference" attention, and
// make_linear_kernel's choice with the best CPU attention backend here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "forward_scenarios.h"
#include "golden_fixtures.h"
#include "model/model.h"
#include "model/model_loader.h"
#include "model/safetensors.h"
#include "model/weight_map.h"
#include "safetensors_writer.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace spindle {
namespace {

constexpr double kBf16Tolerance = 2e-2;
constexpr double kBatchTolerance = 1e-4;

using testing::GoldenPrompt;
using testing::kPageSize;
using testing::model_dir;
using testing::read_golden;

const char* const kMoeModels[] = {"qwen3-moe-bf16", "mixtral-bf16", "qwen2-moe-bf16"};

struct Case {
  std::string model;
  bool best_backend;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << (c.best_backend ? " best" : " reference"); }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.model + (info.param.best_backend ? "_best" : "_reference");
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// The model at `dir` with its attention backends set (f32 KV pages), held with the backend.
struct Loaded {
  std::unique_ptr<testing::ModelStepper> model;
  std::unique_ptr<attn::AttentionBackend> backend;
  std::string label;
};

// label_name: the model's name in the printed label (default: the folder's).
Loaded load(const std::filesystem::path& dir, bool best, const std::string& label_name = "") {
  ModelOptions options;
  if (!best) options.make_linear = kernels::cpu::make_reference_linear_kernel;
  Loaded l;
  l.model = std::make_unique<testing::ModelStepper>(load_cpu_model(dir, options));
  const attn::AttentionShape shape = l.model->attention_shape(DType::kF32, kPageSize);
  const std::string name = best ? testing::best_cpu_backend(shape) : "reference";
  l.backend = attn::create_attention_backend(name, shape, {});
  l.model->set_attention_backends(l.backend.get(), l.backend.get());
  l.label = (label_name.empty() ? dir.filename().string() : label_name) + " with " + name + " attention, " + l.model->linear_kernel_name() + " linear";
  return l;
}

class MoeForwardTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    loaded_ = load(model_dir(GetParam().model), GetParam().best_backend);
    golden_ = read_golden(GetParam().model);
    ASSERT_EQ(golden_.size(), 4u);
  }
  testing::ModelStepper& model() { return *loaded_.model; }

  Loaded loaded_;
  std::vector<GoldenPrompt> golden_;
};

TEST_P(MoeForwardTest, PrefillLogitsAndGreedyDecodeMatchHuggingFace) {
  testing::expect_golden_prefill_and_greedy(model(), golden_, kBf16Tolerance, loaded_.label);
}

TEST_P(MoeForwardTest, RaggedBatchMatchesOneAtATime) {
  testing::expect_ragged_batch_matches_one_at_a_time(model(), golden_, kBf16Tolerance, kBatchTolerance);
}

TEST_P(MoeForwardTest, MixedPrefillAndDecodeBatch) {
  testing::expect_mixed_prefill_and_decode(model(), golden_, kBf16Tolerance, /*rows_out_of_batch_order=*/true);
}

// weight_bytes counts every tensor (routers, all experts, shared experts) plus the f32 bias copies.
TEST_P(MoeForwardTest, WeightBytesCountEveryExpert) {
  const ModelConfig& c = model().config();
  const Checkpoint checkpoint(model_dir(GetParam().model));
  const uint64_t bias_bytes =
      c.attention_bias ? uint64_t(c.num_hidden_layers) * (c.q_size() + 2 * c.kv_size()) * 4 : 0;
  EXPECT_EQ(model().weight_bytes(), checkpoint.total_bytes() + bias_bytes);
  testing::expect_workspace_grows_with_the_batch(model(), golden_);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const char* model : kMoeModels) {
    for (const bool best : {false, true}) cases.push_back({model, best});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Golden, MoeForwardTest, ::testing::ValuesIn(all_cases()), case_name);

// Copies golden `model` into dir with its experts in transformers 5's fused 3-D layout:
// mlp.experts.gate_up_proj [E, 2F, H] (expert e: its gate rows, then its up rows) and
// mlp.experts.down_proj [E, H, F]; Mixtral's block_sparse_moe.gate becomes mlp.gate.
void write_fused_layout(const std::string& model, const std::filesystem::path& dir) {
  std::filesystem::copy_file(model_dir(model) / "config.json", dir / "config.json");
  const ModelConfig c = load_model_config(model_dir(model));
  const Checkpoint checkpoint(model_dir(model));
  std::vector<testing::NamedTensor> out;
  std::vector<std::string> moved;
  auto bytes_of = [&](const std::string& name) {
    const TensorView v = checkpoint.tensor(name);
    moved.push_back(name);
    return std::vector<std::byte>(v.bytes.begin(), v.bytes.end());
  };
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    if (!c.is_moe_layer(layer)) continue;
    const MoeLayerNames per = moe_layer_names(c, ExpertLayout::kPerExpert, layer);
    const MoeLayerNames fused = moe_layer_names(c, ExpertLayout::kFused3d, layer);
    const int64_t e = c.moe.num_experts, f = c.moe.moe_intermediate_size, h = c.hidden_size;
    const DType dtype = checkpoint.find(per.router)->dtype;
    testing::NamedTensor gate_up{fused.gate_up, dtype, {e, 2 * f, h}, {}};
    testing::NamedTensor down{fused.down, dtype, {e, h, f}, {}};
    for (int x = 0; x < e; ++x) {
      for (const auto& name : {per.expert_gate(x), per.expert_up(x)}) {
        const auto b = bytes_of(name);
        gate_up.data.insert(gate_up.data.end(), b.begin(), b.end());
      }
      const auto b = bytes_of(per.expert_down(x));
      down.data.insert(down.data.end(), b.begin(), b.end());
    }
    out.push_back({fused.router, dtype, {e, h}, bytes_of(per.router)});
    out.push_back(std::move(gate_up));
    out.push_back(std::move(down));
  }
  for (const auto& info : checkpoint.tensors()) {
    if (std::find(moved.begin(), moved.end(), info.name) != moved.end()) continue;
    const TensorView v = checkpoint.tensor(info.name);
    out.push_back({info.name, info.dtype, info.shape, {v.bytes.begin(), v.bytes.end()}});
  }
  testing::write_safetensors(dir / "model.safetensors", out);
}

// The same weights in the fused 3-D layout compute what HF computed (the goldens were saved
// per-expert, MANIFEST_moe.json: fused_3d false).
TEST(MoeLayoutTest, Fused3dLayoutMatchesHuggingFace) {
  for (const char* name : kMoeModels) {
    SCOPED_TRACE(name);
    testing::TempDir dir;
    write_fused_layout(name, dir.path());
    ASSERT_EQ(detect_expert_layout(Checkpoint(dir.path()).tensors()), ExpertLayout::kFused3d);
    Loaded l = load(dir.path(), /*best=*/true, name);
    EXPECT_EQ(l.model->weight_bytes(), load(model_dir(name), true).model->weight_bytes());
    testing::expect_golden_prefill_and_greedy(*l.model, read_golden(name), kBf16Tolerance, l.label + " (fused 3-D)");
  }
}

// A fused tensor of the wrong shape is named.
TEST(MoeLayoutTest, WrongFusedShapeIsNamed) {
  testing::TempDir dir;
  write_fused_layout("qwen3-moe-bf16", dir.path());
  const ModelConfig c = load_model_config(dir.path());
  auto tensors = Checkpoint(dir.path()).tensors();
  for (auto& t : tensors) {
    if (t.name == "model.layers.2.mlp.experts.down_proj") t.shape = {8, 64, 128};
  }
  const WeightCheck check = compare_weights(c, tensors);
  ASSERT_EQ(check.shape_mismatches.size(), 1u);
  EXPECT_NE(check.shape_mismatches[0].find("model.layers.2.mlp.experts.down_proj: expected [8, 128, 64]"),
            std::string::npos)
      << check.shape_mismatches[0];
}

// A linear kernel that records that it ran (kernels run on pool threads side by side).
class RecordingKernel final : public kernels::cpu::LinearKernel {
 public:
  RecordingKernel(std::unique_ptr<kernels::cpu::LinearKernel> inner, std::set<const void*>* ran, std::mutex* mu)
      : inner_(std::move(inner)), ran_(ran), mu_(mu) {}
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    {
      std::lock_guard lock(*mu_);
      ran_->insert(this);
    }
    inner_->forward(x, m, y, pool, bias);
  }
  const char* name() const override { return inner_->name(); }

 private:
  std::unique_ptr<kernels::cpu::LinearKernel> inner_;
  std::set<const void*>* ran_;
  std::mutex* mu_;
};

// At batch 1 only the top_k experts of each sparse layer run (and so only their weights are
// read): a one-token step runs the attention products, the dense MLPs, per sparse layer the router,
// top_k experts (gate/up joined + down) and the shared expert (gate/up, down, gate), and the LM head.
TEST(MoeActiveExperts, BatchOneRunsOnlyTheTopKExperts) {
  for (const char* name : kMoeModels) {
    SCOPED_TRACE(name);
    std::set<const void*> ran;
    std::mutex mu;
    ModelOptions options;
    options.make_linear = [&](const kernels::cpu::LinearWeight& w) -> std::unique_ptr<kernels::cpu::LinearKernel> {
      return std::make_unique<RecordingKernel>(kernels::cpu::make_reference_linear_kernel(w), &ran, &mu);
    };
    testing::ModelStepper model(load_cpu_model(model_dir(name), options));
    auto backend = attn::create_attention_backend("reference", model.attention_shape(DType::kF32, kPageSize), {});
    model.set_attention_backends(backend.get(), backend.get());
    GoldenPrompt one = read_golden(name)[0];
    one.ids.resize(1);
    testing::prefill_alone(model, one, DType::kF32);
    const ModelConfig& c = model.config();
    // gate and up run as one product where they lie back to back in the file (not Mixtral's w1
    // and w3: w2 sits between them in name order).
    const Checkpoint checkpoint(model_dir(name));
    const MoeLayerNames n0 = moe_layer_names(c, ExpertLayout::kPerExpert, 0);
    const bool joined = checkpoint.find(n0.expert_gate(0))->end == checkpoint.find(n0.expert_up(0))->begin;
    const size_t per_expert = joined ? 2 : 3;
    size_t expected = 1;  // the LM head
    for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
      expected += 4;  // q, k, v, o
      if (!c.is_moe_layer(layer)) {
        expected += 2;  // gate/up joined, down
        continue;
      }
      expected += 1 + per_expert * static_cast<size_t>(c.moe.num_experts_per_tok);
      if (c.moe.shared_expert_intermediate_size > 0) expected += 3;
    }
    EXPECT_EQ(ran.size(), expected);
  }
}

// CUDA serves mixtures of experts with BF16, F16 or F32 experts (tests/cuda/cuda_moe_model_test.cc)
// and refuses quantized ones at load, naming the tensor and its type: --quantization fp8 turns
// Qwen3-MoE's expert projections into F8_E4M3. The check runs before any CUDA call, so it holds on
// a machine without a GPU too (a build without CUDA says so instead).
TEST(MoeCuda, QuantizedExpertsRefusedAtLoadNamingTheTensor) {
  LoadOptions options;
  options.device = attn::Device::kCuda;
  options.cpu.quantize_fp8 = true;
  try {
    load_model(model_dir("qwen3-moe-bf16"), options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.message();
    EXPECT_TRUE((m.find("model.layers.0.mlp.experts.0.gate_proj.weight") != std::string::npos &&
                 m.find("F8_E4M3") != std::string::npos) ||
                m.find("built without CUDA") != std::string::npos)
        << m;
  }
}

// The largest relative error of the prompts' last logits for the model at dir.
double max_prefill_error(const std::filesystem::path& dir, const std::vector<GoldenPrompt>& golden) {
  Loaded l = load(dir, /*best=*/false);
  double worst = 0;
  for (const auto& prompt : golden) {
    worst = std::max(worst, testing::relative_error(testing::prefill_alone(*l.model, prompt, DType::kF32),
                                                    prompt.last_logits));
  }
  return worst;
}

// Negative control: the same checkpoint with norm_topk_prob flipped (the routing weights
// renormalized or not) is caught by the golden comparison. (Mixtral has no such field.)
TEST(MoeNegativeControl, FlippedNormTopkProbFailsTheGolden) {
  for (const char* name : {"qwen3-moe-bf16", "qwen2-moe-bf16"}) {
    SCOPED_TRACE(name);
    const auto golden = read_golden(name);
    EXPECT_LE(max_prefill_error(model_dir(name), golden), kBf16Tolerance);
    testing::TempDir dir;
    nlohmann::json config = nlohmann::json::parse(read_text_file(model_dir(name) / "config.json"));
    config["norm_topk_prob"] = !config["norm_topk_prob"].get<bool>();
    std::ofstream(dir.path() / "config.json") << config.dump(2);
    std::filesystem::copy_file(model_dir(name) / "model.safetensors", dir.path() / "model.safetensors");
    const double flipped = max_prefill_error(dir.path(), golden);
    std::printf("[ control  ] %s with norm_topk_prob flipped: max relative error %.3g (tolerance %.0e)\n", name,
                flipped, kBf16Tolerance);
    EXPECT_GT(flipped, kBf16Tolerance);
  }
}

}  // namespace
}  // namespace spindle
