// The real `spindle serve` (CPU) serving the mixture-of-experts goldens (Qwen3-MoE, Mixtral,
// Qwen2-MoE; tests/golden/*, HF transformers 5.17): the four golden prompts (sent as token ids)
// greedy-complete to Hugging Face's continuation, one request at a time and all four at once
// (batched steps route several rows to the experts together). --matmul-precision exact and an f32
// KV cache keep the goldens' f32 compute; the KV pages settle after each phase.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "golden_server.h"
#include "server_checks.h"

namespace spindle::testing {
namespace {

class ServerMoeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ServerMoeTest, GreedyOverHttpIsHuggingFacesAloneAndBatched) {
  const std::string model = GetParam();
  const std::filesystem::path dir = kGoldenDir / model;
  const std::vector<GoldenPrompt> golden = read_golden(model);
  const std::vector<std::string> hf = hf_continuations(model, golden);
  std::string error;
  auto server = SpindleServer::start(golden_serve_args(dir), &error);
  ASSERT_NE(server, nullptr) << error;
  auto client = server->client();
  for (size_t i = 0; i < golden.size(); ++i) {
    EXPECT_EQ(greedy_golden_completion(*client, golden[i], model), hf[i]) << model << " prompt " << i;
  }
  EXPECT_TRUE(kv_settled(*client));

  std::vector<std::string> batched(golden.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < golden.size(); ++i) {
    threads.emplace_back([&, i] { batched[i] = greedy_golden_completion(*server->client(), golden[i], model); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < golden.size(); ++i) EXPECT_EQ(batched[i], hf[i]) << model << " prompt " << i << " (batched)";
  EXPECT_TRUE(kv_settled(*client));
  const JsonReply models = get(*client, "/v1/models");
  EXPECT_EQ(models.status, 200);
}

INSTANTIATE_TEST_SUITE_P(Golden, ServerMoeTest, ::testing::Values("qwen3-moe-bf16", "mixtral-bf16", "qwen2-moe-bf16"),
                         golden_model_test_name);

}  // namespace
}  // namespace spindle::testing
