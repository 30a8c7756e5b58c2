// The real `spindle serve --device cuda:0` over HTTP (skips without a usable CUDA device, cc >= 8.0):
// greedy completions of the golden prompts (sent as token ids), one request at a time, equal the
// Hugging Face greedy continuation of each golden (tests/golden/*/golden.json, decoded with the
// model's tokenizer) with CUDA graphs and device sampling (the default) and with
// --disable-cuda-graph, and equal the CPU server's text. Both devices run `--matmul-precision
// exact` (the goldens' f32 compute; the bf16-activation path has its own tolerance tests), and
// the KV cache is f32 so nothing rounds what HF computed in f32. Prompt logprobs and embeddings,
// read from host rows, are a 400 naming the parameter on the GPU (not built there yet).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cuda/cuda_skip.h"
#include "golden_server.h"
#include "server_checks.h"

namespace spindle::testing {
namespace {

using nlohmann::json;

std::vector<std::string> greedy_texts(const std::vector<std::string>& args, const std::vector<GoldenPrompt>& golden,
                                      const std::string& label) {
  std::string error;
  auto server = SpindleServer::start(args, &error);
  EXPECT_NE(server, nullptr) << label << ": " << error;
  if (server == nullptr) return {};
  auto client = server->client();
  std::vector<std::string> texts;
  for (const GoldenPrompt& g : golden) texts.push_back(greedy_golden_completion(*client, g, label));
  if (label.find("cuda") != std::string::npos) {  // read from host rows: refused on the GPU until built there
    const json prompt = golden.at(0).ids;
    expect_api_error(post(*client, "/v1/completions", json{{"prompt", prompt}, {"echo", true}, {"logprobs", 1}}), 400,
                     "echo", label);
    expect_api_error(post(*client, "/v1/completions", json{{"prompt", prompt}, {"prompt_logprobs", 0}}), 400,
                     "prompt_logprobs", label);
    expect_api_error(post(*client, "/v1/embeddings", json{{"input", prompt}}), 400, "input", label);
  }
  EXPECT_TRUE(kv_settled(*client)) << label;
  if (label.find("graphs") != std::string::npos) {
    EXPECT_GT(metric(server_metrics(*client), "spindle_cuda_graph_replays_total"), 0) << label << ": no graph replayed";
  }
  return texts;
}

class ServerCudaTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ServerCudaTest, GreedyOverHttpIsHuggingFacesWithAndWithoutGraphsAndTheCpusText) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::string model = GetParam();
  const std::filesystem::path dir = kGoldenDir / model;
  const std::vector<GoldenPrompt> golden = read_golden(model);
  const std::vector<std::string> hf = hf_continuations(model, golden);

  const std::vector<std::string> common = golden_serve_args(dir);
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const auto graphs = greedy_texts(with({"--device", "cuda:0"}), golden, model + " cuda graphs");
  const auto eager = greedy_texts(with({"--device", "cuda:0", "--disable-cuda-graph"}), golden, model + " cuda eager");
  const auto cpu = greedy_texts(common, golden, model + " cpu");
  for (size_t i = 0; i < golden.size(); ++i) {
    EXPECT_EQ(graphs.at(i), hf[i]) << model << " prompt " << i << ": graphs + device sampling vs HF";
    EXPECT_EQ(eager.at(i), hf[i]) << model << " prompt " << i << ": eager vs HF";
    EXPECT_EQ(cpu.at(i), hf[i]) << model << " prompt " << i << ": CPU vs HF";
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, ServerCudaTest, ::testing::Values("llama-gqa-bf16", "qwen3-qknorm-f32", "mistral-bf16"),
                         golden_model_test_name);

}  // namespace
}  // namespace spindle::testing
