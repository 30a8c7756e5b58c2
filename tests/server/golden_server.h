// The Hugging Face golden checkpoints (tests/golden/*) served by the real `spindle serve`: the
// flags that keep the goldens' f32 compute, HF's greedy continuation as the server writes it, and
// a greedy completion of a golden prompt sent as token ids. Shared by the server suites that
// compare served text with the goldens (server_moe_test, server_cuda_test, server_endpoints_test).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model/golden_fixtures.h"
#include "spindle_server.h"
#include "tokenizer/tokenizer.h"

namespace spindle::testing {

// `spindle serve` arguments for the checkpoint at `dir`: --matmul-precision exact and an f32 KV
// cache (nothing rounds what HF computed in f32), 4096 tokens of KV.
inline std::vector<std::string> golden_serve_args(const std::filesystem::path& dir) {
  return {dir.string(), "--matmul-precision", "exact", "--kv-cache-dtype", "f32", "--max-total-tokens", "4096"};
}

// HF's continuation of each golden prompt of `model` as the server writes it: the text the greedy
// ids add to the prompt's (a SentencePiece tokenizer drops a leading space only at the start of the
// text). A prompt whose text is not a prefix of the whole is a test failure and gives "".
inline std::vector<std::string> hf_continuations(const std::string& model, const std::vector<GoldenPrompt>& golden) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(kGoldenDir / model);
  std::vector<std::string> hf;
  for (const GoldenPrompt& g : golden) {
    std::vector<TokenId> all = g.ids;
    all.insert(all.end(), g.greedy.begin(), g.greedy.end());
    const std::string prompt = tok.decode(g.ids), full = tok.decode(all);
    const bool prefix = full.compare(0, prompt.size(), prompt) == 0;
    EXPECT_TRUE(prefix) << model << ": the prompt's text is not a prefix";
    hf.push_back(prefix ? full.substr(prompt.size()) : "");
  }
  return hf;
}

// The text of a greedy /v1/completions of g's ids, exactly g.greedy.size() tokens (EOS ignored);
// "" and a test failure naming `label` when the status is not 200.
inline std::string greedy_golden_completion(httplib::Client& client, const GoldenPrompt& g, const std::string& label) {
  const JsonReply r = post(client, "/v1/completions",
                           nlohmann::json{{"prompt", g.ids}, {"max_tokens", g.greedy.size()}, {"temperature", 0},
                                          {"ignore_eos", true}});
  EXPECT_EQ(r.status, 200) << label << ": " << r.body;
  return r.status == 200 ? r.json["choices"][0].value("text", "") : "";
}

// A model name as a test-name suffix ('-' becomes '_').
inline std::string golden_model_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& c : n) c = c == '-' ? '_' : c;
  return n;
}

}  // namespace spindle::testing
