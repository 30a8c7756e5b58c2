// `spindle plan` end to end on a golden model folder, with memory read from a cgroup fixture
// (hidden --memory-root) so usable memory is fixed.
//
// By default plan measures the workspace with a profiling forward; that number cannot be worked
// out by hand, so those tests check the planner's arithmetic between the JSON fields. With
// --estimate-workspace every number is fixed and worked out by hand below.
//
// tests/golden/llama-gqa-f32: H 128, I 256, 2 layers, 4 heads, 1 KV head, head_dim 64, V 1024,
// untied, f32 weights; max_position_embeddings 256.
//   weights  = 4 * (2 * 1024*128 + 2 * (q 256*128 + k 64*128 + v 64*128 + o 128*256 + mlp 3*256*128
//              + norms 2*128) + 128) = 4 * 623232 = 2492928
//   kv/tok   = 2 * 2 * 1 * 64 * 2 (bf16) = 512; page = 512 * 16 = 8192
//   ws       = 2048 * 4 * (3*128 + 2*256 + 2*64 + 2*256 + 1024 = 2560) = 20971520 (--estimate-workspace)
// tests/fixtures/cgroup/v2: usable = 4 GiB - 1 GiB = 3221225472;
//   reserve  = max(128 MiB, 3221225472 / 50 = 64424509) = 134217728
//   budget   = 3221225472 - 2492928 - 20971520 - 134217728 = 3063543296
//   kv       = floor(3063543296 * 0.9) = floor(2757188966.4) = 2757188966
//   pages    = floor(2757188966 / 8192) = 336570 (5385120 tokens); seq 256 = 16 pages -> 21035
// The CPU caps auto at what the scheduler can use: 256 running x 16 pages = 4096 pages, plus the
// prefix cache's auto budget 4096 / 4 = 1024 pages: 5120 pages (81920 tokens), 320 sequences of 256.
// Tests of the memory bound pass --max-running-requests 100000 (1600000 pages, above the memory).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/run_spindle.h"

namespace spindle {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kModel = std::string(SPINDLE_FIXTURES_DIR) + "/../golden/llama-gqa-f32";
const std::string kCgroupV2 = std::string(SPINDLE_FIXTURES_DIR) + "/cgroup/v2";

using testing::RunResult;
using testing::run_spindle;

constexpr uint64_t kUsable = 3221225472;  // tests/fixtures/cgroup/v2
constexpr uint64_t kWeights = 2492928;
constexpr uint64_t kReserve = 134217728;  // max(128 MiB, 3221225472 / 50)
constexpr uint64_t kBytesPerPage = 8192;

// The planner's relations (capacity_planner.h) between the fields of one plan's JSON.
// weights: the weight bytes subtracted (one copy, or one per rank with huge pages).
void expect_consistent_plan(const nlohmann::json& j, int dp_size, uint64_t weights = kWeights) {
  const uint64_t ws = j["workspace_bytes_per_rank"];
  EXPECT_EQ(j["budget_bytes"].get<uint64_t>(), kUsable - weights - uint64_t(dp_size) * ws - kReserve);
  const uint64_t budget = j["budget_bytes"];
  const uint64_t kv_per_rank = j["kv_budget_bytes_per_rank"];
  EXPECT_EQ(kv_per_rank, budget * 9 / 10 / uint64_t(dp_size));  // mem fraction 0.9, floor
  const uint64_t memory_pages = kv_per_rank / kBytesPerPage;
  EXPECT_EQ(j["memory_max_total_tokens_per_rank"].get<uint64_t>(), memory_pages * 16);
  const uint64_t running = j["max_running_requests"];
  const uint64_t scheduler_pages = running * 16 + running * 16 / 4;  // 256 tokens = 16 pages each, + 1/4
  EXPECT_EQ(j["scheduler_max_total_tokens_per_rank"].get<uint64_t>(), scheduler_pages * 16);
  const uint64_t pages = std::min(memory_pages, scheduler_pages);
  EXPECT_EQ(j["capacity_bound"], pages < memory_pages ? "scheduler" : "memory");
  EXPECT_EQ(j["num_pages_per_rank"].get<uint64_t>(), pages);
  EXPECT_EQ(j["num_pages"].get<uint64_t>(), pages * uint64_t(dp_size));
  EXPECT_EQ(j["max_total_tokens_per_rank"].get<uint64_t>(), pages * 16);
  EXPECT_EQ(j["kv_bytes_per_rank"].get<uint64_t>(), pages * kBytesPerPage);
  EXPECT_EQ(j["num_sequences_per_rank"].get<uint64_t>(), pages / 16);  // 256 tokens = 16 pages
  ASSERT_EQ(j["ranks"].size(), size_t(dp_size));
  for (int r = 0; r < dp_size; ++r) {
    EXPECT_EQ(j["ranks"][r]["first_page"].get<uint64_t>(), uint64_t(r) * pages);
    EXPECT_EQ(j["ranks"][r]["max_total_tokens"].get<uint64_t>(), pages * 16);
  }
}

TEST(PlanCommandTest, JsonBreakdownWithMeasuredWorkspace) {
  const auto start = std::chrono::steady_clock::now();
  const RunResult r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --json");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(seconds, 5.0);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["usable_bytes"], kUsable);
  EXPECT_EQ(j["usable_bound"], "cgroup v2 limit minus usage");
  EXPECT_EQ(j["weight_bytes"], kWeights);
  EXPECT_EQ(j["workspace_source"], "measured");
  EXPECT_EQ(j["max_num_batched_tokens"], 2048);
  // At least the logits of a step of 2048 sequences (2048 * 1024 * 4) plus activations.
  EXPECT_GT(j["workspace_bytes_per_rank"].get<uint64_t>(), 2048u * 1024 * 4);
  EXPECT_EQ(j["reserve_bytes"], kReserve);
  EXPECT_EQ(j["kv_cache_dtype"], "BF16");
  EXPECT_EQ(j["kv_bytes_per_token"], 512);
  EXPECT_EQ(j["page_size"], 16);
  EXPECT_EQ(j["max_total_tokens_source"], "auto");
  EXPECT_EQ(j["max_model_len"], 256);
  EXPECT_EQ(j["prefix_cache"], true);
  expect_consistent_plan(j, 1);
}

TEST(PlanCommandTest, MeasuredWorkspaceGrowsWithTheBatch) {
  const auto small = nlohmann::json::parse(
      run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --max-num-batched-tokens 256 --json").out);
  const auto large = nlohmann::json::parse(
      run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --max-num-batched-tokens 4096 --json").out);
  EXPECT_EQ(small["workspace_source"], "measured");
  EXPECT_EQ(large["workspace_source"], "measured");
  EXPECT_GT(large["workspace_bytes_per_rank"].get<uint64_t>(), 8 * small["workspace_bytes_per_rank"].get<uint64_t>());
  expect_consistent_plan(small, 1);
  expect_consistent_plan(large, 1);
}

TEST(PlanCommandTest, JsonBreakdownWithEstimatedWorkspace) {
  const auto start = std::chrono::steady_clock::now();
  const RunResult r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 +
                                  " --estimate-workspace --max-running-requests 100000 --json");
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
  EXPECT_EQ(j["reserve_bytes"], 134217728u);
  EXPECT_EQ(j["budget_bytes"], 3063543296u);
  EXPECT_EQ(j["kv_budget_bytes_per_rank"], 2757188966u);
  EXPECT_EQ(j["kv_cache_dtype"], "BF16");
  EXPECT_EQ(j["kv_bytes_per_token"], 512);
  EXPECT_EQ(j["page_size"], 16);
  EXPECT_EQ(j["max_total_tokens_source"], "auto");
  EXPECT_EQ(j["max_total_tokens_per_rank"], 5385120);
  EXPECT_EQ(j["num_pages_per_rank"], 336570);
  EXPECT_EQ(j["max_model_len"], 256);
  EXPECT_EQ(j["num_sequences_per_rank"], 21035);
  EXPECT_EQ(j["prefix_cache"], true);
  ASSERT_EQ(j["ranks"].size(), 1u);
  expect_consistent_plan(j, 1);
}

// --kv-cache-dtype fp8_e4m3: one byte per element (layers * 2 * kv_heads * head_dim = 256 elements
// per token on this model, 512 bytes in bf16 above), so twice the pages of the same budget.
TEST(PlanCommandTest, Fp8KvCacheCountsOneBytePerElement) {
  const RunResult r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 +
                                  " --estimate-workspace --max-running-requests 100000 --kv-cache-dtype fp8_e4m3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_cache_dtype"], "F8_E4M3");
  EXPECT_EQ(j["kv_bytes_per_token"], 256);
  EXPECT_EQ(j["bytes_per_page"], 4096);
  EXPECT_EQ(j["kv_budget_bytes_per_rank"], 2757188966u);  // the same budget as bf16's
  EXPECT_EQ(j["num_pages_per_rank"], 2757188966u / 4096);
  const RunResult text = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 +
                                     " --estimate-workspace --kv-cache-dtype fp8_e4m3");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("F8_E4M3 KV"));
  // An unknown KV dtype is refused naming the flag.
  const RunResult bad = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --kv-cache-dtype fp4");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("--kv-cache-dtype 'fp4' is not supported; use auto, bf16, fp16, f32 or fp8_e4m3"));
}

// --quantization fp8 plans the FP8 model serve loads (it planned the f32 weights): each layer's linear
// weights one byte per element plus one f32 scale per output row (per channel), the embeddings, the
// norms and the LM head (left unquantized, as checkpoints list lm_head in ignored_layers) as stored.
// From the golden model's shapes, per layer: elements 256*128 + 2*64*128 + 128*256 + 3*256*128 = 180224,
// rows 256 + 2*64 + 128 + 2*256 + 128 = 1152; so
//   2 * (180224 + 4 * 1152) + 4 * (1024*128 embeddings + 1024*128 LM head + (2*2 + 1) * 128 norms)
//   = 369664 + 1051136 = 1420800 bytes, against kWeights = 2492928 in f32.
TEST(PlanCommandTest, Fp8QuantizationPlansTheQuantizedWeights) {
  const std::string args = " --memory-root " + kCgroupV2 + " --estimate-workspace --max-running-requests 100000 --json";
  const RunResult plain = run_spindle("plan " + kModel + args);
  const RunResult fp8 = run_spindle("plan " + kModel + args + " --quantization fp8");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(fp8.exit_code, 0) << fp8.err;
  EXPECT_EQ(nlohmann::json::parse(plain.out)["weight_bytes"].get<uint64_t>(), kWeights);
  const auto j = nlohmann::json::parse(fp8.out);
  EXPECT_EQ(j["weight_bytes"].get<uint64_t>(), 1420800u) << "--quantization fp8 planned other weights";
  expect_consistent_plan(j, 1, 1420800);
}

TEST(PlanCommandTest, DataParallelPerRank) {
  // Estimated, dp 2: budget = 3221225472 - 2492928 - 2 * 20971520 - 134217728 = 3042571776
  //   kv/rank = floor(3042571776 * 0.9 / 2) = floor(1369157299.2) = 1369157299;
  //   pages = floor(1369157299 / 8192) = 167133 (2674128 tokens), 334266 in the pool;
  //   floor(167133 / 16) = 10445 sequences of 256 per rank.
  RunResult r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 +
                            " --dp-size 2 --estimate-workspace --max-running-requests 100000 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["budget_bytes"], 3042571776u);
  EXPECT_EQ(j["kv_budget_bytes_per_rank"], 1369157299u);
  EXPECT_EQ(j["num_pages_per_rank"], 167133);
  EXPECT_EQ(j["num_pages"], 334266);
  EXPECT_EQ(j["num_sequences"], 2 * 10445);
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][1]["first_page"], 167133);
  EXPECT_EQ(j["ranks"][1]["max_total_tokens"], 2674128);
  expect_consistent_plan(j, 2);

  // --weights-memory huge-pages: each CPU rank holds its own copy of the weights, so they count twice
  // too: budget = 3221225472 - 2 * 2492928 - 2 * 20971520 - 134217728 = 3040078848,
  // kv/rank = floor(3040078848 * 0.9 / 2) = floor(1368035481.6) = 1368035481. (The v2 fixture has no
  // transparent_hugepage file, so auto above mapped the weights.)
  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 +
                  " --dp-size 2 --estimate-workspace --max-running-requests 100000 --weights-memory huge-pages --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["weight_bytes"], 2u * 2492928u);
  EXPECT_EQ(j["budget_bytes"], 3040078848u);
  EXPECT_EQ(j["kv_budget_bytes_per_rank"], 1368035481u);
  expect_consistent_plan(j, 2, 2 * kWeights);

  // Measured: each rank runs its own forward, so the workspace counts twice.
  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --dp-size 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["workspace_source"], "measured");
  expect_consistent_plan(j, 2);
}

TEST(PlanCommandTest, TextSaysHowTheWorkspaceWasObtained) {
  const std::string args = "plan " + kModel + " --memory-root " + kCgroupV2 +
                           " --kv-cache-dtype f32 --max-model-len 128 --max-total-tokens 4096";
  for (const bool estimate : {false, true}) {
    const RunResult r = run_spindle(args + (estimate ? " --estimate-workspace" : ""));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(estimate ? "estimated: f32 activations of one forward at 2048 tokens"
                                          : "measured: profiling step at 2048 tokens (CPU: its scratch reserved, not run)"));
    EXPECT_THAT(r.out, HasSubstr("cgroup v2 limit minus usage"));
    EXPECT_THAT(r.out, HasSubstr("4096  per rank, 256 pages"));
    EXPECT_THAT(r.out, HasSubstr("bound: explicit (--max-total-tokens)"));
    EXPECT_THAT(r.out, HasSubstr("sequences of 128 tokens at once: 32 per rank"));  // 256 pages / 8
    EXPECT_THAT(r.out, HasSubstr("F32 KV"));
  }
}

TEST(PlanCommandTest, CpuAutoIsCappedAtTheScheduler) {
  RunResult r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --estimate-workspace --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["capacity_bound"], "scheduler");
  EXPECT_EQ(j["memory_max_total_tokens_per_rank"], 5385120);
  EXPECT_EQ(j["max_running_requests"], 256);
  EXPECT_EQ(j["running_tokens_per_rank"], 65536);  // 4096 pages
  EXPECT_EQ(j["num_pages_per_rank"], 5120);
  EXPECT_EQ(j["max_total_tokens_per_rank"], 81920);
  EXPECT_EQ(j["num_sequences_per_rank"], 320);
  EXPECT_EQ(j["prefix_cache_pages_per_rank"], 1024);
  EXPECT_EQ(j["prefix_cache_budget_source"], "auto");
  // weights 2492928 + workspace 20971520 + reserve 134217728 + KV 5120 * 8192 = 41943040
  EXPECT_EQ(j["resident_bound_bytes"], 199625216u);
  expect_consistent_plan(j, 1);

  // 8 running x 16 pages + floor(100 / 16) = 6 prefix pages = 134 pages.
  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 +
                  " --estimate-workspace --max-running-requests 8 --prefix-cache-tokens 100 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["num_pages_per_rank"], 134);
  EXPECT_EQ(j["prefix_cache_pages_per_rank"], 6);
  EXPECT_EQ(j["prefix_cache_budget_source"], "explicit");

  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --estimate-workspace --max-running-requests 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("2560  tokens per rank: 8 running x 16 pages of 16 tokens + prefix cache 512 tokens"));
  EXPECT_THAT(r.out, HasSubstr("2560  per rank, 160 pages"));
  EXPECT_THAT(r.out, HasSubstr("bound: scheduler"));
  EXPECT_THAT(r.out, HasSubstr("512  tokens kept per rank (32 pages; auto"));
  EXPECT_THAT(r.out, HasSubstr("resident at most"));

  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 +
                  " --estimate-workspace --prefix-cache-tokens 64 --disable-prefix-cache");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--prefix-cache-tokens 64 was given with --disable-prefix-cache"));
  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --estimate-workspace --prefix-cache-tokens lots");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--prefix-cache-tokens must be auto or a number of tokens >= 0"));
}

TEST(PlanCommandTest, Errors) {
  RunResult r = run_spindle("plan");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("plan needs a MODEL_DIR"));
  // Estimated: 5385136 tokens = 336571 pages, one more than fits: 336571 * 8192 = 2757189632 bytes.
  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --estimate-workspace --max-total-tokens 5385136");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("need 2757189632 bytes"));
  EXPECT_THAT(r.err, HasSubstr("leaves 2757188966 bytes"));
  // Measured: one page more than the memory holds (auto is capped lower, at the scheduler).
  const auto j = nlohmann::json::parse(run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --json").out);
  const uint64_t pages = j["memory_max_total_tokens_per_rank"].get<uint64_t>() / 16 + 1;
  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --max-total-tokens " + std::to_string(pages * 16));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("need " + std::to_string(pages * kBytesPerPage) + " bytes"));
  EXPECT_THAT(r.err, HasSubstr("leaves " + std::to_string(j["kv_budget_bytes_per_rank"].get<uint64_t>()) + " bytes"));
  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --max-model-len 257");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("max_position_embeddings 256"));
  r = run_spindle("plan " + kModel + " --memory-root " + kCgroupV2 + " --max-total-tokens lots");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--max-total-tokens must be auto or a positive number"));
}

}  // namespace
}  // namespace spindle
