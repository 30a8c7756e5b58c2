#include "server/http_session.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/algorithm/string/predicate.hpp>

#include "engine/dp_group.h"
#include "util/error.h"

namespace spindle::server {

using nlohmann::json;

namespace {

constexpr size_t kBufferSlack = 64 << 10;                    // read buffer beyond the header limit
constexpr auto kLingerTime = std::chrono::seconds(2);        // reading what a refused client still sends
constexpr size_t kLingerBytes = 1 << 20;

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

bool is_disconnect(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
         ec == asio::error::broken_pipe || ec == asio::error::not_connected || ec == asio::error::bad_descriptor;
}

}  // namespace

Session::Session(tcp::socket socket, HttpServer::Impl& server)
    : server_(server), stream_(std::move(socket)), buffer_(server.options.max_header_bytes + kBufferSlack) {}

Session::~Session() {
  if (id_ != 0) server_.unregister(id_, mode_ == Mode::kProbe);
}

void Session::assign(uint64_t id, Mode mode) {
  id_ = id;
  mode_ = mode;
}

void Session::set_activity(ConnectionRegistry::Activity activity) {
  if (mode_ != Mode::kProbe) server_.set_activity(id_, activity);
}

void Session::start() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->await_request(); });
}

void Session::close_to_make_room(Reject why) {
  asio::post(stream_.get_executor(), [self = shared_from_this(), why] {
    if (self->state_ == State::kIdle || self->state_ == State::kReading) {
      self->server_.count(why);
      self->close();
    } else {
      self->keep_alive_ = false;  // its place is taken: answer, then close
    }
  });
}

void Session::drain() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    self->keep_alive_ = false;
    if (self->state_ == State::kIdle) self->close();
  });
}

void Session::abort(std::string reason) {
  asio::post(stream_.get_executor(), [self = shared_from_this(), reason = std::move(reason)] {
    self->keep_alive_ = false;
    switch (self->state_) {
      case State::kGenerating:
        self->abort_reason_ = reason;
        if (!self->relay_->streaming()) {
          self->relay_->cancel();
          self->relay_.reset();
          self->reject(Reject::kShutdown, ApiError(503, "server_shutting_down", "", reason));
        } else {
          self->pump();
        }
        break;
      case State::kWriting:
        break;  // the answer is on its way; the connection closes after it
      default:
        self->close();
    }
  });
}

// Idle: wait for the first byte of the next request (keep-alive), unless it is buffered already.
void Session::await_request() {
  if (state_ == State::kClosed) return;
  if (!keep_alive_ || server_.draining.load()) {
    close();
    return;
  }
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(server_.options.max_header_bytes));
  // No body limit while the head is read: a Content-Length over the limit is refused in
  // on_header after the encoding check (a compressed body is 415 whatever its size), and the
  // limit is set there before any body byte is read (Beast then counts chunked bodies against it).
  parser_->body_limit(boost::none);
  route_ = Route::kNotFound;
  abort_reason_.reset();
  cors_origin_.clear();
  if (buffer_.size() > 0) {
    begin_request();
    return;
  }
  state_ = State::kIdle;
  set_activity(ConnectionRegistry::Activity::kIdle);
  stream_.expires_after(seconds(server_.options.keep_alive_timeout_s));
  stream_.async_read_some(buffer_.prepare(kFirstReadBytes),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            if (self->state_ == State::kClosed) return;
                            if (ec) {
                              if (ec == beast::error::timeout) self->server_.count(Reject::kIdleTimeout);
                              self->close();
                              return;
                            }
                            self->buffer_.commit(n);
                            self->begin_request();
                          });
}

// From the request's first byte: the head and the body under one deadline (see arm_read_deadline).
void Session::begin_request() {
  state_ = State::kReading;
  request_start_ = std::chrono::steady_clock::now();
  request_bytes_ = buffer_.size();
  set_activity(ConnectionRegistry::Activity::kReading);
  parse_buffered();
}

// request_timeout from the first byte, or earlier: once min_rate_grace_s has passed, the bytes
// so far must keep up with min_request_rate.
void Session::arm_read_deadline() {
  const auto& o = server_.options;
  const auto hard = request_start_ + seconds(o.request_timeout_s);
  rate_deadline_ = false;
  if (o.min_request_rate > 0) {
    const auto soft = request_start_ + seconds(o.min_rate_grace_s + static_cast<double>(request_bytes_) / o.min_request_rate);
    rate_deadline_ = soft < hard;
    stream_.expires_at(std::min(soft, hard));
    return;
  }
  stream_.expires_at(hard);
}

// One read from the socket into the buffer: each one that brings bytes is progress.
void Session::read_more() {
  const size_t room = buffer_.max_size() - buffer_.size();
  if (room == 0) {
    on_read_error(http::error::buffer_overflow);
    return;
  }
  arm_read_deadline();
  stream_.async_read_some(buffer_.prepare(std::min<size_t>(room, 16 << 10)),
                          [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_read(ec, n); });
}

void Session::on_read(beast::error_code ec, size_t n) {
  if (state_ == State::kClosed) return;
  if (n > 0) {
    buffer_.commit(n);
    request_bytes_ += n;
    set_activity(ConnectionRegistry::Activity::kReading);
  }
  if (ec) {
    on_read_error(ec);
    return;
  }
  parse_buffered();
}

// Feeds the buffered bytes to the parser: the head once whole (then on_header's checks, before
// any body byte is parsed), then the body; reads more while the message is incomplete.
void Session::parse_buffered() {
  while (buffer_.size() > 0 && !parser_->is_done()) {
    const bool had_header = parser_->is_header_done();
    beast::error_code ec;
    const size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == http::error::need_more) break;
    if (ec) {
      on_read_error(ec);
      return;
    }
    if (!had_header && parser_->is_header_done()) {
      on_header();
      return;
    }
    if (used == 0) break;
  }
  if (parser_->is_done()) {
    on_body();
    return;
  }
  read_more();
}

void Session::on_read_error(beast::error_code ec) {
  const auto& o = server_.options;
  if (ec == beast::error::timeout) {
    // The stream closed the socket: nobody to answer.
    server_.count(rate_deadline_ ? Reject::kMinRate : Reject::kRequestTimeout);
    close();
  } else if (ec == http::error::body_limit) {
    reject(Reject::kBodyTooLarge, ApiError(413, "invalid_request_error", "",
                                           fmt::format("request body too large: the limit is {} bytes (--max-body-bytes)",
                                                       o.max_body_bytes)));
  } else if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    reject(Reject::kHeadersTooLarge,
           ApiError(431, "invalid_request_error", "",
                    fmt::format("request head too large: the limit is {} bytes (--max-header-bytes)", o.max_header_bytes)));
  } else if (is_disconnect(ec)) {
    close();
  } else {
    reject(Reject::kMalformed, ApiError(400, "invalid_request_error", "", "malformed HTTP request: " + ec.message()));
  }
}

void Session::on_header() {
  const auto& o = server_.options;
  const HttpRequest& req = parser_->get();
  version_ = req.version();
  keep_alive_ = keep_alive_ && req.keep_alive() && mode_ != Mode::kOverflow;
  const auto num_fields = std::distance(req.begin(), req.end());
  if (num_fields > o.max_header_count) {
    reject(Reject::kTooManyHeaders,
           ApiError(431, "invalid_request_error", "",
                    fmt::format("the request has {} header fields; at most {} are accepted (--max-header-count)",
                                num_fields, o.max_header_count)));
    return;
  }
  // Bodies are taken as sent: a compressed one could inflate far past the body limit.
  if (auto it = req.find(http::field::content_encoding);
      it != req.end() && !boost::iequals(it->value(), "identity")) {
    reject(Reject::kEncoding, ApiError(415, "invalid_request_error", "",
                                       fmt::format("Content-Encoding '{}' is not accepted: send the body uncompressed",
                                                   std::string(it->value()))));
    return;
  }
  if (auto it = req.find(http::field::transfer_encoding);
      it != req.end() && !boost::iequals(it->value(), "chunked")) {
    reject(Reject::kEncoding, ApiError(415, "invalid_request_error", "",
                                       fmt::format("Transfer-Encoding '{}' is not accepted: only 'chunked' is",
                                                   std::string(it->value()))));
    return;
  }
  if (const auto length = parser_->content_length(); length && *length > o.max_body_bytes) {
    on_read_error(http::error::body_limit);
    return;
  }
  parser_->body_limit(o.max_body_bytes);
  route_ = server_.route(req, &model_id_);
  Reject why = Reject::kCount;
  if (auto refused = server_.check_access(req, route_, &why, &cors_origin_)) {
    reject(why, *refused);
    return;
  }
  if (mode_ == Mode::kProbe && route_ != Route::kHealth && route_ != Route::kMetrics) {
    reject(Reject::kCount, ApiError(404, "invalid_request_error", "",
                                    fmt::format("no route for {} on the health port: it serves /health and /metrics only",
                                                std::string(req.target()))));
    return;
  }
  if (route_ == Route::kNotFound || route_ == Route::kWrongMethod) {
    const int status = route_ == Route::kNotFound ? 404 : 405;
    reject(Reject::kCount, ApiError(status, "invalid_request_error", "",
                                    fmt::format("{} {} {}", status == 404 ? "no route for" : "method not allowed:",
                                                std::string(req.method_string()), std::string(req.target()))));
    return;
  }
  if (boost::iequals(req[http::field::expect], "100-continue") && !parser_->is_done()) {
    head_ = std::make_unique<http::response<http::empty_body>>(http::status::continue_, version_);
    http::async_write(stream_, *head_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->head_.reset();
      if (self->state_ == State::kClosed) return;
      if (ec) {
        self->close();
        return;
      }
      self->parse_buffered();
    });
    return;
  }
  parse_buffered();
}

void Session::on_body() {
  stream_.expires_never();
  dispatch();
}

void Session::dispatch() {
  state_ = State::kWorking;
  set_activity(ConnectionRegistry::Activity::kBusy);
  if (mode_ == Mode::kOverflow && route_ != Route::kHealth && route_ != Route::kMetrics &&
      server_.promote(id_)) {
    mode_ = Mode::kNormal;  // it made progress: a stalled connection left for it
  }
  if (mode_ == Mode::kOverflow && route_ != Route::kHealth && route_ != Route::kMetrics) {
    reject(Reject::kOverConnectionLimit,
           ApiError(503, "server_overloaded", "",
                    fmt::format("too many open connections (--max-connections {}); retry later",
                                server_.options.max_connections)));
    return;
  }
  if (server_.draining.load() &&
      (route_ == Route::kCompletions || route_ == Route::kChat || route_ == Route::kResponses ||
       route_ == Route::kEmbeddings)) {
    reject(Reject::kShutdown, ApiError(503, "server_shutting_down", "", "the server is shutting down"));
    return;
  }
  engine::DpGroup* engine = server_.engine.load();
  switch (route_) {
    case Route::kHealth: respond(server_.health(version_)); return;
    case Route::kMetrics: respond(server_.metrics(version_)); return;
    case Route::kPreflight: {
      HttpResponse res = make_response(http::status::no_content, version_, "");
      res.set(http::field::access_control_allow_methods, "GET, POST, OPTIONS");
      res.set(http::field::access_control_allow_headers, "Authorization, Content-Type");
      res.set(http::field::access_control_max_age, "600");
      respond(std::move(res));
      return;
    }
    default: break;
  }
  if (engine == nullptr) {
    respond(error_response(ApiError(503, "server_loading", "", "the model is still loading"), version_));
    return;
  }
  switch (route_) {
    case Route::kModels:
    case Route::kModel: {
      json model = {{"id", engine->model_name()}, {"object", "model"}, {"created", static_cast<int64_t>(std::time(nullptr))},
                    {"owned_by", "spindle"}, {"max_model_len", engine->max_model_len()}};
      if (route_ == Route::kModels) {
        respond(make_response(http::status::ok, version_, to_json_text(json{{"object", "list"}, {"data", json::array({model})}})));
      } else if (model_id_ == engine->model_name()) {
        respond(make_response(http::status::ok, version_, to_json_text(model)));
      } else {
        respond(error_response(ApiError(404, "invalid_request_error", "model",
                                        fmt::format("the model '{}' does not exist; this server serves '{}'", model_id_,
                                                    engine->model_name())),
                               version_));
      }
      return;
    }
    case Route::kKvIntegrity:
      // A full scan on the engine thread; the caller waits, so it runs on the work pool.
      asio::post(*server_.work, [self = shared_from_this(), engine] {
        std::string body;
        try {
          body = to_json_text(json{{"ok", engine->kv_integrity_ok()}});
        } catch (const std::exception& e) {
          body = to_json_text(ApiError(503, "server_shutting_down", "", e.what()).to_json());
        }
        asio::post(self->stream_.get_executor(), [self, body = std::move(body)]() mutable {
          if (self->state_ != State::kClosed) self->respond(make_response(http::status::ok, self->version_, std::move(body)));
        });
      });
      return;
    case Route::kCompletions:
    case Route::kChat: run_generation(route_ == Route::kChat); return;
    case Route::kResponses: run_responses(); return;
    case Route::kEmbeddings: run_embeddings(); return;
    case Route::kTokenize:
    case Route::kDetokenize: run_tokenize(route_ == Route::kTokenize); return;
    default: break;
  }
  reject(Reject::kCount, ApiError(404, "invalid_request_error", "", "no such route"));
}

void Session::reject(Reject why, const ApiError& e) {
  if (why != Reject::kCount) server_.count(why);
  keep_alive_ = false;  // the rest of the request is not read
  respond(error_response(e, version_));
}

void Session::respond(HttpResponse res) {
  if (state_ == State::kClosed) return;
  state_ = State::kWriting;
  if (server_.draining.load()) keep_alive_ = false;
  res.keep_alive(keep_alive_);
  set_common_fields(res);
  res.prepare_payload();
  res_ = std::make_unique<HttpResponse>(std::move(res));
  writing_ = true;
  stream_.expires_after(seconds(server_.options.write_timeout_s));
  http::async_write(stream_, *res_,
                    [self = shared_from_this()](beast::error_code ec, size_t) { self->on_response_written(ec); });
}

// The fields every response carries: Server, and the CORS pair where the request's Origin is allowed.
void Session::set_common_fields(http::fields& fields) const {
  fields.set(http::field::server, "spindle");
  if (!cors_origin_.empty()) {
    fields.set(http::field::access_control_allow_origin, cors_origin_);
    fields.set(http::field::vary, "Origin");
  }
}

// Whether the session goes on after a write of its response: a client that does not read is cut
// off (counted, even when the hang-up watch saw the closed socket first), any other error closes.
bool Session::written(beast::error_code ec) {
  writing_ = false;
  if (ec == beast::error::timeout) server_.count(Reject::kWriteTimeout);
  if (state_ == State::kClosed) return false;
  if (ec) {
    close();
    return false;
  }
  return true;
}

// A response, or a streamed one's last chunk, written: the exchange's buffers go, then the next
// request or a close.
void Session::on_response_written(beast::error_code ec) {
  res_.reset();
  relay_.reset();
  head_sr_.reset();
  head_.reset();
  if (written(ec)) end_exchange();
}

// The response is out: the next request on this connection, or a close.
void Session::end_exchange() {
  if (!keep_alive_) {
    linger_close();
    return;
  }
  if (watching_) {
    after_watch_ = [self = shared_from_this()] {
      if (self->state_ != State::kClosed) self->await_request();
    };
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
    return;
  }
  await_request();
}

// Closing with unread input makes the kernel send a reset, which can destroy the response
// before the client reads it: send FIN, then read and drop what still comes, for a while.
void Session::linger_close() {
  if (state_ == State::kClosed) return;
  state_ = State::kWriting;
  if (watching_) {
    after_watch_ = [self = shared_from_this()] { self->linger_close(); };
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
    return;
  }
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  linger_buf_.resize(16 << 10);
  stream_.expires_after(kLingerTime);
  linger_read(0);
}

void Session::linger_read(size_t discarded) {
  stream_.async_read_some(asio::buffer(linger_buf_), [self = shared_from_this(), discarded](beast::error_code ec, size_t n) {
    if (ec || discarded + n > kLingerBytes) {
      self->close();
      return;
    }
    self->linger_read(discarded + n);
  });
}

void Session::close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  if (relay_) {
    relay_->cancel();
    relay_.reset();
  }
  if (mode_ != Mode::kProbe) server_.release(id_);  // its place is free before the socket is gone
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
}

}  // namespace spindle::server
