// The OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions (SSE streaming or
// not), /v1/embeddings, /v1/models, /v1/models/{id}, /health, /metrics; /internal/kv_integrity only with
// enable_debug_routes.
//
// Event-driven (Boost.Beast over Asio): a connection is a socket and a small state object, never
// a thread; a few I/O threads run every connection, a few work threads parse, tokenize and submit
// (so a 4 MiB prompt never delays /health), and a generation streams by being woken from the
// engine (RequestStream::set_notify), one write in flight per connection (backpressure: a
// client that does not read is cut off after write_timeout and its request cancelled).
//
// Every limit is enforced while the request arrives, before any handler or the API key check
// sees it: body bytes as they arrive (Content-Length or chunked), header bytes and count, the
// time from a request's first byte to its last, idle keep-alive time, open connections. A bad
// request is a 4xx JSON error naming what was wrong; the server keeps serving.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/pooling_config.h"

namespace spindle::engine {
class DpGroup;
}

namespace spindle::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                      // empty: no auth on /v1
  size_t max_body_bytes = 4 << 20;          // decoded body bytes; more is 413
  size_t max_header_bytes = 16 << 10;       // request line + header fields; more is 431
  int max_header_count = 100;               // header fields; more is 431
  double request_timeout_s = 30;            // a request's first byte to its last body byte
  double keep_alive_timeout_s = 15;         // idle before a request (the first one included)
  double write_timeout_s = 30;              // one response write or SSE event may block this long
  // Open connections. Past it the connection idle or stalled mid-request the longest (beyond
  // stall_grace_s) is closed to make room; connections being answered never are (see
  // connection_registry.h). With none to close, up to max(64, max_connections / 16) more answer
  // one /health or /metrics request (anything else 503).
  int max_connections = 4096;
  int max_connections_per_client = 0;       // open connections per client address; 0: no cap
  double stall_grace_s = 1.0;               // inactivity before a connection may be closed to make room
  // A request's head and body must arrive at this rate once min_rate_grace_s has passed (bytes
  // received >= (elapsed - grace) x rate), else it is closed: a trickling client holds a place
  // for seconds, not for the whole request_timeout. 0: no minimum.
  double min_request_rate = 500;            // bytes/s
  double min_rate_grace_s = 5;
  int health_port = -1;                     // a second listener for /health and /metrics only; -1: none, 0: any
  double shutdown_timeout_s = 30;           // drain: in-flight requests get this long, then are aborted
  int num_io_threads = 2;
  int num_work_threads = 2;
  // Origin values a browser may send (CORS); empty: requests carrying an Origin are refused (403).
  // "*" allows any.
  std::vector<std::string> allowed_origins;
  // Host header values accepted besides the loopback names (localhost, *.localhost, 127.x.x.x,
  // [::1]). When bound to a loopback address only those are accepted (DNS-rebinding guard);
  // elsewhere any Host is, unless this list is given. "*" accepts any.
  std::vector<std::string> allowed_hosts;
  bool enable_debug_routes = false;         // /internal/kv_integrity (tests, debugging)
};

// What a signal or shutdown() does once serving: stop accepting, close idle connections, let
// running requests finish for shutdown_timeout_s, then end the rest (a 503 JSON error, or an SSE
// error event and [DONE]) and close.
class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Until set, /health and /v1/* answer 503 (the model is loading). The engine must outlive the
  // server's serving (wait() returned, or stop()).
  void set_engine(engine::DpGroup* engine);
  // How /v1/embeddings pools (model/pooling_config.h); before set_engine (default: last token).
  void set_pooling(PoolingConfig pooling);
  // Binds and listens; returns the bound port (useful with port 0). Throws spindle::Error naming
  // host:port when the address is taken or unusable. Binds the health port too, if asked for.
  int bind();
  // The bound --health-port listener's port, or -1.
  int health_port() const;
  // Starts the I/O and work threads; returns at once.
  void start();
  // SIGINT/SIGTERM: `on_signal(signo)` runs on an I/O thread (it may exit the process), then the
  // first signal starts shutdown() and a second stops at once. Call before start().
  void handle_signals(std::function<void(int)> on_signal);
  // The graceful drain described above; thread-safe, returns at once.
  void shutdown();
  // Blocks until the server has stopped (drained, or stop()).
  void wait();
  // Closes everything now and joins the threads. Idempotent.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force.
long raise_open_files_limit();

// Equal strings, in a time that depends on the length of `expected` only (API keys).
bool constant_time_equal(const std::string& given, const std::string& expected);

}  // namespace spindle::server
