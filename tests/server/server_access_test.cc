// Access rules and the OpenAI surface added in issue 18, end to end: the API key from a file or
// the environment, Origin (CORS) and Host (DNS-rebinding) refusals, the debug route behind its
// flag, n > 1 with usage summed, GET /v1/models/{id}.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "raw_http.h"
#include "server_checks.h"
#include "spindle_server.h"
#include "support/spindle_binary.h"

namespace spindle::testing {
namespace {

using nlohmann::json;

std::string request_with(const std::string& method, const std::string& path, const std::string& headers,
                         const std::string& body = "") {
  std::string r = method + " " + path + " HTTP/1.1\r\n" + headers + "Connection: close\r\n";
  if (!body.empty() || method == "POST") r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

RawRead raw_exchange(int port, const std::string& bytes) {
  const int fd = connect_loopback(port);
  if (fd < 0) return {};
  send_all(fd, bytes);
  RawRead r = read_all(fd, std::chrono::milliseconds(10000));
  ::close(fd);
  return r;
}

TEST(ServerAccessTest, HostAndOriginChecks) {
  std::string error;
  auto server = SpindleServer::start({"--allowed-origins", "http://ok.example", "--allowed-hosts", "spindle.internal"}, &error);
  ASSERT_NE(server, nullptr) << error;
  const int port = server->port();

  // Loopback names (with or without a port) and the listed host pass.
  for (const std::string& host : std::vector<std::string>{"127.0.0.1:" + std::to_string(port), "localhost", "LOCALHOST:1", "[::1]:80", "127.1.2.3",
                                 "spindle.internal:8080", "app.localhost"}) {
    EXPECT_EQ(http_status(raw_exchange(port, request_with("GET", "/v1/models", "Host: " + host + "\r\n")).data), 200) << host;
  }
  // A rebinding page's Host is refused, on every route.
  for (const std::string path : {"/v1/models", "/health", "/metrics"}) {
    const RawRead r = raw_exchange(port, request_with("GET", path, "Host: attacker.example\r\n"));
    EXPECT_EQ(http_status(r.data), 403) << path;
    EXPECT_THAT(http_body(r.data), ::testing::HasSubstr("--allowed-hosts"));
  }
  const std::string completion = json{{"prompt", "And God said"}, {"max_tokens", 2}}.dump();
  EXPECT_EQ(http_status(raw_exchange(port, request_with("POST", "/v1/completions", "Host: attacker.example:8080\r\n", completion)).data), 403);
  // A web page of another origin cannot post (text/plain needs no preflight, so it must be refused).
  {
    const RawRead r = raw_exchange(port, request_with("POST", "/v1/completions",
                                                  "Host: localhost\r\nOrigin: http://evil.example\r\nContent-Type: text/plain\r\n",
                                                  completion));
    EXPECT_EQ(http_status(r.data), 403) << r.data.substr(0, 300);
    EXPECT_THAT(http_body(r.data), ::testing::HasSubstr("--allowed-origins"));
  }
  // The allowed origin gets CORS headers, on the answer and on the preflight.
  {
    const RawRead r = raw_exchange(port, request_with("POST", "/v1/completions", "Host: localhost\r\nOrigin: http://ok.example\r\n", completion));
    EXPECT_EQ(http_status(r.data), 200) << r.data.substr(0, 300);
    EXPECT_THAT(r.data, ::testing::HasSubstr("Access-Control-Allow-Origin: http://ok.example"));
    const RawRead pre = raw_exchange(port, request_with("OPTIONS", "/v1/completions",
                                                    "Host: localhost\r\nOrigin: http://ok.example\r\n"
                                                    "Access-Control-Request-Method: POST\r\n"));
    EXPECT_EQ(http_status(pre.data), 204) << pre.data.substr(0, 300);
    EXPECT_THAT(pre.data, ::testing::HasSubstr("Access-Control-Allow-Methods"));
  }
  auto client = server->client();
  EXPECT_TRUE(kv_settled(*client));
}

TEST(ServerAccessTest, CorsIsOffByDefault) {
  std::string error;
  auto server = SpindleServer::start({}, &error);
  ASSERT_NE(server, nullptr) << error;
  const RawRead r = raw_exchange(server->port(), request_with("GET", "/v1/models", "Host: localhost\r\nOrigin: http://localhost:3000\r\n"));
  EXPECT_EQ(http_status(r.data), 403);
  EXPECT_THAT(r.data, ::testing::Not(::testing::HasSubstr("Access-Control-Allow-Origin")));
}

TEST(ServerAccessTest, ApiKeyFromAFileOrTheEnvironment) {
  const std::string key_file = temp_path("api_key");
  std::ofstream(key_file) << "file-key-123\n";
  std::string error;
  auto server = SpindleServer::start({"--api-key-file", key_file}, &error);
  ASSERT_NE(server, nullptr) << error;
  EXPECT_EQ(get(*server->client(10, "file-key-123"), "/v1/models").status, 200);
  expect_api_error(get(*server->client(10, "file-key-12"), "/v1/models"), 401, "", "a prefix of the key");
  expect_api_error(get(*server->client(10, "file-key-1234"), "/v1/models"), 401, "", "the key and more");
  expect_api_error(get(*server->client(10), "/v1/models"), 401, "", "no key");
  EXPECT_THAT(server->log(), ::testing::Not(::testing::HasSubstr("file-key-123")));
  server.reset();

  ::setenv("SPINDLE_API_KEY", "env-key-456", 1);
  server = SpindleServer::start({}, &error);
  ::unsetenv("SPINDLE_API_KEY");
  ASSERT_NE(server, nullptr) << error;
  EXPECT_EQ(get(*server->client(10, "env-key-456"), "/v1/models").status, 200);
  expect_api_error(get(*server->client(10), "/v1/models"), 401, "", "no key (env)");
  std::remove(key_file.c_str());
}

TEST(ServerAccessTest, DebugRouteOnlyBehindItsFlag) {
  const int port = free_loopback_port();
  const ChildResult never = run_child({spindle_binary(), "serve", "--port", std::to_string(port), "--no-backend-cache",
                                       "--attention-backend-policy", "priority", "--max-connections", "0"},
                                      std::chrono::seconds(30));
  EXPECT_NE(never.exit_code, 0) << "--max-connections 0 must be refused";
  std::string error;
  auto with_flag = SpindleServer::start({}, &error);
  ASSERT_NE(with_flag, nullptr) << error;
  EXPECT_EQ(get(*with_flag->client(), "/internal/kv_integrity").status, 200);
  auto plain = SpindleServer::start({}, &error, std::chrono::seconds(120), /*debug_routes=*/false);
  ASSERT_NE(plain, nullptr) << error;
  expect_api_error(get(*plain->client(), "/internal/kv_integrity"), 404, "", "without --enable-debug-routes");
}

TEST(ServerAccessTest, ModelByIdAndSeveralChoices) {
  std::string error;
  auto server = SpindleServer::start({}, &error);
  ASSERT_NE(server, nullptr) << error;
  auto client = server->client();
  const JsonReply model = get(*client, "/v1/models/kjv-tiny");
  ASSERT_EQ(model.status, 200) << model.body;
  EXPECT_EQ(model.json["id"], "kjv-tiny");
  EXPECT_EQ(model.json["object"], "model");
  expect_api_error(get(*client, "/v1/models/gpt-4"), 404, "model", "unknown model id");

  // n = 2: two choices, usage summed over them (the prompt counted once).
  const JsonReply two = post(*client, "/v1/completions",
                             json{{"prompt", "And God said"}, {"max_tokens", 6}, {"n", 2}, {"ignore_eos", true}, {"seed", 7}});
  ASSERT_EQ(two.status, 200) << two.body;
  ASSERT_EQ(two.json["choices"].size(), 2u);
  EXPECT_EQ(two.json["choices"][0]["index"], 0);
  EXPECT_EQ(two.json["choices"][1]["index"], 1);
  EXPECT_EQ(two.json["usage"]["completion_tokens"], 12);
  EXPECT_EQ(two.json["usage"]["total_tokens"], two.json["usage"]["prompt_tokens"].get<int>() + 12);
  // The same seed gives the same pair.
  const JsonReply again = post(*client, "/v1/completions",
                               json{{"prompt", "And God said"}, {"max_tokens", 6}, {"n", 2}, {"ignore_eos", true}, {"seed", 7}});
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(again.json["choices"], two.json["choices"]);
  // Chat, streamed: every chunk names its choice; each choice ends once; usage summed.
  const SseReply s = post_stream(*client, "/v1/chat/completions",
                                 json{{"messages", {{{"role", "user"}, {"content", "Who is the King of glory?"}}}},
                                      {"max_tokens", 5}, {"n", 3}, {"ignore_eos", true}, {"stream", true},
                                      {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  std::map<int, int> roles, finishes;
  json usage;
  for (const auto& e : s.events) {
    if (e.contains("usage")) usage = e["usage"];
    for (const auto& c : e["choices"]) {
      if (c["delta"].contains("role")) ++roles[c["index"].get<int>()];
      if (!c["finish_reason"].is_null()) ++finishes[c["index"].get<int>()];
    }
  }
  EXPECT_EQ(roles, (std::map<int, int>{{0, 1}, {1, 1}, {2, 1}}));
  EXPECT_EQ(finishes, (std::map<int, int>{{0, 1}, {1, 1}, {2, 1}}));
  EXPECT_EQ(usage.value("completion_tokens", -1), 15);
  EXPECT_TRUE(kv_settled(*client));
}

}  // namespace
}  // namespace spindle::testing
