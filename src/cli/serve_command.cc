// spindle serve [MODEL_DIR]: the OpenAI-compatible server. Listens first (so /health answers 503
// while loading), then builds the stack, logs the resolved configuration and serves until
// SIGINT/SIGTERM.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/serving_stack.h"
#include "server/http_server.h"
#include "util/thread_pool.h"

namespace spindle::cli {
namespace {

struct ServeArgs {
  ServingFlags serving;
  server::HttpServerOptions http;
};

server::HttpServer* g_server = nullptr;

void on_signal(int) {
  if (g_server) g_server->stop();
}

void run_serve(ServeArgs& a) {
  // Each open request holds an HTTP thread for its whole generation: enough threads for every
  // running and queued request (so the queue limit answers 503) plus headroom for /health etc.
  // A CPU --dp-size beyond the cores (or a bad router flag) is refused before the HTTP threads,
  // sized per rank, are made (resolve() says the same later, after the model config is read).
  if (a.serving.server.device == "cpu") {
    config::resolve_dp(a.serving.server.dp, std::max(1, a.serving.server.kv.dp_size), num_usable_cores(),
                       a.serving.server.num_threads, /*cuda=*/false, -1, 0);
    config::check_cpu_rank_layout(std::max(1, a.serving.server.kv.dp_size), num_usable_cores(),
                                  a.serving.server.num_threads);
  }
  // The limits are per DP rank.
  const auto [max_running, max_queued] = config::resolve_request_limits(a.serving.server);
  const int dp_size = std::max(1, a.serving.server.kv.dp_size);
  a.http.num_http_threads = (max_running + max_queued) * dp_size + 16;
  server::HttpServer http(a.http);
  const int port = http.bind();
  g_server = &http;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::thread listener([&] { http.listen(); });
  spdlog::info("listening on http://{}:{} (loading the model; /health answers 503 until ready)", a.http.host, port);

  std::unique_ptr<ServingStack> stack;
  try {
    stack = build_serving_stack(a.serving);
  } catch (...) {
    http.stop();
    listener.join();
    g_server = nullptr;
    throw;
  }
  log_serving_stack(*stack);
  http.set_engine(stack->group.get());
  spdlog::info("ready: http://{}:{}/v1 serving '{}'", a.http.host, port, stack->model_name);
  fmt::print(stderr,
             "Try:\n  curl http://{}:{}/v1/completions -H 'Content-Type: application/json' -d "
             "'{{\"model\": \"{}\", \"prompt\": \"And God said\", \"max_tokens\": 32}}'\n",
             a.http.host, port, stack->model_name);
  listener.join();
  g_server = nullptr;
  http.set_engine(nullptr);
  spdlog::info("stopped");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible API (default model: the embedded kjv-tiny)");
  add_serving_flags(*cmd, a->serving);
  cmd->add_option("--host", a->http.host, "Address to listen on (127.0.0.1)");
  cmd->add_option("--port", a->http.port, "Port (8080; 0 picks a free one)");
  cmd->add_option("--api-key", a->http.api_key, "Require 'Authorization: Bearer KEY' on /v1");
  cmd->add_option("--max-body-bytes", a->http.max_body_bytes, "Largest request body (4 MiB)");
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace spindle::cli
