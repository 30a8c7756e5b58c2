// spindle serve [MODEL_DIR]: the OpenAI-compatible server. Listens first (so /health answers 503
// while loading), then builds the stack, logs the resolved configuration and serves until
// SIGINT/SIGTERM, which drains (server/http_server.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/ip/address.hpp>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/serving_stack.h"
#include "server/http_server.h"
#include "util/error.h"
#include "util/switches.h"
#include "util/thread_pool.h"

namespace spindle::cli {
namespace {

constexpr const char* kApiKeyEnv = "SPINDLE_API_KEY";

struct ServeArgs {
  ServingFlags serving;
  server::HttpServerOptions http;
  std::string api_key_file;
};

// --api-key, else --api-key-file (the first line), else $SPINDLE_API_KEY; "" for none.
std::string resolve_api_key(const ServeArgs& a) {
  SPINDLE_CHECK(a.http.api_key.empty() || a.api_key_file.empty(), "give --api-key or --api-key-file, not both");
  if (!a.http.api_key.empty()) {
    spdlog::warn("--api-key is visible to every user of this machine (ps); prefer --api-key-file or ${}", kApiKeyEnv);
    return a.http.api_key;
  }
  if (!a.api_key_file.empty()) {
    std::ifstream in(a.api_key_file);
    SPINDLE_CHECK(in.good(), "cannot read --api-key-file {}", a.api_key_file);
    std::string key;
    std::getline(in, key);
    while (!key.empty() && (key.back() == '\r' || key.back() == ' ' || key.back() == '\t')) key.pop_back();
    SPINDLE_CHECK(!key.empty(), "--api-key-file {} holds no key on its first line", a.api_key_file);
    return key;
  }
  return switches().api_key;  // SPINDLE_API_KEY (util/switches.h)
}

bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  const auto addr = boost::asio::ip::make_address(host, ec);
  return !ec && addr.is_loopback();
}

void run_serve(ServeArgs& a) {
  a.http.api_key = resolve_api_key(a);
  if (a.http.api_key.empty() && !is_loopback(a.http.host)) {
    spdlog::warn("listening on {} without an API key: anyone who can reach it can use it (--api-key-file or ${})",
                 a.http.host, kApiKeyEnv);
  }
  SPINDLE_CHECK(a.http.max_connections >= 1, "--max-connections must be at least 1");
  SPINDLE_CHECK(a.http.max_connections_per_client >= 0, "--max-connections-per-client must be 0 (no cap) or more");
  SPINDLE_CHECK(a.http.min_request_rate >= 0, "--min-request-rate must be 0 (off) or more bytes/s");
  SPINDLE_CHECK(a.http.health_port >= -1 && a.http.health_port <= 65535, "--health-port must be a port number (0: any)");
  SPINDLE_CHECK(a.http.max_body_bytes >= 1 && a.http.max_header_bytes >= 256,
                "--max-body-bytes must be at least 1 and --max-header-bytes at least 256");
  SPINDLE_CHECK(a.http.request_timeout_s > 0 && a.http.keep_alive_timeout_s > 0 && a.http.write_timeout_s > 0 &&
                    a.http.shutdown_timeout_s >= 0,
                "the HTTP timeouts must be positive");
  // Each connection is a file descriptor: take what the hard limit allows, and keep the
  // connection limit inside it (the model's files, the listener and the logs need some too).
  const long files = server::raise_open_files_limit();
  if (files > 0 && a.http.max_connections + 256 > files) {
    const int limit = static_cast<int>(std::max(16L, files - 256));
    spdlog::warn("--max-connections {} exceeds the open-files limit {} (ulimit -n): using {}", a.http.max_connections,
                 files, limit);
    a.http.max_connections = limit;
  }
  // A CPU --dp-size beyond the cores (or a bad router flag) is refused before listening
  // (build_serving_stack checks the same once the model config is read).
  if (a.serving.server.device == "cpu") {
    const int dp_size = std::max(1, a.serving.server.kv.dp_size);
    config::resolve_dp(a.serving.server.dp, dp_size, num_usable_cores(), a.serving.server.num_threads, /*cuda=*/false,
                       -1, 0);
    config::check_cpu_rank_layout(dp_size, num_usable_cores(), a.serving.server.num_threads);
  }
  server::HttpServer http(a.http);
  const int port = http.bind();
  std::atomic<bool> serving{false};
  http.handle_signals([&serving](int signo) {
    if (serving.load()) {
      spdlog::info("signal {}: draining (a second signal stops at once)", signo);
      return;
    }
    // Nothing to drain while the model loads, and loading cannot be interrupted: exit now.
    spdlog::warn("signal {} while loading: exiting", signo);
    spdlog::shutdown();
    std::_Exit(128 + signo);
  });
  http.start();
  spdlog::info("listening on http://{}:{} (loading the model; /health answers 503 until ready; open files {})",
               a.http.host, port, files);
  if (http.health_port() >= 0) spdlog::info("health port: http://{}:{}/health and /metrics", a.http.host, http.health_port());

  std::unique_ptr<ServingStack> stack;
  try {
    stack = build_serving_stack(a.serving);
  } catch (...) {
    http.stop();  // start-up failed: exit non-zero now, without waiting for clients
    throw;
  }
  log_serving_stack(*stack);
  spdlog::info("/v1/embeddings pools the {} token(s) ({}), L2-normalised", stack->pooling.mode_name(),
               stack->pooling.source);
  http.set_pooling(stack->pooling);
  http.set_engine(stack->group.get());
  serving.store(true);
  spdlog::info("ready: http://{}:{}/v1 serving '{}'", a.http.host, port, stack->model_name);
  fmt::print(stderr,
             "Try:\n  curl http://{}:{}/v1/completions -H 'Content-Type: application/json' -d "
             "'{{\"model\": \"{}\", \"prompt\": \"And God said\", \"max_tokens\": 32}}'\n",
             a.http.host, port, stack->model_name);
  http.wait();
  http.stop();
  http.set_engine(nullptr);
  spdlog::info("stopped");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto& h = a->http;
  auto* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible API (default model: the embedded kjv-tiny)");
  add_serving_flags(*cmd, a->serving);
  cmd->add_option("--host", h.host, "Address to listen on (127.0.0.1)");
  cmd->add_option("--port", h.port, "Port (8080; 0 picks a free one)");
  cmd->add_option("--api-key", h.api_key, "Require 'Authorization: Bearer KEY' on /v1 (visible in ps: prefer the file or $SPINDLE_API_KEY)");
  cmd->add_option("--api-key-file", a->api_key_file, "Read the API key from the first line of this file");
  cmd->add_option("--max-body-bytes", h.max_body_bytes, "Largest request body, counted as it arrives (4 MiB)");
  cmd->add_option("--max-header-bytes", h.max_header_bytes, "Largest request line + headers (16 KiB)");
  cmd->add_option("--max-header-count", h.max_header_count, "Most header fields in a request (100)");
  cmd->add_option("--request-timeout", h.request_timeout_s, "Seconds from a request's first byte to its last (30)");
  cmd->add_option("--keep-alive-timeout", h.keep_alive_timeout_s, "Seconds an idle connection stays open (15)");
  cmd->add_option("--write-timeout", h.write_timeout_s, "Seconds one write to a client may block before it is cut off (30)");
  cmd->add_option("--max-connections", h.max_connections,
                  "Open connections; past it the one idle or stalled mid-request the longest is closed, never one being "
                  "answered; /health and /metrics always answer (4096)");
  cmd->add_option("--max-connections-per-client", h.max_connections_per_client,
                  "Open connections one client address may hold, loopback included; 0 = no cap (0; behind a proxy keep 0)");
  cmd->add_option("--min-request-rate", h.min_request_rate,
                  "Bytes/s a request's head and body must keep up with after the first 5 s, else it is closed; 0 = off (500)");
  cmd->add_option("--health-port", h.health_port,
                  "Also serve /health and /metrics (only) on this port, for probes clients never reach; 0 = any free port");
  cmd->add_option("--shutdown-timeout", h.shutdown_timeout_s,
                  "Seconds SIGTERM/SIGINT lets running requests finish before ending them (30)");
  cmd->add_option("--http-threads", h.num_io_threads, "Threads for connection I/O (2)");
  cmd->add_option("--http-work-threads", h.num_work_threads, "Threads that parse, tokenize and submit requests (2)");
  cmd->add_option("--allowed-origins", h.allowed_origins,
                  "Web origins allowed to call the API (CORS), or '*'; default none: requests with an Origin get 403")
      ->delimiter(',');
  cmd->add_option("--allowed-hosts", h.allowed_hosts,
                  "Host header values accepted besides loopback names (checked when bound to loopback), or '*'")
      ->delimiter(',');
  cmd->add_flag("--enable-debug-routes", h.enable_debug_routes,
                "Serve /internal/kv_integrity (a full KV scan on the engine thread; for tests)");
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace spindle::cli
