// `spindle plan` end to end on a golden model folder, with memory read from a cgroup fixture
// (hidden --memory-root) so every number is fixed and worked out by hand below.
//
// tests/golden/llama-gqa-f32: H 128, I 256, 2 layers, 4 heads, 1 KV head, head_dim 64, V 1024,
// untied, f32 weights; max_position_embeddings 256.
//   weights  = 4 * (2 * 1024*128 + 2 * (q 256*128 + k 64*128 + v 64*128 + o 128*256 + mlp 3*256*128
//              + norms 2*128) + 128) = 4 * 623232 = 2492928
//   kv/tok   = 2 * 2 * 1 * 64 * 2 (bf16) = 512; page = 512 * 16 = 8192
//   ws       = 2048 * 4 * (3*128 + 2*256 + 2*64 + 2*256 + 1024 = 2560) = 20971520 (estimated)
// tests/fixtures/cgroup/v2: usable = 4 GiB - 1 GiB = 3221225472; reserve = max(256 MiB, 5%) = 268435456
//   budget   = 3221225472 - 2492928 - 20971520 - 268435456 = 2929325568
//   kv       = floor(2929325568 * 0.9) = 2636393011
//   pages    = floor(2636393011 / 8192) = 321825 (5149200 tokens); seq 256 = 16 pages -> 20114
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/spindle_binary.h"

namespace spindle {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kModel = std::string(SPINDLE_FIXTURES_DIR) + "/../golden/llama-gqa-f32";
const std::string kCgroupV2 = std::string(SPINDLE_FIXTURES_DIR) + "/cgroup/v2";

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string out, err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

RunResult run_spindle(const std::string& args) {
  static int counter = 0;
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(counter++);
  const fs::path out = fs::temp_directory_path() / ("spindle_plan_out_" + tag);
  const fs::path err = fs::temp_directory_path() / ("spindle_plan_err_" + tag);
  const std::string cmd = testing::spindle_binary() + " " + args + " > " + out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  RunResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

TEST(PlanCommandTest, JsonBreakdown) {
  const auto start = std::chrono::steady_clock::now();
  const RunResult r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --json");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(seconds, 5.0);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["usable_bytes"], 3221225472u);
  EXPECT_EQ(j["usable_bound"], "cgroup v2 limit minus usage");
  EXPECT_EQ(j["weight_bytes"], 2492928u);
  EXPECT_EQ(j["workspace_bytes_per_rank"], 20971520u);
  EXPECT_EQ(j["workspace_source"], "estimated");
  EXPECT_EQ(j["max_num_batched_tokens"], 2048);
  EXPECT_EQ(j["reserve_bytes"], 268435456u);
  EXPECT_EQ(j["budget_bytes"], 2929325568u);
  EXPECT_EQ(j["kv_budget_bytes_per_rank"], 2636393011u);
  EXPECT_EQ(j["kv_cache_dtype"], "BF16");
  EXPECT_EQ(j["kv_bytes_per_token"], 512);
  EXPECT_EQ(j["page_size"], 16);
  EXPECT_EQ(j["max_total_tokens_source"], "auto");
  EXPECT_EQ(j["max_total_tokens_per_rank"], 5149200);
  EXPECT_EQ(j["num_pages_per_rank"], 321825);
  EXPECT_EQ(j["max_model_len"], 256);
  EXPECT_EQ(j["num_sequences_per_rank"], 20114);
  EXPECT_EQ(j["prefix_cache"], true);
  ASSERT_EQ(j["ranks"].size(), 1u);
}

TEST(PlanCommandTest, DataParallelPerRank) {
  // dp 2: budget = 3221225472 - 2492928 - 2 * 20971520 - 268435456 = 2908354048
  //   kv/rank = floor(2908354048 * 0.9 / 2) = 1308759321; pages = floor(1308759321 / 8192) = 159760
  //   (2556160 tokens); 159760 / 16 = 9985 sequences of 256 per rank.
  const RunResult r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --dp-size 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["budget_bytes"], 2908354048u);
  EXPECT_EQ(j["kv_budget_bytes_per_rank"], 1308759321u);
  EXPECT_EQ(j["num_pages_per_rank"], 159760);
  EXPECT_EQ(j["num_pages"], 319520);
  EXPECT_EQ(j["num_sequences"], 2 * 9985);
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][1]["first_page"], 159760);
  EXPECT_EQ(j["ranks"][1]["max_total_tokens"], 2556160);
}

TEST(PlanCommandTest, TextSaysTheWorkspaceIsEstimated) {
  const RunResult r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 +
                                  " --kv-cache-dtype f32 --max-model-len 128 --max-total-tokens 4096");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("estimated"));
  EXPECT_THAT(r.out, HasSubstr("cgroup v2 limit minus usage"));
  EXPECT_THAT(r.out, HasSubstr("4096  per rank (explicit), 256 pages"));
  EXPECT_THAT(r.out, HasSubstr("sequences of 128 tokens at once: 32 per rank"));  // 256 pages / 8
  EXPECT_THAT(r.out, HasSubstr("F32 KV"));
}

TEST(PlanCommandTest, Errors) {
  RunResult r = run_spindle("plan");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("plan needs a MODEL_DIR"));
  // 5149216 tokens = 321826 pages, one more than fits: 321826 * 8192 = 2636398592 bytes needed.
  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --max-total-tokens 5149216");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("need 2636398592 bytes"));
  EXPECT_THAT(r.err, HasSubstr("leaves 2636393011 bytes"));
  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --max-model-len 257");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("max_position_embeddings 256"));
  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --max-total-tokens lots");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--max-total-tokens must be auto or a positive number"));
}

}  // namespace
}  // namespace spindle
