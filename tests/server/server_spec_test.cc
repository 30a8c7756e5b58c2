// Speculative decoding through the real server: `spindle serve` with the embedded kjv-tiny and
// its draft kjv-draft (and with the n-gram proposer) answers greedy completions with exactly the
// text the plain server gives, /metrics carries SGLang's four names (spec_num_accepted_tokens,
// spec_num_forward_ct, spec_total_num_accepted_tokens, spec_total_num_forward_ct) and vLLM's
// counters with values that agree with each other (accepted tokens = accepted drafts + one per
// verify, accept length within [1, k + 1]), usage carries the accepted draft tokens, and a
// request with "speculative": false (completion or chat) verifies nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "spindle_server.h"

namespace spindle::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kModels = fs::path(SPINDLE_SOURCE_DIR) / "models";
const std::vector<std::string> kPrompts = {"And God said, Let there be light",
                                           "In the beginning God created the heaven and the earth.",
                                           "The LORD is my shepherd; I shall not want.",
                                           "And it came to pass"};

std::vector<std::string> greedy_texts(SpindleServer& server, std::vector<json>* usages = nullptr) {
  auto client = server.client();
  std::vector<std::string> texts;
  for (const auto& p : kPrompts) {
    const JsonReply r = post(*client, "/v1/completions",
                             json{{"prompt", p}, {"max_tokens", 48}, {"temperature", 0}, {"ignore_eos", true}});
    EXPECT_EQ(r.status, 200) << r.body;
    texts.push_back(r.json["choices"][0].value("text", ""));
    if (usages) usages->push_back(r.json["usage"]);
  }
  return texts;
}

double metric(const std::map<std::string, double>& m, const std::string& name) {
  const auto it = m.find(name);
  EXPECT_NE(it, m.end()) << "no metric " << name;
  return it == m.end() ? -1 : it->second;
}

TEST(ServerSpecTest, SameTextAndTheMetricsUnderTheirNames) {
  std::string error;
  const std::vector<std::string> base_args = {"--max-total-tokens", "8192", "--decode-log-interval", "8"};
  std::vector<std::string> plain_texts;
  {
    auto plain = SpindleServer::start(base_args, &error);
    ASSERT_NE(plain, nullptr) << error;
    plain_texts = greedy_texts(*plain);
  }
  for (const std::string algorithm : {"draft", "ngram"}) {
    std::vector<std::string> args = base_args;
    args.insert(args.end(), {"--speculative-algorithm", algorithm, "--speculative-always",
                             "--speculative-num-draft-tokens", "4"});
    if (algorithm == "draft") args.insert(args.end(), {"--speculative-draft-model-path", (kModels / "kjv-draft").string()});
    auto server = SpindleServer::start(args, &error);
    ASSERT_NE(server, nullptr) << error;
    std::vector<json> usages;
    EXPECT_EQ(greedy_texts(*server, &usages), plain_texts) << algorithm;
    auto client = server->client();
    const auto m = parse_metrics(get(*client, "/metrics").body);
    const double forwards = metric(m, "spec_total_num_forward_ct");
    const double accepted = metric(m, "spec_total_num_accepted_tokens");
    const double drafts = metric(m, "spindle_spec_decode_num_drafts_total");
    const double draft_tokens = metric(m, "spindle_spec_decode_num_draft_tokens_total");
    const double accepted_drafts = metric(m, "spindle_spec_decode_num_accepted_tokens_total");
    EXPECT_GT(forwards, 0) << algorithm;
    EXPECT_EQ(drafts, forwards);
    EXPECT_EQ(accepted, accepted_drafts + forwards) << "accepted tokens include one bonus or correction per verify";
    EXPECT_LE(accepted_drafts, draft_tokens);
    EXPECT_LE(draft_tokens, 4 * drafts);
    const double length = metric(m, "spindle_spec_accept_length");
    EXPECT_GE(length, 1.0);
    EXPECT_LE(length, 5.0);
    EXPECT_NEAR(length, accepted / forwards, 1e-9);
    EXPECT_NEAR(metric(m, "spindle_spec_accept_rate"), accepted_drafts / draft_tokens, 1e-9);
    // The window gauges: the last logging window's counts (every 8 decode steps here; with the
    // draft model every decode step verifies, the n-gram proposer may have matched nothing then).
    if (algorithm == "draft") EXPECT_GT(metric(m, "spec_num_forward_ct"), 0);
    EXPECT_GE(metric(m, "spec_num_accepted_tokens"), metric(m, "spec_num_forward_ct"));
    EXPECT_LE(metric(m, "spec_num_forward_ct"), forwards);
    int with_details = 0;
    for (const json& u : usages) {
      if (u.contains("completion_tokens_details")) {
        ++with_details;
        EXPECT_GT(u["completion_tokens_details"].value("accepted_prediction_tokens", 0), 0);
        EXPECT_LT(u["completion_tokens_details"].value("accepted_prediction_tokens", 0), 48);
      }
    }
    EXPECT_GT(with_details, 0) << algorithm << ": no usage carried accepted draft tokens";
    // Turned off for one request: no verify added.
    const JsonReply off = post(*client, "/v1/completions",
                               json{{"prompt", kPrompts[0]}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true},
                                    {"speculative", false}});
    ASSERT_EQ(off.status, 200) << off.body;
    EXPECT_EQ(off.json["choices"][0].value("text", "").substr(0, 20), plain_texts[0].substr(0, 20));
    // The same for a chat request.
    const JsonReply chat_off = post(*client, "/v1/chat/completions",
                                    json{{"messages", {{{"role", "user"}, {"content", kPrompts[1]}}}},
                                         {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true},
                                         {"speculative", false}});
    ASSERT_EQ(chat_off.status, 200) << chat_off.body;
    EXPECT_EQ(chat_off.json["usage"].value("completion_tokens", 0), 24);
    const auto after = parse_metrics(get(*client, "/metrics").body);
    EXPECT_EQ(metric(after, "spec_total_num_forward_ct"), forwards);
    EXPECT_THAT(server->log(), ::testing::HasSubstr("spec accept length")) << "the periodic log line";
  }
}

}  // namespace
}  // namespace spindle::testing
