// Prompt logprobs and /v1/embeddings over HTTP: the real `spindle serve` on the golden
// qwen3-qknorm-f32 checkpoint (f32 weights, f32 KV, exact products).
//
// Prompt logprobs: completions' echo + logprobs and vLLM's prompt_logprobs (completions and chat)
// hold one entry per prompt token, the first null; the entry of the last prompt token of a golden
// prompt plus one token is the log_softmax of Hugging Face's logits there (golden.json's
// last_logits), within 2 * kF32Tolerance * max|logit| (kF32Tolerance = 1e-4, the relative logit
// error the f32 forward is held to against HF; a log-softmax entry moves by at most twice it).
// A warm prefix cache changes nothing and is not read (cached_tokens 0).
//
// Embeddings: each equals the float64 forward's final normed hidden state (reference_forward.h),
// pooled as the folder says (no sentence-transformers config: the last token; a copy of the
// folder with a mean-pooling config: the mean over the prompt) and L2-normalised, within
// kF32Tolerance relative error; base64 is the same floats; dimensions truncates then normalises;
// text and token-id inputs agree; bad input is a 400 naming the parameter.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "golden_server.h"
#include "model/golden_fixtures.h"
#include "model/reference_forward.h"
#include "model/safetensors.h"
#include "server_checks.h"
#include "spindle_server.h"
#include "tokenizer/tokenizer.h"

namespace spindle::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr double kF32Tolerance = 1e-4;
const std::string kModel = "qwen3-qknorm-f32";

std::vector<double> log_softmax(const std::vector<float>& logits) {
  double m = -1e300, sum = 0;
  for (float l : logits) m = std::max(m, double{l});
  for (float l : logits) sum += std::exp(l - m);
  std::vector<double> out;
  for (float l : logits) out.push_back(l - m - std::log(sum));
  return out;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::abs(double{x}));
  return m;
}

std::vector<float> decode_base64_floats(const std::string& s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i + 3 < s.size(); i += 4) {
    const int a = value(s[i]), b = value(s[i + 1]), c = value(s[i + 2]), d = value(s[i + 3]);
    bytes.push_back(static_cast<uint8_t>((a << 2) | (b >> 4)));
    if (s[i + 2] != '=') bytes.push_back(static_cast<uint8_t>(((b & 15) << 4) | (c >> 2)));
    if (s[i + 3] != '=') bytes.push_back(static_cast<uint8_t>(((c & 3) << 6) | d));
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);  // little-endian host
  return out;
}

std::vector<float> floats(const json& a) { return a.get<std::vector<float>>(); }

double norm(const std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += double{x} * x;
  return std::sqrt(ss);
}

class ServerEndpointsTest : public ::testing::Test {
 protected:
  static std::unique_ptr<SpindleServer> start(const fs::path& dir) {
    std::string error;
    auto server = SpindleServer::start(golden_serve_args(dir), &error);
    EXPECT_NE(server, nullptr) << error;
    return server;
  }
  void SetUp() override {
    server_ = start(kGoldenDir / kModel);
    ASSERT_NE(server_, nullptr);
    client_ = server_->client();
  }
  void TearDown() override {
    if (client_) EXPECT_TRUE(kv_settled(*client_));
  }
  JsonReply completion(const json& body) { return post(*client_, "/v1/completions", body); }

  std::unique_ptr<SpindleServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ServerEndpointsTest, EchoLogprobsHoldTheGoldenRow) {
  for (const auto& g : read_golden(kModel)) {
    SCOPED_TRACE(g.text);
    std::vector<TokenId> prompt(g.ids.begin(), g.ids.end());
    prompt.push_back(g.greedy[0]);
    const JsonReply r = completion({{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}, {"ignore_eos", true},
                                    {"echo", true}, {"logprobs", 3}});
    ASSERT_EQ(r.status, 200) << r.body;
    const json& lp = r.json["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), prompt.size() + 2);
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    EXPECT_EQ(lp["text_offset"][0], 0);
    const std::vector<double> hf = log_softmax(g.last_logits);
    const double tol = 2 * kF32Tolerance * max_abs(g.last_logits);
    EXPECT_NEAR(lp["token_logprobs"][prompt.size() - 1].get<double>(), hf[static_cast<size_t>(g.greedy[0])], tol);
    EXPECT_EQ(lp["top_logprobs"][prompt.size() - 1].size(), 3u);
    for (size_t i = 1; i < lp["tokens"].size(); ++i) {
      EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0) << i;
      EXPECT_GE(lp["text_offset"][i].get<size_t>(), lp["text_offset"][i - 1].get<size_t>()) << i;
    }
    EXPECT_EQ(lp["text_offset"][prompt.size()].get<size_t>(), r.json["choices"][0]["text"].get<std::string>().size() -
                                                                   lp["tokens"][prompt.size()].get<std::string>().size() -
                                                                   lp["tokens"][prompt.size() + 1].get<std::string>().size())
        << "the output's offsets follow the echoed prompt";
  }
}

TEST_F(ServerEndpointsTest, VllmPromptLogprobsAndAWarmCache) {
  const auto g = read_golden(kModel).back();
  std::vector<TokenId> prompt(g.ids.begin(), g.ids.end());
  prompt.push_back(g.greedy[0]);
  const json body = {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}, {"prompt_logprobs", 2}};
  const JsonReply cold = completion(body);
  ASSERT_EQ(cold.status, 200) << cold.body;
  const json& plp = cold.json["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(plp.size(), prompt.size());
  EXPECT_TRUE(plp[0].is_null());
  EXPECT_TRUE(cold.json["choices"][0]["logprobs"].is_null()) << "prompt_logprobs alone asks for no output logprobs";
  const json& last = plp[prompt.size() - 1];
  const std::string id = std::to_string(g.greedy[0]);
  ASSERT_TRUE(last.contains(id)) << last.dump();
  EXPECT_EQ(last[id]["rank"], 1) << "HF's greedy token";
  const std::vector<double> hf = log_softmax(g.last_logits);
  EXPECT_NEAR(last[id]["logprob"].get<double>(), hf[static_cast<size_t>(g.greedy[0])],
              2 * kF32Tolerance * max_abs(g.last_logits));
  EXPECT_EQ(last.size(), 2u) << "the token itself is its best alternative";
  for (size_t i = 1; i < prompt.size(); ++i) {
    ASSERT_TRUE(plp[i].contains(std::to_string(prompt[i]))) << i;
    EXPECT_GE(plp[i][std::to_string(prompt[i])]["rank"].get<int>(), 1);
  }
  // The prompt's pages are now cached: a plain request reads them, a prompt-logprobs one does not.
  const JsonReply plain = completion({{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}});
  EXPECT_GT(plain.json["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << plain.body;
  const JsonReply warm = completion(body);
  ASSERT_EQ(warm.status, 200) << warm.body;
  EXPECT_EQ(warm.json["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(warm.json["choices"][0]["prompt_logprobs"], plp);
  // Chat: once, beside the choices.
  const JsonReply chat = post(*client_, "/v1/chat/completions",
                              json{{"messages", {{{"role", "user"}, {"content", "In the beginning"}}}},
                                   {"max_tokens", 1},
                                   {"prompt_logprobs", 0}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.json["prompt_logprobs"].size(), chat.json["usage"]["prompt_tokens"].get<size_t>());
  EXPECT_TRUE(chat.json["prompt_logprobs"][0].is_null());
  expect_api_error(completion({{"prompt", "x"}, {"prompt_logprobs", 1}, {"stream", true}}), 400, "prompt_logprobs");
  expect_api_error(completion({{"prompt", "x"}, {"prompt_logprobs", 21}}), 400, "prompt_logprobs");
}

TEST_F(ServerEndpointsTest, StreamedEchoCarriesThePromptLogprobs) {
  const auto g = read_golden(kModel).front();
  const SseReply s = post_stream(*client_, "/v1/completions",
                                 {{"prompt", g.ids}, {"max_tokens", 3}, {"temperature", 0}, {"ignore_eos", true},
                                  {"stream", true}, {"echo", true}, {"logprobs", 1}});
  ASSERT_EQ(s.status, 200) << s.raw;
  ASSERT_GE(s.events.size(), 2u) << s.raw;
  const json& first = s.events[0]["choices"][0];
  ASSERT_EQ(first["logprobs"]["tokens"].size(), g.ids.size()) << first.dump();
  EXPECT_TRUE(first["logprobs"]["token_logprobs"][0].is_null());
  size_t output_tokens = 0;
  for (size_t i = 1; i < s.events.size(); ++i) {
    if (!s.events[i]["choices"].empty()) output_tokens += s.events[i]["choices"][0]["logprobs"]["tokens"].size();
  }
  EXPECT_EQ(output_tokens, 3u);
}

// The float64 final normed hidden states of every prefix of `ids` (row p: the last of ids[0..p]).
std::vector<std::vector<double>> reference_rows(const std::vector<int32_t>& ids) {
  const Checkpoint checkpoint(kGoldenDir / kModel);
  std::map<std::string, std::vector<double>> w;
  for (const auto& info : checkpoint.tensors()) {
    const TensorView view = checkpoint.tensor(info.name);
    const auto* f = reinterpret_cast<const float*>(view.bytes.data());
    w[info.name].assign(f, f + info.num_elements());
  }
  const json c = json::parse(std::ifstream(kGoldenDir / kModel / "config.json"));
  ReferenceShape s{c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["num_attention_heads"],
                   c["num_key_value_heads"], c["head_dim"], c["vocab_size"], c["rms_norm_eps"], c["rope_parameters"]["rope_theta"],
                   true};
  std::vector<std::vector<double>> rows;
  for (size_t p = 1; p <= ids.size(); ++p) rows.push_back(reference_last_hidden(s, w, {ids.begin(), ids.begin() + p}));
  return rows;
}

double relative_error(const std::vector<float>& ours, std::vector<double> ref) {
  double ss = 0, diff = 0, m = 0;
  for (double x : ref) ss += x * x;
  for (double& x : ref) x /= std::sqrt(ss);
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(ours[i] - ref[i]));
    m = std::max(m, std::abs(ref[i]));
  }
  return diff / m;
}

TEST_F(ServerEndpointsTest, EmbeddingsAreTheFloat64LastTokenState) {
  const auto golden = read_golden(kModel);
  json inputs = json::array();
  for (const auto& g : golden) inputs.push_back(g.ids);
  const JsonReply r = post(*client_, "/v1/embeddings", json{{"input", inputs}, {"model", kModel}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["object"], "list");
  EXPECT_EQ(r.json["model"], kModel);
  ASSERT_EQ(r.json["data"].size(), golden.size());
  size_t tokens = 0;
  for (size_t i = 0; i < golden.size(); ++i) {
    SCOPED_TRACE(golden[i].text);
    const json& d = r.json["data"][i];
    EXPECT_EQ(d["object"], "embedding");
    EXPECT_EQ(d["index"], i);
    const std::vector<float> e = floats(d["embedding"]);
    EXPECT_NEAR(norm(e), 1.0, 1e-5);
    EXPECT_LE(relative_error(e, reference_rows(golden[i].ids).back()), kF32Tolerance);
    tokens += golden[i].ids.size();
  }
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], tokens);
  EXPECT_EQ(r.json["usage"]["total_tokens"], tokens);

  // base64 is the same floats; text input is tokenized as a completions prompt is; dimensions.
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(kGoldenDir / kModel);
  const std::string text = "In the beginning";
  const JsonReply as_text = post(*client_, "/v1/embeddings", json{{"input", text}, {"encoding_format", "base64"}});
  ASSERT_EQ(as_text.status, 200) << as_text.body;
  const JsonReply as_ids = post(*client_, "/v1/embeddings", json{{"input", json::array({tok.encode(text, true)})}});
  ASSERT_EQ(as_ids.status, 200) << as_ids.body;
  const std::vector<float> from_base64 = decode_base64_floats(as_text.json["data"][0]["embedding"]);
  EXPECT_EQ(from_base64, floats(as_ids.json["data"][0]["embedding"]));
  const JsonReply cut = post(*client_, "/v1/embeddings", json{{"input", text}, {"dimensions", 8}});
  ASSERT_EQ(cut.status, 200) << cut.body;
  const std::vector<float> short_e = floats(cut.json["data"][0]["embedding"]);
  ASSERT_EQ(short_e.size(), 8u);
  const std::vector<float> first8(from_base64.begin(), from_base64.begin() + 8);
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(short_e[i], first8[i] / norm(first8), 1e-6);

  const std::vector<std::pair<json, std::string>> bad = {
      {json{{"model", kModel}}, "input"},
      {json{{"input", ""}}, "input"},
      {json{{"input", json::array()}}, "input"},
      {json{{"input", {"a", 3}}}, "input[1]"},
      {json{{"input", {1, -2}}}, "input"},
      {json{{"input", {99999999}}}, "input"},
      {json{{"input", "a"}, {"encoding_format", "int8"}}, "encoding_format"},
      {json{{"input", "a"}, {"dimensions", 0}}, "dimensions"},
      {json{{"input", "a"}, {"dimensions", 100000}}, "dimensions"},
      {json{{"input", "a"}, {"pooling", "mean"}}, "pooling"},
      {json{{"input", "a"}, {"user", 3}}, "user"},
  };
  for (const auto& [body, param] : bad) expect_api_error(post(*client_, "/v1/embeddings", body), 400, param, body.dump());
  const JsonReply user = post(*client_, "/v1/embeddings", json{{"input", text}, {"user", "u-1"}, {"encoding_format", "float"}});
  ASSERT_EQ(user.status, 200) << user.body;
  EXPECT_EQ(floats(user.json["data"][0]["embedding"]), floats(as_ids.json["data"][0]["embedding"])) << "user changes nothing";
  expect_api_error(post(*client_, "/v1/embeddings", json{{"input", "a"}, {"model", "other"}}), 404, "model");
}

// A copy of the folder whose sentence-transformers config pools the mean: the server reads it.
TEST_F(ServerEndpointsTest, MeanPoolingFromASentenceTransformersConfig) {
  const fs::path dir = fs::path(temp_path("mean-pooling"));
  fs::create_directories(dir / "1_Pooling");
  for (const auto& f : fs::directory_iterator(kGoldenDir / kModel)) fs::create_symlink(f.path(), dir / f.path().filename());
  std::ofstream(dir / "modules.json")
      << R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
             {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
             {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])";
  std::ofstream(dir / "1_Pooling" / "config.json")
      << R"({"word_embedding_dimension": 128, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": true,
             "pooling_mode_max_tokens": false, "pooling_mode_lasttoken": false})";
  auto mean_server = start(dir);
  ASSERT_NE(mean_server, nullptr);
  auto client = mean_server->client();
  for (const auto& g : read_golden(kModel)) {
    const JsonReply r = post(*client, "/v1/embeddings", json{{"input", g.ids}, {"encoding_format", "float"}});
    ASSERT_EQ(r.status, 200) << r.body;
    const auto rows = reference_rows(g.ids);
    std::vector<double> mean(rows[0].size());
    for (const auto& row : rows)
      for (size_t i = 0; i < row.size(); ++i) mean[i] += row[i] / static_cast<double>(rows.size());
    const std::vector<float> e = floats(r.json["data"][0]["embedding"]);
    EXPECT_LE(relative_error(e, mean), kF32Tolerance) << g.text;
    EXPECT_GT(relative_error(e, rows.back()), 1e-2) << g.text << ": not the last token's";
  }
  EXPECT_TRUE(kv_settled(*client));
}

}  // namespace
}  // namespace spindle::testing
