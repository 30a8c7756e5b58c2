// The server at its limits, end to end: a KV pool far smaller than the offered load (requests
// queue or are preempted, all complete), an API key, a body size limit, and overload beyond
// --max-queued-requests (503). Each suite runs its own `spindle serve`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "server_checks.h"
#include "spindle_server.h"
#include "support/spindle_binary.h"

namespace spindle::testing {
namespace {

using nlohmann::json;

// A second server on a port that is in use fails at start, naming the port, and the first keeps
// serving (with SO_REUSEPORT both listened and the kernel split the connections between them).
TEST(ServerPortTest, APortInUseIsAStartupError) {
  std::string error;
  auto first = SpindleServer::start({}, &error);
  ASSERT_NE(first, nullptr) << error;
  const std::string port = std::to_string(first->port());
  const ChildResult second =
      run_child({spindle_binary(), "serve", "--port", port, "--no-backend-cache"}, std::chrono::seconds(60));
  EXPECT_FALSE(second.timed_out) << "the second server did not exit:\n" << second.err;
  EXPECT_NE(second.exit_code, 0) << second.err;
  EXPECT_THAT(second.err, ::testing::HasSubstr("127.0.0.1:" + port)) << second.err;
  auto client = first->client(30, "");
  for (int i = 0; i < 6; ++i) {
    const auto res = client->Get("/v1/models");
    ASSERT_TRUE(res) << "request " << i;
    EXPECT_EQ(res->status, 200);
  }
  EXPECT_TRUE(first->alive());
}

// One server per suite; the derived suite names its flags and API key.
template <typename Derived>
class ServerSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = SpindleServer::start(Derived::server_args(), &start_error_); }
  static void TearDownTestSuite() {
    if (!server_) return;
    bool graceful = false;
    const int code = server_->stop(&graceful);
    EXPECT_TRUE(graceful && code == 0) << "SIGTERM: exit " << code << "\n" << server_->log();
    server_.reset();
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << start_error_;
    ASSERT_TRUE(server_->alive()) << "the server died:\n" << server_->log();
    client_ = server_->client(60, Derived::kApiKey);
  }
  void TearDown() override {
    if (!server_) return;
    if (!server_->alive()) {
      ADD_FAILURE() << "the server died:\n" << server_->log();
      return;
    }
    EXPECT_TRUE(kv_settled(*client_));
    // It still serves.
    const JsonReply ok = post(*client_, "/v1/completions", json{{"prompt", "And God said"}, {"max_tokens", 2}});
    EXPECT_EQ(ok.status, 200) << ok.body;
  }

  static inline std::unique_ptr<SpindleServer> server_;
  static inline std::string start_error_;
  std::unique_ptr<httplib::Client> client_;
};

// 16 pages of 16 tokens: one full-context request takes the whole pool.
class ServerSmallPoolTest : public ServerSuite<ServerSmallPoolTest> {
 public:
  static constexpr const char* kApiKey = "spindle-test-key";
  static constexpr int kPoolTokens = 256;
  static constexpr int kMaxBodyBytes = 65536;
  static std::vector<std::string> server_args() {
    return {"--max-total-tokens", std::to_string(kPoolTokens), "--page-size", "16", "--max-model-len",
            std::to_string(kPoolTokens), "--max-body-bytes", std::to_string(kMaxBodyBytes), "--api-key", kApiKey};
  }
};

TEST_F(ServerSmallPoolTest, MoreRequestsThanTheKvPoolHoldsAllComplete) {
  constexpr int kRequests = 10;
  const auto before = server_metrics(*client_);
  struct Case {
    bool stream;
    int max_tokens;
    JsonReply whole;
    SseReply streamed;
  };
  std::vector<Case> cases(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    Case& c = cases[i];
    c.stream = i % 2 == 1;
    // Request 0 fills the whole context (all 16 pages); the others need 4 pages each.
    const std::string prompt = "And it came to pass in the " + std::to_string(i + 1) + " year of the king, that";
    json body = {{"prompt", prompt}, {"ignore_eos", true}, {"seed", i}, {"logprobs", 0}};
    body["max_tokens"] = c.max_tokens = i == 0 ? kPoolTokens - 20 : 48;
    if (c.stream) {
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
    }
    threads.emplace_back([&c, body, this] {
      auto client = server_->client(120, kApiKey);
      if (c.stream) {
        c.streamed = post_stream(*client, "/v1/completions", body);
      } else {
        c.whole = post(*client, "/v1/completions", body);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const Case& c = cases[i];
    if (c.stream) {
      EXPECT_EQ(c.streamed.status, 200);
      EXPECT_TRUE(c.streamed.done) << c.streamed.raw;
      EXPECT_THAT(c.streamed.problems, ::testing::IsEmpty());
      int tokens = 0;
      json usage, finish;
      for (const auto& e : c.streamed.events) {
        if (e.contains("usage")) usage = e["usage"];
        for (const auto& choice : e["choices"]) {
          if (choice.contains("error")) ADD_FAILURE() << e.dump();
          if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
          if (choice["logprobs"].is_object()) tokens += static_cast<int>(choice["logprobs"]["tokens"].size());
        }
        if (e.contains("error")) ADD_FAILURE() << "error event: " << e.dump();
      }
      EXPECT_EQ(finish, "length");
      EXPECT_EQ(tokens, c.max_tokens);
      EXPECT_EQ(usage.value("completion_tokens", -1), c.max_tokens) << usage.dump();
    } else {
      ASSERT_EQ(c.whole.status, 200) << c.whole.body;
      EXPECT_EQ(c.whole.json["choices"][0]["finish_reason"], "length");
      EXPECT_EQ(c.whole.json["usage"]["completion_tokens"], c.max_tokens);
    }
  }
  const auto after = server_metrics(*client_);
  EXPECT_EQ(metric(after, "spindle_requests_finished_total") - metric(before, "spindle_requests_finished_total"), kRequests);
  EXPECT_EQ(metric(after, "spindle_requests_aborted_total") - metric(before, "spindle_requests_aborted_total"), 0);
  RecordProperty("preemptions",
                 static_cast<int>(metric(after, "spindle_num_preemptions_total") - metric(before, "spindle_num_preemptions_total")));
}

// --prefix-cache-tokens 48: 3 pages of 16 kept for finished requests, the least recently used
// beyond them evicted (and, on the CPU, their memory given back).
class ServerPrefixBudgetTest : public ServerSuite<ServerPrefixBudgetTest> {
 public:
  static constexpr const char* kApiKey = "";
  static std::vector<std::string> server_args() { return {"--prefix-cache-tokens", "48", "--page-size", "16"}; }
};

TEST_F(ServerPrefixBudgetTest, CachedPagesStayWithinTheBudget) {
  // Each request: 40 distinct prompt tokens + 8 generated; 47 tokens computed (the last sampled
  // token is never fed back), so 2 full pages go to the prefix cache when it finishes.
  const int expected_used[] = {2, 3, 3, 3};
  for (int k = 0; k < 4; ++k) {
    json prompt = json::array();
    for (int i = 0; i < 40; ++i) prompt.push_back(100 + 40 * k + i);
    const JsonReply r = post(*client_, "/v1/completions",
                             json{{"prompt", prompt}, {"max_tokens", 8}, {"ignore_eos", true}, {"temperature", 0}});
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_TRUE(kv_settled(*client_));  // the request's pages are released
    const auto m = server_metrics(*client_);
    EXPECT_EQ(metric(m, "spindle_kv_pages_used"), expected_used[k]) << "request " << k;
  }
}

TEST_F(ServerSmallPoolTest, ApiKeyIsRequiredOnV1) {
  const json body = {{"prompt", "And God said"}, {"max_tokens", 2}};
  auto anonymous = server_->client();
  expect_api_error(post(*anonymous, "/v1/completions", body), 401, "", "no key");
  expect_api_error(post(*anonymous, "/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}), 401,
                   "", "no key (chat)");
  expect_api_error(get(*anonymous, "/v1/models"), 401, "", "no key (models)");
  auto wrong = server_->client(60, "not-the-key");
  const JsonReply r = post(*wrong, "/v1/completions", body);
  expect_api_error(r, 401, "", "wrong key");
  EXPECT_EQ(r.json["error"].value("type", ""), "authentication_error");
  // A streaming request is refused before any event.
  json streamed = body;
  streamed["stream"] = true;
  EXPECT_EQ(post_stream(*wrong, "/v1/completions", streamed).status, 401);
  // /health and /metrics stay open (load balancers, Prometheus).
  EXPECT_EQ(get(*anonymous, "/health").status, 200);
  EXPECT_EQ(get(*anonymous, "/metrics").status, 200);
  // The right key works.
  const JsonReply ok = post(*client_, "/v1/completions", body);
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(get(*client_, "/v1/models").status, 200);
}

TEST_F(ServerSmallPoolTest, OversizedBodyIs413) {
  auto padded = [](size_t size) {
    std::string body = json{{"prompt", "And God said"}, {"max_tokens", 2}}.dump();
    body.resize(size, ' ');
    return body;
  };
  // Just under the limit: served.
  const JsonReply fits = post(*client_, "/v1/completions", padded(kMaxBodyBytes));
  EXPECT_EQ(fits.status, 200) << fits.body;
  // Over it, and far over it (httplib stops reading): 413 with a JSON error.
  const JsonReply over = post(*client_, "/v1/completions", padded(kMaxBodyBytes + 1));
  expect_api_error(over, 413, "", "one byte over");
  EXPECT_THAT(over.json["error"].value("message", ""), ::testing::HasSubstr(std::to_string(kMaxBodyBytes)));
  expect_api_error(post(*client_, "/v1/chat/completions", padded(4 * kMaxBodyBytes)), 413, "", "4x over");
}

// One running request and one waiting at most: the rest are refused with 503.
class ServerOverloadTest : public ServerSuite<ServerOverloadTest> {
 public:
  static constexpr const char* kApiKey = "";
  static std::vector<std::string> server_args() {
    return {"--max-queued-requests", "1", "--max-running-requests", "1", "--max-total-tokens", "4096"};
  }
};

TEST_F(ServerOverloadTest, BeyondMaxQueuedRequestsIs503) {
  constexpr int kRequests = 8;
  constexpr int kMaxTokens = 200;
  std::vector<int> statuses(kRequests, 0);
  std::vector<std::string> bodies(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      auto client = server_->client(120);
      const json body = {{"prompt", "And God said"}, {"max_tokens", kMaxTokens}, {"ignore_eos", true}, {"stream", i % 4 == 3}};
      if (i % 4 == 3) {
        const SseReply r = post_stream(*client, "/v1/completions", body);
        statuses[i] = r.status;
        bodies[i] = r.raw;
      } else {
        const JsonReply r = post(*client, "/v1/completions", body);
        statuses[i] = r.status;
        bodies[i] = r.body;
      }
    });
  }
  for (auto& t : threads) t.join();
  int num_ok = 0, num_overloaded = 0;
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + ": " + bodies[i].substr(0, 300));
    if (statuses[i] == 200) {
      ++num_ok;
      if (i % 4 != 3) {
        EXPECT_EQ(json::parse(bodies[i])["usage"]["completion_tokens"], kMaxTokens);
      }
    } else {
      EXPECT_EQ(statuses[i], 503);
      ++num_overloaded;
      const json e = json::parse(bodies[i], nullptr, false);
      EXPECT_EQ(e["error"].value("type", ""), "server_overloaded");
      EXPECT_EQ(e["error"].value("code", 0), 503);
    }
  }
  EXPECT_GE(num_ok, 1);
  EXPECT_GE(num_overloaded, 1) << "8 concurrent requests against 1 running + 1 queued slot were all accepted";
}

}  // namespace
}  // namespace spindle::testing
