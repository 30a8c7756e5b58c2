// The real `spindle serve --device cuda:0` over HTTP (skips without a usable CUDA device, cc >= 8.0):
// greedy completions of the golden prompts (sent as token ids), one request at a time, equal the
// Hugging Face greedy continuation of each golden (tests/golden/*/golden.json, decoded with the
// model's tokenizer) with CUDA graphs and device sampling (the default) and with
// --disable-cuda-graph, and equal the CPU server's text. Both devices run `--matmul-precision
// exact` (the goldens' f32 compute; the bf16-activation path has its own tolerance tests), and
// the KV cache is f32 so nothing rounds what HF computed in f32.
//
// Prompt logprobs and embeddings (rows copied to the host at launch on the GPU), on every run:
// completions' echo + logprobs of the first golden prompt plus HF's first greedy token has, as the
// last prompt entry, the log_softmax of HF's row (golden.json last_logits) at that token within
// 2 * tol * max|logit| (tol: cuda_model_test's relative logit bound, kF32Tolerance = 1e-4 for f32
// checkpoints, kBf16Tolerance = 2e-2 for bf16 ones; a log-softmax entry moves by at most twice the
// largest logit error), and HF's greedy token ranks first; vLLM's prompt_logprobs has one entry per
// prompt token, the first null; /v1/embeddings of the golden prompts equals the CPU server's within
// tol relative error (the float64 comparison of the pooled state is cuda_engine_test's HostRowsEngine).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda/cuda_skip.h"
#include "golden_server.h"
#include "server_checks.h"

namespace spindle::testing {
namespace {

using nlohmann::json;

// What one server answered.
struct Answers {
  std::vector<std::string> texts;                // greedy completion of each golden prompt
  double echo_last_logprob = 0;                  // echo + logprobs: the last prompt token's entry
  std::string echo_last_token;                   // ... its token's text
  std::string echo_last_top;                     // ... and its one alternative's token text
  std::vector<std::vector<float>> embeddings;    // /v1/embeddings of each golden prompt
};

// The log_softmax of HF's row at `token` (golden.json last_logits), in float64.
double hf_logprob(const GoldenPrompt& g, TokenId token) {
  double m = -INFINITY, sum = 0;
  for (float l : g.last_logits) m = std::max(m, double{l});
  for (float l : g.last_logits) sum += std::exp(double{l} - m);
  return double{g.last_logits.at(static_cast<size_t>(token))} - m - std::log(sum);
}

Answers serve_golden(const std::vector<std::string>& args, const std::vector<GoldenPrompt>& golden,
                     const std::string& label) {
  std::string error;
  auto server = SpindleServer::start(args, &error);
  EXPECT_NE(server, nullptr) << label << ": " << error;
  if (server == nullptr) return {};
  auto client = server->client();
  Answers a;
  for (const GoldenPrompt& g : golden) a.texts.push_back(greedy_golden_completion(*client, g, label));
  // Prompt logprobs: the first golden prompt and HF's first greedy token after it.
  const GoldenPrompt& g = golden.at(0);
  std::vector<TokenId> prompt = g.ids;
  prompt.push_back(g.greedy.at(0));
  const JsonReply echo = post(*client, "/v1/completions",
                              json{{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}, {"echo", true}, {"logprobs", 1}});
  EXPECT_EQ(echo.status, 200) << label << ": " << echo.body;
  if (echo.status == 200) {
    const json& lp = echo.json["choices"][0]["logprobs"];
    EXPECT_EQ(lp["tokens"].size(), prompt.size() + 1) << label;
    EXPECT_TRUE(lp["token_logprobs"][0].is_null()) << label;
    a.echo_last_logprob = lp["token_logprobs"][prompt.size() - 1].get<double>();
    a.echo_last_token = lp["tokens"][prompt.size() - 1].get<std::string>();
    for (const auto& [text, logprob] : lp["top_logprobs"][prompt.size() - 1].items()) a.echo_last_top = text;
  }
  const JsonReply vllm =
      post(*client, "/v1/completions", json{{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}, {"prompt_logprobs", 0}});
  EXPECT_EQ(vllm.status, 200) << label << ": " << vllm.body;
  if (vllm.status == 200) {
    const json& plp = vllm.json["choices"][0]["prompt_logprobs"];
    EXPECT_EQ(plp.size(), prompt.size()) << label;
    EXPECT_TRUE(plp[0].is_null()) << label;
  }
  json inputs = json::array();
  for (const GoldenPrompt& p : golden) inputs.push_back(p.ids);
  const JsonReply emb = post(*client, "/v1/embeddings", json{{"input", inputs}, {"encoding_format", "float"}});
  EXPECT_EQ(emb.status, 200) << label << ": " << emb.body;
  if (emb.status == 200) {
    for (const json& d : emb.json["data"]) a.embeddings.push_back(d["embedding"].get<std::vector<float>>());
    EXPECT_EQ(a.embeddings.size(), golden.size()) << label;
  }
  EXPECT_TRUE(kv_settled(*client)) << label;
  if (label.find("graphs") != std::string::npos) {
    EXPECT_GT(metric(server_metrics(*client), "spindle_cuda_graph_replays_total"), 0) << label << ": no graph replayed";
  }
  return a;
}

double relative_error(const std::vector<float>& ours, const std::vector<float>& ref) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(double{ours.at(i)} - ref[i]));
    scale = std::max(scale, std::abs(double{ref[i]}));
  }
  return diff / scale;
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
  const Answers graphs = serve_golden(with({"--device", "cuda:0"}), golden, model + " cuda graphs");
  const Answers eager = serve_golden(with({"--device", "cuda:0", "--disable-cuda-graph"}), golden, model + " cuda eager");
  const Answers cpu = serve_golden(common, golden, model + " cpu");
  for (size_t i = 0; i < golden.size(); ++i) {
    EXPECT_EQ(graphs.texts.at(i), hf[i]) << model << " prompt " << i << ": graphs + device sampling vs HF";
    EXPECT_EQ(eager.texts.at(i), hf[i]) << model << " prompt " << i << ": eager vs HF";
    EXPECT_EQ(cpu.texts.at(i), hf[i]) << model << " prompt " << i << ": CPU vs HF";
  }
  // cuda_model_test's relative logit bound for this checkpoint's dtype.
  const double tol = model.find("bf16") != std::string::npos ? 2e-2 : 1e-4;
  double max_logit = 0;
  for (float l : golden.at(0).last_logits) max_logit = std::max(max_logit, std::abs(double{l}));
  const TokenId greedy = golden.at(0).greedy.at(0);
  for (const Answers* a : {&graphs, &eager, &cpu}) {
    const std::string which = a == &graphs ? "graphs" : a == &eager ? "eager" : "cpu";
    EXPECT_NEAR(a->echo_last_logprob, hf_logprob(golden.at(0), greedy), 2 * tol * max_logit) << model << " " << which;
    EXPECT_EQ(a->echo_last_top, a->echo_last_token) << model << " " << which << ": HF's greedy token is the top alternative";
    if (a == &cpu) continue;
    ASSERT_EQ(a->embeddings.size(), cpu.embeddings.size()) << model << " " << which;
    for (size_t i = 0; i < cpu.embeddings.size(); ++i) {
      ASSERT_EQ(a->embeddings[i].size(), cpu.embeddings[i].size()) << model << " " << which << " prompt " << i;
      EXPECT_LE(relative_error(a->embeddings[i], cpu.embeddings[i]), tol) << model << " " << which << " prompt " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, ServerCudaTest, ::testing::Values("llama-gqa-bf16", "qwen3-qknorm-f32", "mistral-bf16"),
                         golden_model_test_name);

}  // namespace
}  // namespace spindle::testing
