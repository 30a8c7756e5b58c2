// Private to server/: one HTTP/1.1 connection. Every member runs on the connection's strand (the
// socket's executor); the public entry points below may be called from any thread and post there.
//
// States: idle (keep-alive, waiting for a request's first byte; keep_alive_timeout) -> reading
// (head then body, read by hand so each read is progress the registry sees; one deadline of
// request_timeout for the whole request, earlier when the bytes fall behind min_request_rate)
// -> working (on the work
// pool: parse, tokenize, submit) -> generating (woken by the engine; the socket is watched so a
// client that hangs up cancels its request) -> writing -> idle again or closed.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/completion_handler.h"
#include "server/http_server_impl.h"

namespace spindle::server {

// The read that ends a keep-alive wait, and that watches a streaming client for a disconnect.
inline constexpr size_t kFirstReadBytes = 1024;

class Session : public std::enable_shared_from_this<Session> {
 public:
  enum class Mode {
    kNormal,    // admitted inside max_connections
    kOverflow,  // past it with none to close: answers one request (/health, /metrics; else 503)
    kProbe,     // on the --health-port listener: /health and /metrics only
  };

  Session(tcp::socket socket, HttpServer::Impl& server);
  ~Session();
  // Once, before start(): its registry id and kind.
  void assign(uint64_t id, Mode mode);

  uint64_t id() const { return id_; }
  // Thread-safe entry points.
  void start();
  // The registry took this connection's place: close it if it is still idle or reading (counted
  // as `why`); a request already complete is answered, then the connection closes.
  void close_to_make_room(Reject why);
  void drain();                    // shutdown begun: idle closes now, busy ones after this response
  void abort(std::string reason);  // shutdown timeout: end whatever runs with an answer, then close

 private:
  enum class State { kIdle, kReading, kWorking, kGenerating, kWriting, kClosed };

  void await_request();
  void begin_request();
  void read_more();
  void on_read(beast::error_code ec, size_t n);
  void parse_buffered();
  void arm_read_deadline();
  void on_header();
  void on_body();
  void on_read_error(beast::error_code ec);
  void set_activity(ConnectionRegistry::Activity activity);
  void dispatch();
  void run_tokenize(bool tokenize);
  void run_generation(bool chat);
  void start_generation(std::shared_ptr<GenerationRequest> request, Submitted submitted);
  void run_embeddings();
  void run_responses();  // /v1/responses (responses_relay.h)
  // A body that is multipart form data: refused with a 415 (true), else false.
  bool refused_multipart();
  // On the work pool: `make` parses the body and submits it, returning its relay; an ApiError (or a
  // 500 naming `what`) is answered, else the relay starts back on the strand (cancelled if the
  // connection closed meanwhile).
  using MakeRelay = std::function<std::shared_ptr<Relay>(engine::DpGroup& engine, const std::string& body)>;
  void relay_from_work_pool(const char* what, MakeRelay make);
  // Relays `relay`'s events (JSON or SSE) while the client is watched for disconnects.
  void start_relay(std::shared_ptr<Relay> relay);
  void pump();
  void write_events(std::string text);
  void on_stream_written(beast::error_code ec);
  void finish_events();
  void watch_client();
  void reject(Reject why, const ApiError& e);
  void respond(HttpResponse res);
  void on_response_written(beast::error_code ec);
  void set_common_fields(http::fields& fields) const;
  bool written(beast::error_code ec);
  void end_exchange();
  void linger_close();
  void linger_read(size_t discarded);
  void close();

  HttpServer::Impl& server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  State state_ = State::kIdle;
  uint64_t id_ = 0;  // 0 until assigned
  Mode mode_ = Mode::kNormal;
  // The request being read: its first byte's time, bytes so far, and whether the read deadline
  // armed last is the minimum rate's (earlier than request_timeout's).
  std::chrono::steady_clock::time_point request_start_;
  uint64_t request_bytes_ = 0;
  bool rate_deadline_ = false;
  // The request being served.
  Route route_ = Route::kNotFound;
  std::string model_id_;        // GET /v1/models/{id}
  std::string cors_origin_;     // Access-Control-Allow-Origin to send, or ""
  unsigned version_ = 11;
  bool keep_alive_ = true;      // the client's wish and ours
  std::optional<std::string> abort_reason_;
  // Writes in flight (one at a time).
  std::unique_ptr<HttpResponse> res_;
  std::unique_ptr<http::response<http::empty_body>> head_;   // 100 Continue, or the SSE head
  std::unique_ptr<http::response_serializer<http::empty_body>> head_sr_;
  std::string events_;          // the SSE text being written
  bool writing_ = false;
  // Generation.
  std::shared_ptr<Relay> relay_;  // the session's only owner (shared: it crosses the work pool)
  bool watching_ = false;                 // a read on the raw socket detects a hang-up
  std::function<void()> after_watch_;     // runs once the watch read has completed
  std::vector<char> linger_buf_;        // discarded input while lingering before close
};

}  // namespace spindle::server
