// The on-disk workspace cache: a second start with the same key measures nothing, every field of
// the key that changes the measurement changes the key, and a corrupt or foreign file is ignored.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "startup/workspace_cache.h"

namespace spindle::startup {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("spindle_ws_cache_" + std::to_string(::getpid()));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

ModelConfig model() {
  ModelConfig m;
  m.vocab_size = 128256;
  m.hidden_size = 2048;
  m.intermediate_size = 8192;
  m.num_hidden_layers = 16;
  m.num_attention_heads = 32;
  m.num_key_value_heads = 8;
  m.head_dim = 64;
  m.torch_dtype = DType::kBF16;
  return m;
}

config::ResolvedConfig resolved() {
  config::ResolvedConfig c;
  c.kv.max_num_batched_tokens = 2048;
  c.kv.max_model_len = 4096;
  return c;
}

WorkspaceKeyExtras extras() { return {2'471'000'000, "cpu_avx512", "cpu_avx512"}; }

// A bf16 checkpoint's FP8 copies (compressed-tensors, per channel; lm_head left in bf16).
Fp8Quantization fp8_checkpoint(Fp8ScaleMode mode) {
  Fp8Quantization q;
  q.method = "compressed-tensors";
  q.mode = mode;
  q.scale_suffixes = {"weight_scale"};
  q.ignored = {"lm_head"};
  return q;
}

TEST(WorkspaceCacheTest, SecondProbeIsAnsweredFromTheFile) {
  TempDir dir;
  const std::string key = workspace_cache_key("build-1", "cpu-x", model(), resolved(), extras());
  int num_measured = 0;
  const WorkspaceProbe inner = [&](int tokens) {
    ++num_measured;
    return uint64_t{1000} + uint64_t(tokens);
  };
  bool from_cache = true;
  const WorkspaceCache first(dir.path, key);
  EXPECT_FALSE(fs::exists(first.path()));
  EXPECT_EQ(first.wrap(inner, &from_cache)(2048), 3048u);
  EXPECT_FALSE(from_cache);
  EXPECT_EQ(num_measured, 1);
  EXPECT_TRUE(fs::exists(first.path()));

  const WorkspaceCache second(dir.path, key);  // a new process: same key, same file
  EXPECT_EQ(second.path(), first.path());
  EXPECT_EQ(second.wrap(inner, &from_cache)(2048), 3048u);
  EXPECT_TRUE(from_cache);
  EXPECT_EQ(num_measured, 1);
  // Another token count is measured (and stored in its place).
  EXPECT_EQ(second.wrap(inner, &from_cache)(512), 1512u);
  EXPECT_FALSE(from_cache);
  EXPECT_EQ(num_measured, 2);

  // A corrupt file is measured again and rewritten.
  std::ofstream(first.path(), std::ios::trunc) << "{ not json";
  EXPECT_EQ(second.wrap(inner, &from_cache)(512), 1512u);
  EXPECT_FALSE(from_cache);
  EXPECT_EQ(second.find(512), 1512u);
  // A file holding another key (a hash collision, or a hand-copied file) is not used.
  const WorkspaceCache other(dir.path, key + ";x");
  fs::copy_file(first.path(), other.path(), fs::copy_options::overwrite_existing);
  EXPECT_FALSE(other.find(512).has_value());
}

TEST(WorkspaceCacheTest, EveryInputOfTheMeasurementChangesTheKey) {
  const std::string base = workspace_cache_key("build-1", "cpu-x", model(), resolved(), extras());
  std::vector<std::pair<std::string, std::string>> keys;
  auto with_model = [&](const char* what, const std::function<void(ModelConfig&)>& edit) {
    ModelConfig m = model();
    edit(m);
    keys.emplace_back(what, workspace_cache_key("build-1", "cpu-x", m, resolved(), extras()));
  };
  auto with_config = [&](const char* what, const std::function<void(config::ResolvedConfig&)>& edit) {
    config::ResolvedConfig c = resolved();
    edit(c);
    keys.emplace_back(what, workspace_cache_key("build-1", "cpu-x", model(), c, extras()));
  };
  keys.emplace_back("build", workspace_cache_key("build-2", "cpu-x", model(), resolved(), extras()));
  keys.emplace_back("fingerprint", workspace_cache_key("build-1", "cpu-y", model(), resolved(), extras()));
  with_model("vocab", [](ModelConfig& m) { m.vocab_size = 32000; });
  with_model("hidden", [](ModelConfig& m) { m.hidden_size = 4096; });
  with_model("intermediate", [](ModelConfig& m) { m.intermediate_size = 11008; });
  with_model("layers", [](ModelConfig& m) { m.num_hidden_layers = 32; });
  with_model("heads", [](ModelConfig& m) { m.num_attention_heads = 16; });
  with_model("kv heads", [](ModelConfig& m) { m.num_key_value_heads = 4; });
  with_model("head dim", [](ModelConfig& m) { m.head_dim = 128; });
  with_model("weights dtype", [](ModelConfig& m) { m.torch_dtype = DType::kF32; });
  with_model("tied", [](ModelConfig& m) { m.tie_word_embeddings = true; });
  with_config("batched tokens", [](config::ResolvedConfig& c) { c.kv.max_num_batched_tokens = 4096; });
  with_config("max model len", [](config::ResolvedConfig& c) { c.kv.max_model_len = 1024; });
  with_config("kv dtype", [](config::ResolvedConfig& c) { c.kv_dtype = DType::kF32; });
  with_config("page size", [](config::ResolvedConfig& c) { c.page_size = 32; });
  with_config("bf16 activations", [](config::ResolvedConfig& c) { c.bf16_activations = true; });
  with_config("device", [](config::ResolvedConfig& c) {
    c.device = attn::Device::kCuda;
    c.cuda_device = 0;
  });
  with_model("positions", [](ModelConfig& m) { m.max_position_embeddings = 131072; });
  with_model("moe", [](ModelConfig& m) {
    m.moe.num_experts = 8;
    m.moe.num_experts_per_tok = 2;
    m.moe.moe_intermediate_size = 768;
  });
  with_model("fp8 checkpoint", [](ModelConfig& m) { m.fp8 = fp8_checkpoint(Fp8ScaleMode::kPerChannel); });
  with_config("quantization fp8", [](config::ResolvedConfig& c) { c.quantize_fp8 = true; });
  with_config("quantization q8_0", [](config::ResolvedConfig& c) { c.quantization = WeightQuantization::kQ8_0; });
  with_config("kv dtype fp8_e4m3", [](config::ResolvedConfig& c) { c.kv_dtype = DType::kF8E4M3; });
  with_config("fp8 prefill kernel", [](config::ResolvedConfig& c) { c.fp8_prefill_kernel = "auto"; });
  with_config("cuda graph batch", [](config::ResolvedConfig& c) { c.cuda_graph_max_bs = 64; });
  auto with_extras = [&](const char* what, const std::function<void(WorkspaceKeyExtras&)>& edit) {
    WorkspaceKeyExtras x = extras();
    edit(x);
    keys.emplace_back(what, workspace_cache_key("build-1", "cpu-x", model(), resolved(), x));
  };
  with_extras("weight bytes", [](WorkspaceKeyExtras& x) { x.weight_bytes = 1'310'000'000; });
  with_extras("prefill backend", [](WorkspaceKeyExtras& x) { x.prefill_backend = "cpu_avx2"; });
  with_extras("decode backend", [](WorkspaceKeyExtras& x) { x.decode_backend = "cpu_avx2"; });
  for (const auto& [what, key] : keys) EXPECT_NE(key, base) << what;
  EXPECT_EQ(workspace_cache_key("build-1", "cpu-x", model(), resolved(), extras()), base);
}

// The case that went unnoticed: one bf16 folder served as it is and with --quantization fp8 (or its
// FP8 checkpoint, or an FP8 KV cache) measured into one file, so the second start planned its KV
// cache with the first one's workspace. Each pair differs in that one input only, so each pair
// must name two files (and the FP8 scale modes two files of their own).
TEST(WorkspaceCacheTest, QuantizationAndKvDtypeNameTheirOwnFiles) {
  TempDir dir;
  const std::string bf16_key = workspace_cache_key("build-1", "cpu-x", model(), resolved(), extras());
  const WorkspaceCache bf16(dir.path, bf16_key);
  bf16.store(2048, 123'456'789);
  ASSERT_EQ(bf16.find(2048), 123'456'789u);
  config::ResolvedConfig quantized = resolved();
  quantized.quantize_fp8 = true;
  config::ResolvedConfig fp8_kv = resolved();
  fp8_kv.kv_dtype = DType::kF8E4M3;
  ModelConfig channel = model(), block = model();
  channel.fp8 = fp8_checkpoint(Fp8ScaleMode::kPerChannel);
  block.fp8 = fp8_checkpoint(Fp8ScaleMode::kBlock128);
  const std::vector<std::pair<std::string, std::string>> others = {
      {"--quantization fp8", workspace_cache_key("build-1", "cpu-x", model(), quantized, extras())},
      {"--kv-cache-dtype fp8_e4m3", workspace_cache_key("build-1", "cpu-x", model(), fp8_kv, extras())},
      {"per-channel FP8 checkpoint", workspace_cache_key("build-1", "cpu-x", channel, resolved(), extras())},
      {"block FP8 checkpoint", workspace_cache_key("build-1", "cpu-x", block, resolved(), extras())},
  };
  std::vector<std::string> seen = {bf16_key};
  for (const auto& [what, key] : others) {
    EXPECT_THAT(seen, ::testing::Not(::testing::Contains(key))) << what;
    seen.push_back(key);
    const WorkspaceCache other(dir.path, key);
    EXPECT_NE(other.path(), bf16.path()) << what;
    EXPECT_FALSE(other.find(2048).has_value()) << what << " was answered with the bf16 start's workspace";
  }
}

}  // namespace
}  // namespace spindle::startup
