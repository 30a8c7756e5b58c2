// Private to server/: the state every connection shares (HttpServer::Impl) and one connection
// (Session). Boost.Beast/Asio types stay out of http_server.h.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/connection_registry.h"
#include "server/http_server.h"
#include "server/openai_protocol.h"

namespace spindle::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

class Session;

// What a request's head asks for.
enum class Route {
  kHealth, kMetrics, kModels, kModel, kCompletions, kChat, kResponses, kEmbeddings, kTokenize, kDetokenize, kKvIntegrity, kPreflight, kNotFound,
  kWrongMethod
};

// Why a connection or request was refused or cut: the label of spindle_http_rejected_total.
enum class Reject {
  kBodyTooLarge, kHeadersTooLarge, kTooManyHeaders, kEncoding, kMalformed, kRequestTimeout, kIdleTimeout,
  kWriteTimeout, kOverConnectionLimit, kIdleEvicted, kStalledEvicted, kMinRate, kPerClientLimit, kProbeLimit, kAuth,
  kHost, kOrigin, kShutdown, kCount
};
const char* reject_label(Reject r);

struct HttpServer::Impl {
  explicit Impl(HttpServerOptions o);

  const HttpServerOptions options;
  const bool check_host;  // the Host header is checked (loopback bind, or --allowed-hosts given)
  // Declared before the io_context: sessions destroyed with its pending handlers unregister here.
  std::atomic<engine::DpGroup*> engine{nullptr};
  PoolingConfig pooling;  // set before engine (HttpServer::set_pooling), read after loading it
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};
  std::mutex stop_mutex;  // stop() from several threads
  std::function<void(int)> on_signal;

  // Counters for /metrics.
  std::atomic<uint64_t> num_accepted{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Reject::kCount)> num_rejected{};
  void count(Reject r) { num_rejected[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed); }

  // Open connections (guarded by mutex): every session by id, and the admission bookkeeping of
  // the main listener's (ConnectionRegistry: idle and reading connections by last activity).
  std::mutex mutex;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;
  ConnectionRegistry registry;
  uint64_t next_id = 1;
  int num_probe_sessions = 0;  // on the --health-port listener

  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_guard;
  tcp::acceptor acceptor;
  tcp::acceptor probe_acceptor;  // --health-port: /health and /metrics only
  asio::steady_timer drain_timer;
  std::optional<asio::signal_set> signals;
  std::shared_ptr<std::function<void()>> signal_wait;
  std::unique_ptr<asio::thread_pool> work;  // parse, tokenize, submit; blocking engine calls
  std::vector<std::thread> io_threads;

  // Accepting, the registry, shutdown.
  void accept(tcp::acceptor& from, bool probe);
  void on_accepted(tcp::socket socket, bool probe);
  // Closes a connection the registry took to make room, if it is still idle or reading.
  void close_victim(const ConnectionRegistry::Victim& victim);
  // The session became idle, read request bytes, or has a complete request (ConnectionRegistry).
  void set_activity(uint64_t id, ConnectionRegistry::Activity activity);
  // An overflow session's request is complete: admit it (closing a victim if one must leave).
  bool promote(uint64_t id);
  void release(uint64_t id);  // closed: out of the registry (the session may live on a little)
  void unregister(uint64_t id, bool probe);
  std::vector<std::shared_ptr<Session>> live_sessions();
  void begin_shutdown();
  void finish_if_drained();
  void stop_now();

  // The request side, called by sessions.
  Route route(const HttpRequest& req, std::string* model_id) const;
  // Host, Origin and API key checks on the head. *cors_origin is set to the value to send in
  // Access-Control-Allow-Origin ("" for none).
  std::optional<ApiError> check_access(const HttpRequest& req, Route route, Reject* why, std::string* cors_origin) const;
  HttpResponse health(unsigned version) const;
  HttpResponse metrics(unsigned version) const;
  std::string render_http_metrics() const;
};

// A JSON (or other) response with the given status and body.
HttpResponse make_response(http::status status, unsigned version, std::string body,
                           const char* content_type = "application/json");
HttpResponse error_response(const ApiError& e, unsigned version);

}  // namespace spindle::server
