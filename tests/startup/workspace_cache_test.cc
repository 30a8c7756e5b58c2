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

TEST(WorkspaceCacheTest, SecondProbeIsAnsweredFromTheFile) {
  TempDir dir;
  const std::string key = workspace_cache_key("build-1", "cpu-x", model(), resolved());
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
  const std::string base = workspace_cache_key("build-1", "cpu-x", model(), resolved());
  std::vector<std::pair<std::string, std::string>> keys;
  auto with_model = [&](const char* what, const std::function<void(ModelConfig&)>& edit) {
    ModelConfig m = model();
    edit(m);
    keys.emplace_back(what, workspace_cache_key("build-1", "cpu-x", m, resolved()));
  };
  auto with_config = [&](const char* what, const std::function<void(config::ResolvedConfig&)>& edit) {
    config::ResolvedConfig c = resolved();
    edit(c);
    keys.emplace_back(what, workspace_cache_key("build-1", "cpu-x", model(), c));
  };
  keys.emplace_back("build", workspace_cache_key("build-2", "cpu-x", model(), resolved()));
  keys.emplace_back("fingerprint", workspace_cache_key("build-1", "cpu-y", model(), resolved()));
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
  for (const auto& [what, key] : keys) EXPECT_NE(key, base) << what;
  EXPECT_EQ(workspace_cache_key("build-1", "cpu-x", model(), resolved()), base);
}

}  // namespace
}  // namespace spindle::startup
