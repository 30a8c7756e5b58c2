// The real `spindle serve` on loopback against hostile and careless clients (issue 18): bodies and
// heads over the limits (memory measured), slow and idle connection floods (/health latency
// measured), a client that stops reading, 1,000 concurrent streams, SIGTERM under load, the
// connection limit. Every scenario is bounded in time and count; each test starts its own server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "raw_http.h"
#include "server_checks.h"
#include "spindle_server.h"
#include "support/spindle_binary.h"

namespace spindle::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kMaxBodyBytes = 65536;

std::unique_ptr<SpindleServer> start_server(const std::vector<std::string>& args) {
  std::string error;
  auto server = SpindleServer::start(args, &error);
  EXPECT_NE(server, nullptr) << error;
  return server;
}

std::string head(const std::string& method, const std::string& path, const std::string& extra = "") {
  return method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + "\r\n";
}

std::string metrics_text(SpindleServer& server) {
  auto client = server.client(10);
  return get(*client, "/metrics").body;
}

double rejected(SpindleServer& server, const std::string& reason) {
  return labelled_metric(metrics_text(server), "spindle_http_rejected_total{reason=\"" + reason + "\"}");
}

// One raw exchange: connect, send, read the answer until the server closes (or 5 s).
RawRead raw_exchange(int port, const std::string& bytes) {
  const int fd = connect_loopback(port);
  if (fd < 0) return {};
  send_all(fd, bytes);
  RawRead r = read_all(fd, milliseconds(5000));
  ::close(fd);
  return r;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Chunked and compressed bodies over the limit are refused while they arrive: the server's peak
// resident memory grows by far less than what was sent.
TEST(ServerHostileTest, OversizedChunkedAndCompressedBodiesKeepMemoryBounded) {
  auto server = start_server({"--max-body-bytes", std::to_string(kMaxBodyBytes)});
  ASSERT_NE(server, nullptr);
  auto client = server->client();
  ASSERT_EQ(post(*client, "/v1/completions", json{{"prompt", "And God said"}, {"max_tokens", 2}}).status, 200);
  const long peak_before = peak_rss_kib(server->pid());
  ASSERT_GT(peak_before, 0);

  // A chunked body that would never end: 256 MiB offered in 64 KiB chunks, sent from a thread
  // while this one reads the answer.
  {
    const int fd = connect_loopback(server->port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, head("POST", "/v1/completions", "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n")));
    std::atomic<size_t> sent{0};
    std::thread sender([&] {
      const std::string chunk = "10000\r\n" + std::string(65536, ' ') + "\r\n";
      for (int i = 0; i < 4096 && send_all(fd, chunk, milliseconds(3000)); ++i) sent += 65536;
    });
    const RawRead r = read_all(fd, milliseconds(10000));
    sender.join();
    ::close(fd);
    EXPECT_EQ(http_status(r.data), 413) << r.data.substr(0, 300);
    EXPECT_THAT(http_body(r.data), ::testing::HasSubstr("--max-body-bytes"));
    EXPECT_LT(sent.load(), size_t{64} << 20) << "the server read far past the limit";
    RecordProperty("chunked_bytes_sent_before_cut", std::to_string(sent.load()));
  }
  // Content-Length far over the limit: refused from the head, the body never read.
  {
    const RawRead r = raw_exchange(server->port(), head("POST", "/v1/completions", "Content-Length: 4294967296\r\n"));
    EXPECT_EQ(http_status(r.data), 413) << r.data.substr(0, 300);
  }
  // Compressed bodies (a gzip bomb inflates 4 MiB into 4 GiB): 415, whatever the size or framing.
  for (const std::string framing : {"Content-Length: 4194304\r\n", "Content-Length: 100\r\n", "Transfer-Encoding: chunked\r\n"}) {
    for (const std::string encoding : {"gzip", "br", "deflate"}) {
      const int fd = connect_loopback(server->port());
      ASSERT_GE(fd, 0);
      send_all(fd, head("POST", "/v1/completions", framing + "Content-Encoding: " + encoding + "\r\n"));
      std::thread sender([fd] { send_all(fd, std::string(1 << 20, '\x1f'), milliseconds(2000)); });
      const RawRead r = read_all(fd, milliseconds(5000));
      sender.join();
      ::close(fd);
      EXPECT_EQ(http_status(r.data), 415) << framing << encoding << ": " << r.data.substr(0, 300);
      EXPECT_THAT(http_body(r.data), ::testing::HasSubstr(encoding));
    }
  }
  // Transfer codings other than chunked are refused too.
  EXPECT_EQ(http_status(raw_exchange(server->port(), head("POST", "/v1/completions", "Transfer-Encoding: gzip, chunked\r\n")).data), 415);
  const long peak_after = peak_rss_kib(server->pid());
  RecordProperty("peak_rss_before_kib", std::to_string(peak_before));
  RecordProperty("peak_rss_after_kib", std::to_string(peak_after));
  EXPECT_LT(peak_after - peak_before, 32 * 1024) << "peak RSS grew from " << peak_before << " to " << peak_after << " KiB";
  EXPECT_GE(rejected(*server, "body_too_large"), 2);
  EXPECT_GE(rejected(*server, "unsupported_encoding"), 9);
  EXPECT_TRUE(kv_settled(*client));
  EXPECT_EQ(post(*client, "/v1/completions", json{{"prompt", "And God said"}, {"max_tokens", 2}}).status, 200);
}

// Malformed framing and header floods: 4xx JSON naming the limit, at once, and serving goes on.
TEST(ServerHostileTest, HeaderFloodsAndBadFramingAreRefused) {
  auto server = start_server({});
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  struct Case {
    std::string what, bytes;
    int status;
    std::string message;
  };
  std::string many_headers = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 100000; ++i) many_headers += "X-" + std::to_string(i) + ": y\r\n";
  many_headers += "\r\n";
  std::string just_over_count = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 100; ++i) just_over_count += "X-" + std::to_string(i) + ": y\r\n";
  just_over_count += "\r\n";
  const std::vector<Case> cases = {
      {"Content-Length: -1", head("POST", "/v1/completions", "Content-Length: -1\r\n"), 400, "Content-Length"},
      {"two Content-Lengths", head("POST", "/v1/completions", "Content-Length: 5\r\nContent-Length: 6\r\n") + "{}", 400, ""},
      {"bad chunk size", head("POST", "/v1/completions", "Transfer-Encoding: chunked\r\n") + "zz\r\n", 400, ""},
      {"100k header fields", many_headers, 431, "--max-header-bytes"},
      {"101 header fields", just_over_count, 431, "--max-header-count"},
      {"a 64 KiB header line without a newline", "GET /health HTTP/1.1\r\nX-Long: " + std::string(65536, 'a'), 431,
       "--max-header-bytes"},
      {"not HTTP", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n", 400, ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const auto t0 = Clock::now();
    const RawRead r = raw_exchange(port, c.bytes);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
    EXPECT_EQ(http_status(r.data), c.status) << r.data.substr(0, 300);
    const json body = json::parse(http_body(r.data), nullptr, false);
    ASSERT_TRUE(body.is_object() && body.contains("error")) << r.data.substr(0, 300);
    EXPECT_EQ(body["error"].value("code", 0), c.status);
    if (!c.message.empty()) {
      EXPECT_THAT(body["error"].value("message", ""), ::testing::HasSubstr(c.message));
    }
  }
  // Exactly the limit of 100 fields (Host and 99 more) is served.
  std::string at_count = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (int i = 0; i < 98; ++i) at_count += "X-" + std::to_string(i) + ": y\r\n";
  EXPECT_EQ(http_status(raw_exchange(port, at_count + "\r\n").data), 200);
  auto client = server->client();
  EXPECT_EQ(get(*client, "/health").status, 200);
  EXPECT_TRUE(kv_settled(*client));
}

// 1,000 connections that send a head and then trickle their body hold nothing but sockets:
// /health answers within 100 ms at the 99th percentile, and the request deadline closes them.
TEST(ServerHostileTest, SlowBodiesDoNotDelayHealthAndAreCutAtTheDeadline) {
  constexpr int kSlow = 1000;
  ASSERT_GT(raise_fd_limit(), kSlow + 200);
  auto server = start_server({"--request-timeout", "4"});
  ASSERT_NE(server, nullptr);
  std::vector<int> fds;
  const std::string slow_head = head("POST", "/v1/completions", "Content-Type: application/json\r\nContent-Length: 1000\r\n") + "{\"pro";
  for (int i = 0; i < kSlow; ++i) {
    const int fd = connect_loopback(server->port());
    ASSERT_GE(fd, 0) << "connection " << i;
    ASSERT_TRUE(send_all(fd, slow_head));
    fds.push_back(fd);
  }
  const auto opened = Clock::now();
  // /health: fresh connections and one kept alive, while a byte per slow connection trickles in.
  std::vector<double> latencies_ms;
  auto keep = server->client(5);
  for (int i = 0; i < 400; ++i) {
    if (i % 4 == 0) send_all(fds[static_cast<size_t>(i) % fds.size()], "m", milliseconds(100));
    const auto t0 = Clock::now();
    int status = 0;
    if (i % 2 == 0) {
      status = get(*keep, "/health").status;
    } else {
      auto fresh = server->client(5);
      status = get(*fresh, "/health").status;
    }
    latencies_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    ASSERT_EQ(status, 200) << "health request " << i;
  }
  const double measured_s = std::chrono::duration<double>(Clock::now() - opened).count();
  const double p99 = percentile(latencies_ms, 0.99);
  RecordProperty("health_p50_ms", std::to_string(percentile(latencies_ms, 0.5)));
  RecordProperty("health_p99_ms", std::to_string(p99));
  EXPECT_LT(p99, 100.0) << "p50 " << percentile(latencies_ms, 0.5) << " ms";
  ASSERT_LT(measured_s, 3.5) << "the measurement outlasted the request deadline";
  // The deadline (4 s from each request's first byte) closes them all, whatever they trickle.
  int closed = 0;
  for (int fd : fds) {
    const RawRead r = read_all(fd, milliseconds(closed == 0 ? 8000 : 2000));
    if (r.closed) ++closed;
    ::close(fd);
  }
  EXPECT_EQ(closed, kSlow);
  // The server counts a rejection after it closed the socket, so the last ones may still be on
  // their way when the client has seen every close (seen under load: 999 of 1000).
  const auto counted_by = Clock::now() + std::chrono::seconds(3);
  while (rejected(*server, "request_timeout") < kSlow && Clock::now() < counted_by) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_GE(rejected(*server, "request_timeout"), kSlow);
  EXPECT_TRUE(kv_settled(*keep));
}

// 10,000 idle connections (more than --max-connections): the least recently idle are closed to
// make room, and a normal request is served.
TEST(ServerHostileTest, TenThousandIdleConnectionsThenANormalRequest) {
  const long limit = raise_fd_limit();
  const int num_idle = static_cast<int>(std::min<long>(10000, limit - 500));
  ASSERT_GE(num_idle, 5000) << "open-files limit " << limit;
  RecordProperty("idle_connections", std::to_string(num_idle));
  auto server = start_server({"--max-connections", "4096"});
  ASSERT_NE(server, nullptr);
  std::vector<int> fds;
  for (int i = 0; i < num_idle; ++i) {
    const int fd = connect_loopback(server->port());
    ASSERT_GE(fd, 0) << "connection " << i;
    fds.push_back(fd);
  }
  const long rss = rss_kib(server->pid());
  RecordProperty("rss_with_idle_kib", std::to_string(rss));
  auto client = server->client(30);
  const auto t0 = Clock::now();
  const JsonReply r = post(*client, "/v1/completions", json{{"prompt", "And God said"}, {"max_tokens", 4}});
  RecordProperty("request_ms", std::to_string(std::chrono::duration<double, std::milli>(Clock::now() - t0).count()));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(get(*client, "/health").status, 200);
  // Connections idle for less than a second take one of the max(64, 4096 / 16) = 256 overflow
  // places instead of closing an older one (admission by progress, issue 49).
  EXPECT_GE(rejected(*server, "idle_evicted"), num_idle - 4096 - 256);
  const std::string m = metrics_text(*server);
  EXPECT_LE(labelled_metric(m, "spindle_http_connections_open"), 4096 + 256 + 2);
  for (int fd : fds) ::close(fd);
  EXPECT_TRUE(kv_settled(*client));
}

// One try of the test below: 20 connections, each with a complete 480-token request
// (--max-running-requests 1: one runs, 19 wait, all busy), then a 21st connection. nullopt when a
// busy request finished before the 21st was answered: its connection was then idle and rightly
// gave its place, so the try proves nothing (a slow or loaded machine; the caller tries again).
struct OverLimitTry {
  std::unique_ptr<SpindleServer> server;
  std::vector<int> busy;
  RawRead over;
  RawRead health;
};
std::optional<OverLimitTry> try_past_connection_limit() {
  OverLimitTry t;
  t.server = start_server({"--max-connections", "20", "--max-running-requests", "1"});
  if (t.server == nullptr) return std::nullopt;
  const std::string body = json{{"prompt", "And God said"}, {"max_tokens", 480}, {"ignore_eos", true}}.dump();
  for (int i = 0; i < 20; ++i) {
    const int fd = connect_loopback(t.server->port());
    EXPECT_GE(fd, 0);
    send_all(fd, head("POST", "/v1/completions",
                      "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n") +
                     body);
    t.busy.push_back(fd);
  }
  // Until the engine holds all 20 (running or waiting): each connection's request is complete.
  for (int tries = 0; tries < 100; ++tries) {
    const std::string m = metrics_text(*t.server);
    if (labelled_metric(m, "spindle_num_requests_running") + labelled_metric(m, "spindle_num_requests_waiting") >= 20) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  t.over = raw_exchange(t.server->port(), head("POST", "/v1/completions", "Content-Length: 2\r\n") + "{}");
  t.health = raw_exchange(t.server->port(), head("GET", "/health"));
  if (labelled_metric(metrics_text(*t.server), "spindle_requests_finished_total") > 0) {
    for (int fd : t.busy) ::close(fd);
    return std::nullopt;
  }
  return t;
}

// Past --max-connections with every connection being answered (none idle or stalled to close):
// a completion is 503 JSON, while /health answers.
TEST(ServerHostileTest, PastTheConnectionLimitIs503AndHealthAnswers) {
  std::optional<OverLimitTry> t;
  for (int attempt = 0; attempt < 5 && !t; ++attempt) t = try_past_connection_limit();
  ASSERT_TRUE(t.has_value()) << "in 5 tries a busy request always finished before the 21st connection was answered";
  EXPECT_EQ(http_status(t->over.data), 503) << t->over.data.substr(0, 300);
  EXPECT_THAT(http_body(t->over.data), ::testing::HasSubstr("--max-connections"));
  EXPECT_EQ(http_status(t->health.data), 200) << t->health.data.substr(0, 300);
  for (int fd : t->busy) ::close(fd);
  std::this_thread::sleep_for(milliseconds(200));
  auto client = t->server->client();
  EXPECT_EQ(post(*client, "/v1/completions", json{{"prompt", "And God said"}, {"max_tokens", 2}}).status, 200);
  EXPECT_GE(rejected(*t->server, "over_connection_limit"), 1);
  EXPECT_TRUE(kv_settled(*client));
}

// 1,000 concurrent streaming requests on the embedded model all complete with exact usage.
TEST(ServerHostileTest, ThousandConcurrentStreamsCompleteWithExactUsage) {
  constexpr int kStreams = 1000;
  constexpr int kTokens = 8;
  ASSERT_GT(raise_fd_limit(), kStreams + 200);
  auto server = start_server({"--max-queued-requests", "2000"});
  ASSERT_NE(server, nullptr);
  std::vector<SseReply> replies(kStreams);
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      auto client = server->client(120);
      replies[i] = post_stream(*client, "/v1/completions",
                               json{{"prompt", "And it came to pass " + std::to_string(i)},
                                    {"max_tokens", kTokens},
                                    {"ignore_eos", true},
                                    {"logprobs", 0},
                                    {"stream", true},
                                    {"stream_options", {{"include_usage", true}}}});
    });
  }
  for (auto& t : threads) t.join();
  RecordProperty("seconds", std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()));
  int num_ok = 0;
  for (int i = 0; i < kStreams; ++i) {
    const SseReply& r = replies[i];
    int tokens = 0;
    json usage;
    for (const auto& e : r.events) {
      if (e.contains("usage")) usage = e["usage"];
      for (const auto& c : e.value("choices", json::array())) {
        if (c["logprobs"].is_object()) tokens += static_cast<int>(c["logprobs"]["tokens"].size());
      }
    }
    const bool ok = r.status == 200 && r.done && r.problems.empty() && tokens == kTokens &&
                    usage.value("completion_tokens", -1) == kTokens;
    if (!ok && num_ok == i) ADD_FAILURE() << "stream " << i << ": status " << r.status << " tokens " << tokens << " " << r.raw.substr(0, 400);
    num_ok += ok;
  }
  EXPECT_EQ(num_ok, kStreams);
  auto client = server->client();
  EXPECT_TRUE(kv_settled(*client, std::chrono::seconds(30)));
}

// A streaming client that stops reading is cut off after --write-timeout and its pages freed.
TEST(ServerHostileTest, AClientThatStopsReadingIsCutOff) {
  auto server = start_server({"--write-timeout", "1"});
  ASSERT_NE(server, nullptr);
  const int fd = connect_loopback(server->port(), /*rcvbuf=*/4096);
  ASSERT_GE(fd, 0);
  // About 5 MB of events (8 choices of 480 tokens with 20 top logprobs each).
  const std::string body = json{{"messages", {{{"role", "user"}, {"content", "Amen."}}}}, {"max_tokens", 480},
                                {"ignore_eos", true}, {"n", 8}, {"logprobs", true}, {"top_logprobs", 20}, {"stream", true}}
                               .dump();
  ASSERT_TRUE(send_all(fd, head("POST", "/v1/chat/completions",
                                "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n") +
                               body));
  auto client = server->client();
  // Never read: the server's writes stall, the write deadline closes the connection and cancels.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (rejected(*server, "write_timeout") < 1 && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(100));
  EXPECT_GE(rejected(*server, "write_timeout"), 1);
  EXPECT_TRUE(kv_settled(*client, std::chrono::seconds(10)));
  const auto m = server_metrics(*client);
  EXPECT_GE(metric(m, "spindle_requests_aborted_total"), 1);
  ::close(fd);
}

// SIGTERM while requests run: no new connections, the running ones finish (within
// --shutdown-timeout), every client gets its whole answer, and the server exits 0.
TEST(ServerHostileTest, SigtermDrainsRunningRequests) {
  auto server = start_server({"--shutdown-timeout", "60"});
  ASSERT_NE(server, nullptr);
  constexpr int kRequests = 8, kTokens = 48;
  std::vector<std::future<std::pair<int, int>>> results;  // status, completion tokens
  for (int i = 0; i < kRequests; ++i) {
    results.push_back(std::async(std::launch::async, [&, i] {
      auto client = server->client(60);
      const json body = {{"prompt", "And God said"}, {"max_tokens", kTokens}, {"ignore_eos", true},
                         {"stream", i % 2 == 1}, {"stream_options", {{"include_usage", true}}}};
      if (i % 2 == 1) {
        const SseReply r = post_stream(*client, "/v1/completions", body);
        int tokens = -1;
        for (const auto& e : r.events) {
          if (e.contains("usage")) tokens = e["usage"]["completion_tokens"];
        }
        return std::make_pair(r.done ? r.status : -1, tokens);
      }
      json plain = body;
      plain.erase("stream_options");
      const JsonReply r = post(*client, "/v1/completions", plain);
      return std::make_pair(r.status, r.status == 200 ? r.json["usage"]["completion_tokens"].get<int>() : -1);
    }));
  }
  // Once every request is running (or waiting), SIGTERM.
  auto probe = server->client(5);
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    const auto m = server_metrics(*probe);
    if (metric(m, "spindle_num_requests_running") + metric(m, "spindle_num_requests_waiting") >= kRequests) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(::kill(server->pid(), SIGTERM), 0);
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_LT(connect_loopback(server->port()), 0) << "still accepting after SIGTERM";
  for (auto& f : results) {
    const auto [status, tokens] = f.get();
    EXPECT_EQ(status, 200);
    EXPECT_EQ(tokens, kTokens);
  }
  bool graceful = false;
  EXPECT_EQ(server->stop(&graceful), 0);
  EXPECT_TRUE(graceful);
  EXPECT_THAT(server->log(), ::testing::HasSubstr("shutting down"));
}

// With a short --shutdown-timeout, requests that would run on are ended with an answer: a 503
// JSON error, or an SSE error event and [DONE]; the server exits promptly.
TEST(ServerHostileTest, SigtermAbortsWhatOutlastsTheShutdownTimeout) {
  auto server = start_server({"--shutdown-timeout", "0.5"});
  ASSERT_NE(server, nullptr);
  constexpr int kRequests = 6;
  std::vector<std::future<std::string>> results;
  for (int i = 0; i < kRequests; ++i) {
    results.push_back(std::async(std::launch::async, [&, i]() -> std::string {
      auto client = server->client(60);
      const json body = {{"prompt", "And God said"}, {"max_tokens", 500}, {"ignore_eos", true}, {"stream", i % 2 == 1}};
      if (i % 2 == 1) {
        const SseReply r = post_stream(*client, "/v1/completions", body);
        if (!r.done) return "stream without [DONE]: " + r.raw.substr(0, 200);
        if (r.events.empty() || !r.events.back().contains("error")) return "stream ended without an error event";
        return "";
      }
      const JsonReply r = post(*client, "/v1/completions", body);
      if (r.status != 503 || !r.json.contains("error")) return "status " + std::to_string(r.status) + ": " + r.body.substr(0, 200);
      return "";
    }));
  }
  auto probe = server->client(5);
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline && metric(server_metrics(*probe), "spindle_num_requests_running") < kRequests) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(server->pid(), SIGTERM), 0);
  for (auto& f : results) EXPECT_EQ(f.get(), "");
  bool graceful = false;
  EXPECT_EQ(server->stop(&graceful), 0);
  EXPECT_TRUE(graceful);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(8));
}

// A start-up failure (no such model folder) exits non-zero promptly, naming the problem.
TEST(ServerHostileTest, StartupFailureExitsNonZeroPromptly) {
  const auto t0 = Clock::now();
  const ChildResult r = run_child({spindle_binary(), "serve", "/nonexistent/model", "--port", std::to_string(free_loopback_port())},
                                  std::chrono::seconds(30));
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, ::testing::HasSubstr("/nonexistent/model"));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
}

}  // namespace
}  // namespace spindle::testing

namespace spindle::testing {
namespace {

// Starts a server with SPINDLE_SAMPLER_FAULT set (the test-only fault in engine/sampler.h).
std::unique_ptr<SpindleServer> start_with_fault(const std::string& fault) {
  ::setenv("SPINDLE_SAMPLER_FAULT", fault.c_str(), 1);
  auto server = start_server({});
  ::unsetenv("SPINDLE_SAMPLER_FAULT");
  return server;
}

// NaN logits end that request with an error (whole: 500; streamed: an error event, then
// [DONE]) and are counted; other requests and /health are unaffected.
TEST(ServerFaultTest, NonFiniteLogitsEndTheRequestWithAnError) {
  auto server = start_with_fault("nan:4242");
  ASSERT_NE(server, nullptr);
  auto client = server->client();
  const JsonReply bad = post(*client, "/v1/completions", json{{"prompt", "And God said"}, {"max_tokens", 8}, {"seed", 4242}});
  expect_api_error(bad, 500, "", "NaN logits");
  EXPECT_THAT(bad.json["error"].value("message", ""), ::testing::HasSubstr("non-finite logits"));
  const SseReply streamed = post_stream(*client, "/v1/completions",
                                        json{{"prompt", "And God said"}, {"max_tokens", 8}, {"seed", 4242}, {"stream", true}});
  EXPECT_EQ(streamed.status, 200);
  EXPECT_TRUE(streamed.done);
  ASSERT_FALSE(streamed.events.empty());
  EXPECT_TRUE(streamed.events.back().contains("error")) << streamed.raw;
  const JsonReply ok = post(*client, "/v1/completions", json{{"prompt", "And God said"}, {"max_tokens", 8}, {"seed", 1}});
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(get(*client, "/health").status, 200);
  const auto m = server_metrics(*client);
  EXPECT_EQ(metric(m, "spindle_non_finite_logits_total"), 2);
  EXPECT_EQ(metric(m, "spindle_healthy"), 1);
  EXPECT_TRUE(kv_settled(*client));
}

// A failed step (as a device error would fail it) turns the server unhealthy: /health is 503
// with the reason, and new requests are refused with 503 instead of running on.
TEST(ServerFaultTest, AFailedStepMarksTheServerUnhealthy) {
  auto server = start_with_fault("throw:77");
  ASSERT_NE(server, nullptr);
  auto client = server->client();
  expect_api_error(post(*client, "/v1/completions", json{{"prompt", "And God said"}, {"max_tokens", 4}, {"seed", 77}}), 500,
                   "", "the failing request");
  const JsonReply health = get(*client, "/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.json.value("status", ""), "unhealthy");
  EXPECT_THAT(health.json.value("reason", ""), ::testing::HasSubstr("injected step failure"));
  const JsonReply refused = post(*client, "/v1/completions", json{{"prompt", "And God said"}, {"max_tokens", 4}});
  expect_api_error(refused, 503, "", "after the failure");
  EXPECT_EQ(refused.json["error"].value("type", ""), "server_unhealthy");
  EXPECT_EQ(metric(server_metrics(*client), "spindle_step_failures_total"), 1);
  EXPECT_TRUE(server->alive());
}

}  // namespace
}  // namespace spindle::testing
