// Connection floods past --max-connections (issue 49), against the real `spindle serve` with its
// default limits (4,096 connections): 8,000 connections from one loopback address that each send
// a request head and 10 of 100 body bytes, or half a head, or nothing (idle keep-alive), then
// stall. While the flood arrives and stays, a well-behaved client runs completions at C=16 and a
// prober asks /health on fresh connections every 20 ms, and on the --health-port listener, and
// one more client streams long completions (SSE), which must never be the connections closed.
// Admission by progress: every probe answers, p99 <= 100 ms; the well-behaved client loses no
// request; the counters name what was closed and why; afterwards every KV page is back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "raw_http.h"
#include "server_checks.h"
#include "spindle_server.h"

namespace spindle::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kFlood = 8000;
constexpr int kClients = 16;
constexpr double kHealthP99Ms = 100;

enum class Flood { kSlowBody, kSlowHeader, kIdle };

// What each flooding connection sends before it stalls.
std::string flood_bytes(Flood kind) {
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  switch (kind) {
    case Flood::kSlowBody: return head + "Content-Length: 100\r\n\r\n{\"prompt\":";  // 10 of 100 bytes
    case Flood::kSlowHeader: return head + "X-Slow: ";                                // never ends its head
    case Flood::kIdle: return "";                                                     // connects, sends nothing
  }
  return "";
}

// A TCP connection to 127.0.0.1:port from the loopback address `source` (e.g. 127.0.0.2), or -1.
int connect_loopback_from(const char* source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  remote.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct Probes {
  Clock::time_point start = Clock::now();
  std::vector<double> main_ms;    // /health on a fresh connection to the main port
  std::vector<double> main_at_s;  // when each was sent, from `start`
  int main_failed = 0;
  int health_port_failed = 0;     // /health on the --health-port listener
  int health_port_answered = 0;
};

// /health every 20 ms on fresh connections (main port and health port) until `stop`.
void probe_health(int port, int health_port, const std::atomic<bool>& stop, Probes* out) {
  while (!stop.load()) {
    const auto t0 = Clock::now();
    httplib::Client main("127.0.0.1", port);
    main.set_connection_timeout(2);
    main.set_read_timeout(2);
    auto r = main.Get("/health");
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (r && r->status == 200) {
      out->main_ms.push_back(ms);
      out->main_at_s.push_back(std::chrono::duration<double>(t0 - out->start).count());
    } else {
      ++out->main_failed;
    }
    httplib::Client probe("127.0.0.1", health_port);
    probe.set_connection_timeout(2);
    probe.set_read_timeout(2);
    auto p = probe.Get("/health");
    (p && p->status == 200) ? ++out->health_port_answered : ++out->health_port_failed;
    std::this_thread::sleep_for(milliseconds(20));
  }
}

struct Completions {
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};
  std::string first_failure;
  std::mutex mutex;
};

// kClients threads, each running short completions on fresh connections until `stop`.
void run_clients(const SpindleServer& server, const std::atomic<bool>& stop, Completions* out) {
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&server, &stop, out] {
      while (!stop.load()) {
        auto client = server.client(30);
        const JsonReply r = post(*client, "/v1/completions", json{{"prompt", "And God said"}, {"max_tokens", 4}});
        if (r.status == 200) {
          ++out->ok;
        } else {
          ++out->failed;
          std::lock_guard lock(out->mutex);
          if (out->first_failure.empty()) out->first_failure = std::to_string(r.status) + " " + r.body;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
}

// One client streaming long completions (SSE) on fresh connections until `stop`: a stream in
// progress is never closed to make room, so each must end with [DONE] and all its tokens.
void run_streams(const SpindleServer& server, const std::atomic<bool>& stop, Completions* out) {
  constexpr int kTokens = 200;
  while (!stop.load()) {
    auto client = server.client(60);
    const SseReply r = post_stream(*client, "/v1/completions",
                                   json{{"prompt", "And God said"}, {"max_tokens", kTokens}, {"ignore_eos", true},
                                        {"stream", true}, {"stream_options", {{"include_usage", true}}}});
    const bool whole = r.status == 200 && r.done && r.problems.empty() && !r.events.empty() &&
                       r.events.back().contains("usage") && r.events.back()["usage"]["completion_tokens"] == kTokens;
    if (whole) {
      ++out->ok;
    } else {
      ++out->failed;
      std::lock_guard lock(out->mutex);
      if (out->first_failure.empty()) out->first_failure = "stream: " + std::to_string(r.status) + " " + r.raw.substr(0, 300);
    }
  }
}

double rejected(SpindleServer& server, const std::string& reason) {
  auto client = server.client(10);
  return labelled_metric(get(*client, "/metrics").body, "spindle_http_rejected_total{reason=\"" + reason + "\"}");
}

void run_flood(Flood kind, const std::string& expected_reason) {
  const long limit = raise_fd_limit();
  if (limit < kFlood + 500) GTEST_SKIP() << "the open-files limit is " << limit << "; the flood needs " << kFlood + 500;
  const int health_port = free_loopback_port();
  std::string error;
  // One engine thread: on a 2-core test machine the engine at C=16 would otherwise take both
  // cores from the HTTP threads that answer the probes (a deployment has cores to spare).
  auto server = SpindleServer::start({"--health-port", std::to_string(health_port), "--threads", "1"}, &error);
  ASSERT_NE(server, nullptr) << error;

  std::atomic<bool> stop{false};
  Probes probes;
  Completions completions;
  std::thread prober(probe_health, server->port(), health_port, std::cref(stop), &probes);
  std::thread clients(run_clients, std::cref(*server), std::cref(stop), &completions);
  Completions streams;
  std::thread streamer(run_streams, std::cref(*server), std::cref(stop), &streams);
  // The flood: kFlood connections opened and stalled as fast as this thread can, then held.
  std::vector<int> fds;
  const std::string bytes = flood_bytes(kind);
  for (int i = 0; i < kFlood; ++i) {
    const int fd = connect_loopback(server->port());
    if (fd < 0) continue;  // the server closed it at once: counted below
    if (!bytes.empty()) send_all(fd, bytes, milliseconds(200));
    fds.push_back(fd);
  }
  const double flood_opened_s = std::chrono::duration<double>(Clock::now() - probes.start).count();
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the flood holds its places
  stop.store(true);
  prober.join();
  clients.join();
  streamer.join();

  const double p99 = percentile(probes.main_ms, 0.99);
  ::testing::Test::RecordProperty("health_probes", std::to_string(probes.main_ms.size()));
  ::testing::Test::RecordProperty("health_p50_ms", std::to_string(percentile(probes.main_ms, 0.5)));
  ::testing::Test::RecordProperty("health_p99_ms", std::to_string(p99));
  ::testing::Test::RecordProperty("completions", std::to_string(completions.ok.load()));
  EXPECT_EQ(probes.main_failed, 0) << "of " << probes.main_ms.size() + probes.main_failed << " /health probes";
  EXPECT_EQ(probes.health_port_failed, 0) << "of " << probes.health_port_answered + probes.health_port_failed;
  EXPECT_GE(probes.main_ms.size(), 20u);
  std::string slowest;  // the three slowest probes and when they were sent
  std::vector<size_t> order(probes.main_ms.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probes.main_ms[a] > probes.main_ms[b]; });
  for (size_t i = 0; i < std::min<size_t>(3, order.size()); ++i) {
    slowest += " " + std::to_string(probes.main_ms[order[i]]) + " ms at " + std::to_string(probes.main_at_s[order[i]]) + " s;";
  }
  EXPECT_LE(p99, kHealthP99Ms) << "p50 " << percentile(probes.main_ms, 0.5) << " ms; flood opened by "
                               << flood_opened_s << " s; slowest:" << slowest;
  EXPECT_EQ(completions.failed.load(), 0) << completions.first_failure;
  EXPECT_GT(completions.ok.load(), kClients);
  EXPECT_EQ(streams.failed.load(), 0) << streams.first_failure;
  EXPECT_GE(streams.ok.load(), 1);
  EXPECT_GE(rejected(*server, expected_reason), kFlood - 4096 - 256 - 100) << expected_reason;

  for (int fd : fds) ::close(fd);
  auto client = server->client(10);
  EXPECT_TRUE(kv_settled(*client));
  EXPECT_EQ(get(*client, "/health").status, 200);
}

TEST(ServerFloodTest, SlowBodiesPastTheLimitLeaveNewClientsServed) { run_flood(Flood::kSlowBody, "stalled_evicted"); }

TEST(ServerFloodTest, SlowHeadsPastTheLimitLeaveNewClientsServed) { run_flood(Flood::kSlowHeader, "stalled_evicted"); }

TEST(ServerFloodTest, IdleConnectionsPastTheLimitLeaveNewClientsServed) { run_flood(Flood::kIdle, "idle_evicted"); }

// --max-connections-per-client: one address gets no more than its cap, another address (here
// 127.0.0.2, also loopback) is unaffected; the refusals are counted.
TEST(ServerFloodTest, PerClientCapRefusesTheExcessOfOneAddress) {
  std::string error;
  auto server = SpindleServer::start({"--max-connections-per-client", "8"}, &error);
  ASSERT_NE(server, nullptr) << error;
  // GET PATH from 127.0.0.2 (another client address: never counted against 127.0.0.1's cap).
  auto get_from_other = [&](const std::string& path) {
    const int fd = connect_loopback_from("127.0.0.2", server->port());
    EXPECT_GE(fd, 0);
    send_all(fd, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    const RawRead r = read_all(fd, milliseconds(5000));
    ::close(fd);
    return r.data;
  };
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    fds.push_back(connect_loopback(server->port()));
    ASSERT_GE(fds.back(), 0) << "connection " << i;
  }
  // Until the server holds all 8 (its accepts run concurrently: on a loaded machine a fixed sleep
  // let the 9th be admitted before one of the 8, which was then refused in its place).
  for (int tries = 0; tries < 100; ++tries) {
    // (the count includes the /metrics connection itself)
    if (labelled_metric(http_body(get_from_other("/metrics")), "spindle_http_connections_open") >= 9) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  const int ninth = connect_loopback(server->port());
  ASSERT_GE(ninth, 0);
  const RawRead r = read_all(ninth, milliseconds(3000));
  EXPECT_TRUE(r.closed) << "the 9th connection from 127.0.0.1 should be closed at once";
  ::close(ninth);
  const std::string health = get_from_other("/health");
  EXPECT_EQ(http_status(health), 200) << health;
  for (int fd : fds) ::close(fd);
  EXPECT_GE(rejected(*server, "per_client_limit"), 1);
}

// --min-request-rate: a request that trickles below the rate is closed once the first 5 s have
// passed, well before --request-timeout, and counted as such.
TEST(ServerFloodTest, ATricklingRequestIsClosedByTheMinimumRate) {
  std::string error;
  auto server = SpindleServer::start({"--request-timeout", "60", "--min-request-rate", "100"}, &error);
  ASSERT_NE(server, nullptr) << error;
  const int fd = connect_loopback(server->port());
  ASSERT_GE(fd, 0);
  const auto t0 = Clock::now();
  send_all(fd, flood_bytes(Flood::kSlowBody));
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {  // a byte every 250 ms: 4 B/s, far below 100 B/s
    if (!send_all(fd, " ", milliseconds(100))) closed = true;
    const RawRead r = read_all(fd, milliseconds(250));
    closed = closed || r.closed;
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_GE(s, 4.5);
  EXPECT_LT(s, 9.0) << "closed by the request timeout, not the rate";
  EXPECT_GE(rejected(*server, "min_request_rate"), 1);
}

}  // namespace
}  // namespace spindle::testing
