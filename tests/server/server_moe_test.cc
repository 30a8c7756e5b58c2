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

#include "model/golden_fixtures.h"
#include "server_checks.h"
#include "spindle_server.h"
#include "tokenizer/tokenizer.h"

namespace spindle::testing {
namespace {

using nlohmann::json;

std::string complete(httplib::Client& client, const GoldenPrompt& g) {
  const JsonReply r = post(client, "/v1/completions",
                           json{{"prompt", g.ids}, {"max_tokens", g.greedy.size()}, {"temperature", 0},
                                {"ignore_eos", true}});
  EXPECT_EQ(r.status, 200) << r.body;
  return r.status == 200 ? r.json["choices"][0].value("text", "") : "";
}

class ServerMoeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ServerMoeTest, GreedyOverHttpIsHuggingFacesAloneAndBatched) {
  const std::string model = GetParam();
  const std::filesystem::path dir = kGoldenDir / model;
  const std::vector<GoldenPrompt> golden = read_golden(model);
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(dir);
  std::vector<std::string> hf;  // HF's continuation as the server writes it
  for (const GoldenPrompt& g : golden) {
    std::vector<TokenId> all = g.ids;
    all.insert(all.end(), g.greedy.begin(), g.greedy.end());
    const std::string prompt = tok.decode(g.ids), full = tok.decode(all);
    ASSERT_EQ(full.compare(0, prompt.size(), prompt), 0) << model << ": the prompt's text is not a prefix";
    hf.push_back(full.substr(prompt.size()));
  }
  std::string error;
  auto server = SpindleServer::start(
      {dir.string(), "--matmul-precision", "exact", "--kv-cache-dtype", "f32", "--max-total-tokens", "4096"}, &error);
  ASSERT_NE(server, nullptr) << error;
  auto client = server->client();
  for (size_t i = 0; i < golden.size(); ++i) EXPECT_EQ(complete(*client, golden[i]), hf[i]) << model << " prompt " << i;
  EXPECT_TRUE(kv_settled(*client));

  std::vector<std::string> batched(golden.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < golden.size(); ++i) {
    threads.emplace_back([&, i] { batched[i] = complete(*server->client(), golden[i]); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < golden.size(); ++i) EXPECT_EQ(batched[i], hf[i]) << model << " prompt " << i << " (batched)";
  EXPECT_TRUE(kv_settled(*client));
  const JsonReply models = get(*client, "/v1/models");
  EXPECT_EQ(models.status, 200);
}

INSTANTIATE_TEST_SUITE_P(Golden, ServerMoeTest, ::testing::Values("qwen3-moe-bf16", "mixtral-bf16", "qwen2-moe-bf16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace spindle::testing
