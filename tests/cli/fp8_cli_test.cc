// `--quantization fp8` through the command line (config/server_config.h, model/fp8_quantize.h):
// generate on models/kjv-tiny quantized at load runs to the end with text, and equals, byte for
// byte, generate on a folder the test writes with the same per-channel FP8 codes and scales (made
// here from util/fp8.h's encoder, the definition-checked one: s[o] = max|W[o]| / 448, codes
// float_to_fp8_e4m3(W / s)), served as a compressed-tensors checkpoint; a value other than none /
// fp8 is refused naming the flag.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "support/run_spindle.h"
#include "util/fp8.h"
#include "util/half.h"
#include "util/mapped_file.h"

namespace spindle {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using testing::kGreedyGenerateArgs;
using testing::kKjvTinyDir;
using testing::RunResult;
using testing::run_spindle;

// kjv-tiny with every *_proj.weight as per-channel FP8 (compressed-tensors), the rest as stored.
void write_fp8_kjv(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(kKjvTinyDir)) {
    if (entry.path().extension() != ".safetensors") fs::copy(entry.path(), dir / entry.path().filename());
  }
  nlohmann::json config = nlohmann::json::parse(std::ifstream(kKjvTinyDir / "config.json"));
  const nlohmann::json weights = {{"type", "float"}, {"num_bits", 8}, {"symmetric", true}, {"dynamic", false},
                                  {"strategy", "channel"}};
  config["quantization_config"] = {{"quant_method", "compressed-tensors"}, {"format", "float-quantized"},
                                   {"ignore", {"lm_head"}},
                                   {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}}};
  std::ofstream(dir / "config.json", std::ios::trunc) << config.dump(2);
  const Checkpoint checkpoint(kKjvTinyDir);
  std::vector<testing::NamedTensor> tensors;
  for (const TensorInfo& info : checkpoint.tensors()) {
    const TensorView view = checkpoint.tensor(info.name);
    if (!info.name.ends_with("_proj.weight")) {
      tensors.push_back({info.name, info.dtype, info.shape, {view.bytes.begin(), view.bytes.end()}});
      continue;
    }
    ASSERT_EQ(info.dtype, DType::kBF16) << info.name;
    const int64_t out = info.shape[0], in = info.shape[1];
    auto w = [&](int64_t o, int64_t i) {
      uint16_t b;
      std::memcpy(&b, view.bytes.data() + 2 * (o * in + i), 2);
      return bf16_bits_to_float(b);
    };
    testing::NamedTensor codes{info.name, DType::kF8E4M3, info.shape, std::vector<std::byte>(static_cast<size_t>(out * in))};
    std::vector<float> scales(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      float m = 0;
      for (int64_t i = 0; i < in; ++i) m = std::max(m, std::abs(w(o, i)));
      const float s = m == 0 ? 1.0f : m / kFp8E4m3Max;
      scales[static_cast<size_t>(o)] = s;
      for (int64_t i = 0; i < in; ++i) codes.data[static_cast<size_t>(o * in + i)] = std::byte{float_to_fp8_e4m3(w(o, i) / s)};
    }
    tensors.push_back(std::move(codes));
    testing::NamedTensor scale{info.name.substr(0, info.name.size() - 6) + "weight_scale", DType::kF32, {out, 1}, {}};
    scale.data.resize(scales.size() * 4);
    std::memcpy(scale.data.data(), scales.data(), scale.data.size());
    tensors.push_back(std::move(scale));
  }
  testing::write_safetensors(dir / "model.safetensors", tensors);
}

TEST(Fp8Cli, QuantizeAtLoadGeneratesWhatTheSameFp8FolderGenerates) {
  testing::TempDir dir;
  write_fp8_kjv(dir.path());
  const RunResult at_load = run_spindle("generate " + kKjvTinyDir.string() + " --quantization fp8" + kGreedyGenerateArgs);
  ASSERT_EQ(at_load.exit_code, 0) << at_load.err;
  const RunResult folder = run_spindle("generate " + dir.path().string() + kGreedyGenerateArgs);
  ASSERT_EQ(folder.exit_code, 0) << folder.err;
  EXPECT_EQ(at_load.out, folder.out);
  EXPECT_GT(at_load.out.size(), 60u) << at_load.out;
}

TEST(Fp8Cli, OtherQuantizationValuesAreRefused) {
  const RunResult r = run_spindle("generate " + kKjvTinyDir.string() + " --quantization int4" + kGreedyGenerateArgs);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--quantization"));
}

}  // namespace
}  // namespace spindle
