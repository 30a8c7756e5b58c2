// Private to server/: one HTTP/1.1 connection. Every member runs on the connection's strand (the
// socket's executor); the public entry points below may be called from any thread and post there.
//
// States: idle (keep-alive, waiting for a request's first byte; keep_alive_timeout) -> reading
// (head then body, one deadline of request_timeout for the whole request) -> working (on the work
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

class Session : public std::enable_shared_from_this<Session> {
 public:
  // overflow: accepted past max_connections with no idle connection to close: it answers one
  // request (/health normally, anything else 503) and closes.
  Session(tcp::socket socket, HttpServer::Impl& server, bool overflow);
  ~Session();

  bool overflow() const { return overflow_; }
  // Thread-safe entry points.
  void start();
  void close_if_idle();            // eviction: only while idle (between requests)
  void drain();                    // shutdown begun: idle closes now, busy ones after this response
  void abort(std::string reason);  // shutdown timeout: end whatever runs with an answer, then close

  // Registry fields, guarded by HttpServer::Impl::mutex.
  std::list<Session*>::iterator idle_it;
  bool in_idle_list = false;
  bool counted = false;  // inside Impl::admitted

 private:
  enum class State { kIdle, kReading, kWorking, kGenerating, kWriting, kClosed };

  void await_request();
  void begin_request();
  void on_header(beast::error_code ec);
  void read_body();
  void on_body(beast::error_code ec);
  void on_read_error(beast::error_code ec);
  void dispatch();
  void run_generation(bool chat);
  void start_generation(std::shared_ptr<GenerationRequest> request, Submitted submitted);
  void pump();
  void write_events(std::string text);
  void finish_events();
  void watch_client();
  void reject(Reject why, const ApiError& e);
  void respond(HttpResponse res);
  void end_exchange();
  void linger_close();
  void linger_read(size_t discarded);
  void close();

  HttpServer::Impl& server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  State state_ = State::kIdle;
  const bool overflow_;
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
  std::unique_ptr<CompletionRelay> relay_;
  bool watching_ = false;                 // a read on the raw socket detects a hang-up
  std::function<void()> after_watch_;     // runs once the watch read has completed
  std::vector<char> linger_buf_;        // discarded input while lingering before close
};

}  // namespace spindle::server
