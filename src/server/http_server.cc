#include "server/http_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/algorithm/string/predicate.hpp>
#include <cctype>
#include <ctime>

#include "engine/dp_group.h"
#include "server/http_session.h"
#include "util/error.h"

namespace spindle::server {

using nlohmann::json;

namespace {

constexpr int kSocketSendBufferBytes = 256 << 10;
constexpr int kMaxProbeSessions = 64;  // open connections on the --health-port listener
constexpr int kAcceptsInFlight = 2;

// How many connections past max_connections are still read (to answer /health, or 503).
int overflow_slack(const HttpServerOptions& o) { return std::max(64, o.max_connections / 16); }

bool is_loopback_bind(const std::string& host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  return !ec && addr.is_loopback();
}

// "Host: name:port" -> "name" (lower case); "[::1]:8080" -> "[::1]".
std::string host_name(std::string_view value) {
  std::string host(value);
  if (!host.empty() && host.front() == '[') {
    host = host.substr(0, host.find(']') + 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host.resize(colon);
  }
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
  return host;
}

bool is_loopback_name(const std::string& host) {
  if (host == "localhost" || host.ends_with(".localhost") || host == "[::1]") return true;
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address_v4(host, ec);
  return !ec && addr.is_loopback();
}

bool listed(const std::vector<std::string>& list, std::string_view value) {
  return std::any_of(list.begin(), list.end(), [&](const std::string& v) { return v == "*" || boost::iequals(v, value); });
}

std::string percent_decode(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size() && std::isxdigit(static_cast<unsigned char>(in[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(in.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

}  // namespace

const char* reject_label(Reject r) {
  switch (r) {
    case Reject::kBodyTooLarge: return "body_too_large";
    case Reject::kHeadersTooLarge: return "headers_too_large";
    case Reject::kTooManyHeaders: return "too_many_headers";
    case Reject::kEncoding: return "unsupported_encoding";
    case Reject::kMalformed: return "malformed";
    case Reject::kRequestTimeout: return "request_timeout";
    case Reject::kIdleTimeout: return "idle_timeout";
    case Reject::kWriteTimeout: return "write_timeout";
    case Reject::kOverConnectionLimit: return "over_connection_limit";
    case Reject::kIdleEvicted: return "idle_evicted";
    case Reject::kStalledEvicted: return "stalled_evicted";
    case Reject::kMinRate: return "min_request_rate";
    case Reject::kPerClientLimit: return "per_client_limit";
    case Reject::kProbeLimit: return "health_port_limit";
    case Reject::kAuth: return "auth";
    case Reject::kHost: return "host";
    case Reject::kOrigin: return "origin";
    case Reject::kShutdown: return "shutdown";
    case Reject::kCount: break;
  }
  return "other";
}

bool constant_time_equal(const std::string& given, const std::string& expected) {
  // Every byte of `expected` is visited whatever `given` holds; the length mismatch is folded in.
  unsigned diff = given.size() == expected.size() ? 0u : 1u;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

long raise_open_files_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return -1;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? -1 : static_cast<long>(lim.rlim_cur);
}

HttpResponse make_response(http::status status, unsigned version, std::string body, const char* content_type) {
  HttpResponse res(status, version);
  if (!body.empty() || status != http::status::no_content) res.set(http::field::content_type, content_type);
  res.body() = std::move(body);
  return res;
}

HttpResponse error_response(const ApiError& e, unsigned version) {
  return make_response(static_cast<http::status>(e.status()), version, to_json_text(e.to_json()));
}

HttpServer::Impl::Impl(HttpServerOptions o)
    : options(std::move(o)),
      check_host(!listed(options.allowed_hosts, "*") &&
                 (is_loopback_bind(options.host) || !options.allowed_hosts.empty())),
      registry(ConnectionRegistry::Limits{.max_connections = options.max_connections,
                                          .overflow_slack = overflow_slack(options),
                                          .max_per_client = options.max_connections_per_client,
                                          .grace_s = options.stall_grace_s}),
      acceptor(ioc),
      probe_acceptor(ioc),
      drain_timer(ioc) {}

Route HttpServer::Impl::route(const HttpRequest& req, std::string* model_id) const {
  std::string_view target = req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const auto method = req.method();
  if (method == http::verb::options) return Route::kPreflight;
  auto get_only = [&](Route r) { return method == http::verb::get || method == http::verb::head ? r : Route::kWrongMethod; };
  auto post_only = [&](Route r) { return method == http::verb::post ? r : Route::kWrongMethod; };
  if (path == "/health") return get_only(Route::kHealth);
  if (path == "/metrics") return get_only(Route::kMetrics);
  if (path == "/v1/models") return get_only(Route::kModels);
  if (path.starts_with("/v1/models/") && path.size() > 11) {
    *model_id = percent_decode(path.substr(11));
    return get_only(Route::kModel);
  }
  if (path == "/v1/completions") return post_only(Route::kCompletions);
  if (path == "/v1/chat/completions") return post_only(Route::kChat);
  if (path == "/v1/responses") return post_only(Route::kResponses);
  if (path == "/v1/embeddings") return post_only(Route::kEmbeddings);
  if (path == "/tokenize") return post_only(Route::kTokenize);  // vLLM's paths
  if (path == "/detokenize") return post_only(Route::kDetokenize);
  if (path == "/internal/kv_integrity" && options.enable_debug_routes) return get_only(Route::kKvIntegrity);
  return Route::kNotFound;
}

std::optional<ApiError> HttpServer::Impl::check_access(const HttpRequest& req, Route route, Reject* why,
                                                       std::string* cors_origin) const {
  if (check_host) {
    if (auto it = req.find(http::field::host); it != req.end()) {
      const std::string host = host_name(it->value());
      if (!is_loopback_name(host) && !listed(options.allowed_hosts, host)) {
        *why = Reject::kHost;
        return ApiError(403, "permission_error", "",
                        fmt::format("Host '{}' is refused: this server listens on {} and answers loopback names only "
                                    "(a DNS-rebinding guard); allow it with --allowed-hosts",
                                    std::string(it->value()), options.host));
      }
    }
  }
  if (auto it = req.find(http::field::origin); it != req.end()) {
    // A browser sends Origin on every cross-origin request (and on same-origin POSTs); without an
    // allow-list any web page the operator opens could drive this server.
    if (!listed(options.allowed_origins, it->value())) {
      *why = Reject::kOrigin;
      return ApiError(403, "permission_error", "",
                      fmt::format("requests from the web origin '{}' are refused; allow it with --allowed-origins",
                                  std::string(it->value())));
    }
    const bool any = std::find(options.allowed_origins.begin(), options.allowed_origins.end(), "*") !=
                     options.allowed_origins.end();
    *cors_origin = any ? "*" : std::string(it->value());
  }
  const bool needs_key = route == Route::kModels || route == Route::kModel || route == Route::kCompletions ||
                         route == Route::kChat || route == Route::kResponses || route == Route::kEmbeddings ||
                         route == Route::kTokenize || route == Route::kDetokenize ||
                         route == Route::kKvIntegrity;
  if (needs_key && !options.api_key.empty()) {
    const auto it = req.find(http::field::authorization);
    const std::string given = it == req.end() ? std::string() : std::string(it->value());
    if (!constant_time_equal(given, "Bearer " + options.api_key)) {
      *why = Reject::kAuth;
      return ApiError(401, "authentication_error", "", "missing or invalid API key (Authorization: Bearer ...)");
    }
  }
  return std::nullopt;
}

HttpResponse HttpServer::Impl::health(unsigned version) const {
  engine::DpGroup* e = engine.load();
  if (e == nullptr) {
    return make_response(http::status::service_unavailable, version, to_json_text(json{{"status", "loading"}}));
  }
  // 503 "unhealthy" once no DP rank serves; 200 "ok", or "degraded" naming the failed ranks while
  // another serves (dp_size > 1 lists every rank).
  const engine::DpHealth h = e->health();
  json body = {{"status", h.status}};
  if (std::string reason = e->unhealthy_reason(); !reason.empty()) body["reason"] = std::move(reason);
  if (e->dp_size() > 1) {
    body["dp_size"] = e->dp_size();
    json ranks = json::array();
    for (const auto& r : h.ranks) {
      json rank = {{"dp_rank", r.rank}, {"status", r.up ? "ok" : "failed"}};
      if (!r.up) rank["error"] = r.error;
      ranks.push_back(std::move(rank));
    }
    body["ranks"] = std::move(ranks);
  }
  return make_response(h.status == "unhealthy" ? http::status::service_unavailable : http::status::ok, version,
                       to_json_text(body));
}

std::string HttpServer::Impl::render_http_metrics() const {
  std::string out;
  int open = 0, idle_now = 0;
  {
    std::lock_guard lock(const_cast<std::mutex&>(mutex));
    open = static_cast<int>(sessions.size());
    idle_now = registry.num_idle();
  }
  out += "# HELP spindle_http_connections_open Open HTTP connections.\n# TYPE spindle_http_connections_open gauge\n";
  out += fmt::format("spindle_http_connections_open {}\n", open);
  out += "# HELP spindle_http_connections_idle Open connections between requests (the first closed past the limit).\n"
         "# TYPE spindle_http_connections_idle gauge\n";
  out += fmt::format("spindle_http_connections_idle {}\n", idle_now);
  out += fmt::format("# TYPE spindle_http_connections_max gauge\nspindle_http_connections_max {}\n", options.max_connections);
  out += "# TYPE spindle_http_connections_accepted_total counter\n";
  out += fmt::format("spindle_http_connections_accepted_total {}\n", num_accepted.load());
  out += "# HELP spindle_http_rejected_total Requests or connections refused or cut, by reason.\n"
         "# TYPE spindle_http_rejected_total counter\n";
  for (size_t i = 0; i < static_cast<size_t>(Reject::kCount); ++i) {
    out += fmt::format("spindle_http_rejected_total{{reason=\"{}\"}} {}\n", reject_label(static_cast<Reject>(i)),
                       num_rejected[i].load());
  }
  return out;
}

HttpResponse HttpServer::Impl::metrics(unsigned version) const {
  engine::DpGroup* e = engine.load();
  if (e == nullptr) return make_response(http::status::service_unavailable, version, "# loading\n", "text/plain");
  return make_response(http::status::ok, version, e->render_metrics() + render_http_metrics(),
                       "text/plain; version=0.0.4");
}

void HttpServer::Impl::accept(tcp::acceptor& from, bool probe) {
  from.async_accept(asio::make_strand(ioc), [this, &from, probe](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !from.is_open()) return;
    if (ec) {
      // Out of file descriptors (or another transient failure): back off instead of spinning.
      static std::atomic<int64_t> last_log{0};
      const int64_t now = std::time(nullptr);
      if (last_log.exchange(now) != now) spdlog::warn("accept failed: {} (retrying)", ec.message());
      // A timer per waiting accept (several are in flight); a closed acceptor ends the retry.
      auto retry = std::make_shared<asio::steady_timer>(ioc, std::chrono::milliseconds(50));
      retry->async_wait([this, &from, probe, retry](beast::error_code e) {
        if (!e && from.is_open()) accept(from, probe);
      });
      return;
    }
    on_accepted(std::move(socket), probe);
    accept(from, probe);
  });
}

void HttpServer::Impl::on_accepted(tcp::socket socket, bool probe) {
  num_accepted.fetch_add(1, std::memory_order_relaxed);
  if (draining.load()) return;  // closed by the socket's destructor
  beast::error_code ec;
  const auto peer = socket.remote_endpoint(ec);
  const std::string client = ec ? std::string() : peer.address().to_string();
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  // A fixed send buffer: the kernel's autotuning would let each connection queue up to
  // tcp_wmem's maximum (4 MiB) for a client that does not read; this bounds it per connection,
  // so such a client reaches the write timeout.
  socket.set_option(asio::socket_base::send_buffer_size(kSocketSendBufferBytes), ignored);
  auto session = std::make_shared<Session>(std::move(socket), *this);
  std::optional<ConnectionRegistry::Victim> victim;
  {
    std::lock_guard lock(mutex);
    Session::Mode mode = Session::Mode::kProbe;
    if (probe) {
      if (num_probe_sessions >= kMaxProbeSessions) {
        count(Reject::kProbeLimit);
        return;  // closed at once
      }
      ++num_probe_sessions;
    } else {
      const auto a = registry.admit(next_id, client, std::chrono::steady_clock::now());
      if (a.kind == ConnectionRegistry::Kind::kRefusedFull || a.kind == ConnectionRegistry::Kind::kRefusedPerClient) {
        count(a.kind == ConnectionRegistry::Kind::kRefusedFull ? Reject::kOverConnectionLimit : Reject::kPerClientLimit);
        return;  // closed at once
      }
      mode = a.kind == ConnectionRegistry::Kind::kOverflow ? Session::Mode::kOverflow : Session::Mode::kNormal;
      victim = a.victim;
    }
    session->assign(next_id, mode);  // before start(): no other thread sees it yet
    sessions[next_id++] = session;
  }
  if (victim) close_victim(*victim);
  session->start();
}

void HttpServer::Impl::close_victim(const ConnectionRegistry::Victim& v) {
  std::shared_ptr<Session> s;
  {
    std::lock_guard lock(mutex);
    if (auto it = sessions.find(v.id); it != sessions.end()) s = it->second.lock();
  }
  if (s) s->close_to_make_room(v.activity == ConnectionRegistry::Activity::kIdle ? Reject::kIdleEvicted : Reject::kStalledEvicted);
}

void HttpServer::Impl::set_activity(uint64_t id, ConnectionRegistry::Activity activity) {
  std::lock_guard lock(mutex);
  registry.set_activity(id, activity, std::chrono::steady_clock::now());
}

bool HttpServer::Impl::promote(uint64_t id) {
  std::optional<ConnectionRegistry::Victim> victim;
  bool promoted = false;
  {
    std::lock_guard lock(mutex);
    promoted = registry.promote(id, &victim);
  }
  if (victim) close_victim(*victim);
  return promoted;
}

void HttpServer::Impl::release(uint64_t id) {
  std::lock_guard lock(mutex);
  registry.remove(id);
}

void HttpServer::Impl::unregister(uint64_t id, bool probe) {
  {
    std::lock_guard lock(mutex);
    if (probe) {
      --num_probe_sessions;
    } else {
      registry.remove(id);
    }
    sessions.erase(id);
  }
  if (draining.load() && !stopped.load()) asio::post(ioc, [this] { finish_if_drained(); });
}

std::vector<std::shared_ptr<Session>> HttpServer::Impl::live_sessions() {
  std::vector<std::shared_ptr<Session>> out;
  std::lock_guard lock(mutex);
  for (auto& [ptr, weak] : sessions) {
    if (auto s = weak.lock()) out.push_back(std::move(s));
  }
  return out;
}

void HttpServer::Impl::begin_shutdown() {
  if (draining.exchange(true)) return;
  asio::post(ioc, [this] {
    beast::error_code ignored;
    acceptor.close(ignored);
    probe_acceptor.close(ignored);
    const auto live = live_sessions();
    spdlog::info("shutting down: {} open connections, {:.0f} s to finish (--shutdown-timeout)", live.size(),
                 options.shutdown_timeout_s);
    for (const auto& s : live) s->drain();
    drain_timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(options.shutdown_timeout_s)));
    drain_timer.async_wait([this](beast::error_code ec) {
      if (ec) return;
      const auto left = live_sessions();
      spdlog::warn("shutdown timeout: ending {} requests", left.size());
      for (const auto& s : left) s->abort("the server is shutting down");
      // What is still open a few seconds later is closed by stop_now().
      drain_timer.expires_after(std::chrono::seconds(3));
      drain_timer.async_wait([this](beast::error_code e) {
        if (!e) stop_now();
      });
    });
    finish_if_drained();
  });
}

void HttpServer::Impl::finish_if_drained() {
  bool empty = false;
  {
    std::lock_guard lock(mutex);
    empty = sessions.empty();
  }
  if (empty) stop_now();
}

void HttpServer::Impl::stop_now() {
  beast::error_code ignored;
  acceptor.close(ignored);
  probe_acceptor.close(ignored);
  drain_timer.cancel();
  if (signals) signals->cancel(ignored);
  work_guard.reset();
  ioc.stop();
}

HttpServer::HttpServer(HttpServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::set_engine(engine::DpGroup* engine) { impl_->engine.store(engine); }

void HttpServer::set_pooling(PoolingConfig pooling) { impl_->pooling = std::move(pooling); }

namespace {

// Opens `a` on host:port (SO_REUSEADDR only: a restart may bind over TIME_WAIT; never
// SO_REUSEPORT, which would let a second server share the port) and returns the bound port.
int listen_on(asio::io_context& ioc, tcp::acceptor& a, const std::string& host, int port, const char* what) {
  try {
    tcp::resolver resolver(ioc);
    const auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive);
    SPINDLE_CHECK(!endpoints.empty(), "no address for {}", host);
    const tcp::endpoint endpoint = *endpoints.begin();
    a.open(endpoint.protocol());
    a.set_option(asio::socket_base::reuse_address(true));
    a.bind(endpoint);
    a.listen(asio::socket_base::max_listen_connections);
  } catch (const boost::system::system_error& e) {
    SPINDLE_CHECK(false, "cannot listen on {}:{}{} ({})", host, port, what, e.code().message());
  }
  return a.local_endpoint().port();
}

}  // namespace

int HttpServer::bind() {
  auto& impl = *impl_;
  const auto& o = impl.options;
  const int port = listen_on(impl.ioc, impl.acceptor, o.host, o.port, "");
  if (o.health_port >= 0) listen_on(impl.ioc, impl.probe_acceptor, o.host, o.health_port, " (--health-port)");
  return port;
}

int HttpServer::health_port() const {
  if (!impl_->probe_acceptor.is_open()) return -1;
  return impl_->probe_acceptor.local_endpoint().port();
}

void HttpServer::handle_signals(std::function<void(int)> on_signal) {
  auto& impl = *impl_;
  impl.on_signal = std::move(on_signal);
  impl.signals.emplace(impl.ioc, SIGINT, SIGTERM);
  auto wait = std::make_shared<std::function<void()>>();
  *wait = [&impl, wait_weak = std::weak_ptr<std::function<void()>>(wait)] {
    impl.signals->async_wait([&impl, wait_weak](beast::error_code ec, int signo) {
      if (ec) return;
      if (impl.on_signal) impl.on_signal(signo);
      if (impl.draining.load()) {
        spdlog::warn("second signal: stopping now");
        impl.stop_now();
        return;
      }
      impl.begin_shutdown();
      if (auto again = wait_weak.lock()) (*again)();
    });
  };
  impl.signal_wait = wait;
  (*wait)();
}

void HttpServer::start() {
  auto& impl = *impl_;
  SPINDLE_CHECK(impl.io_threads.empty(), "the HTTP server is already started");
  impl.work_guard.emplace(impl.ioc.get_executor());
  impl.work = std::make_unique<asio::thread_pool>(std::max(1, impl.options.num_work_threads));
  // Two accepts in flight: a flood's connections queue in the kernel's listen backlog ahead of
  // a probe's, so the time a probe waits there is the backlog over the accept rate.
  for (int i = 0; i < kAcceptsInFlight; ++i) impl.accept(impl.acceptor, /*probe=*/false);
  if (impl.probe_acceptor.is_open()) impl.accept(impl.probe_acceptor, /*probe=*/true);
  for (int i = 0; i < std::max(1, impl.options.num_io_threads); ++i) {
    impl.io_threads.emplace_back([&impl] {
      for (;;) {
        try {
          impl.ioc.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("HTTP I/O thread: {}", e.what());  // a handler threw: keep serving
        }
      }
    });
  }
}

void HttpServer::shutdown() { impl_->begin_shutdown(); }

void HttpServer::wait() {
  for (auto& t : impl_->io_threads) {
    if (t.joinable()) t.join();
  }
  if (impl_->work) impl_->work->join();
}

void HttpServer::stop() {
  if (!impl_) return;
  std::lock_guard lock(impl_->stop_mutex);
  if (impl_->stopped.exchange(true)) return;
  impl_->draining.store(true);
  asio::post(impl_->ioc, [impl = impl_.get()] { impl->stop_now(); });
  impl_->ioc.stop();
  wait();
  // Sessions still referenced by unrun handlers are destroyed with the io_context.
}

}  // namespace spindle::server
