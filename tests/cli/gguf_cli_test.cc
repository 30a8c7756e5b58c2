// `spindle generate / plan / info` on a GGUF file with nothing beside it: models/kjv-tiny written as
// one GGUF file (tests/support/kjv_gguf.h: its bf16 weights as BF16, or widened exactly to F32; its
// tokenizer and chat template in the metadata). Truth: the same command on the Hugging Face folder
// (whose greedy text is pinned against HF transformers by tests/model's golden fixtures). The
// weights are the same numbers, the tokenizer the same vocabulary, merges and split regex, so the
// greedy text must be identical byte for byte.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/kjv_gguf.h"
#include "support/run_spindle.h"
#include "util/mapped_file.h"

namespace spindle {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using testing::kGreedyGenerateArgs;
using testing::kKjvTinyDir;
using testing::RunResult;
using testing::run_spindle;

class GgufFile : public ::testing::Test {
 protected:
  fs::path write(bool f32) {
    dir_ = fs::temp_directory_path() / ("spindle_gguf_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const fs::path path = dir_ / (f32 ? "kjv-tiny-f32.gguf" : "kjv-tiny-bf16.gguf");
    testing::write_kjv_tiny_gguf(kKjvTinyDir, path, f32);
    return path;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(GgufFile, GenerateEqualsTheFolderForBf16AndF32) {
  const RunResult folder = run_spindle("generate " + kKjvTinyDir.string() + kGreedyGenerateArgs);
  ASSERT_EQ(folder.exit_code, 0) << folder.err;
  for (const bool f32 : {false, true}) {
    const fs::path path = write(f32);
    const RunResult gguf = run_spindle("generate " + path.string() + kGreedyGenerateArgs);
    ASSERT_EQ(gguf.exit_code, 0) << gguf.err;
    EXPECT_EQ(gguf.out, folder.out) << (f32 ? "F32" : "BF16");
  }
  EXPECT_GT(folder.out.size(), 60u) << folder.out;
}

// info lists the file's tensors by type (kjv-tiny: 14,162,304 parameters, the 2-D ones BF16 and
// the 17 norms of 384 F32 = 25.5 KiB); plan loads it and plans the KV cache.
TEST_F(GgufFile, PlanAndInfoReadTheFile) {
  const fs::path path = write(false);
  const RunResult info = run_spindle("info " + path.string());
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("Architecture  LlamaForCausalLM"));
  EXPECT_THAT(info.out, HasSubstr("Parameters    14162304"));
  EXPECT_THAT(info.out, HasSubstr("F32 25.50 KiB"));
  const RunResult plan = run_spindle("plan " + path.string() + " --threads 1");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_THAT(plan.out, HasSubstr("max total tokens"));
}

TEST_F(GgufFile, CudaIsAStartUpError) {
  const fs::path path = write(false);
  const RunResult r = run_spindle("generate " + path.string() + " -p x -n 1 --device cuda:0");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(path.string()));
}

}  // namespace
}  // namespace spindle
