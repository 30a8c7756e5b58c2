// Session's request handlers that run work off the connection's strand (http_session.h): the
// /tokenize and /detokenize answers, and a generation from its parsing and submission on the work
// pool to the events relayed as JSON or SSE while the client is watched for disconnects. The
// connection's reading, deadlines and closing stay in http_session.cc.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/algorithm/string/predicate.hpp>

#include "engine/dp_group.h"
#include "server/http_session.h"
#include "server/embeddings_handler.h"
#include "server/responses_relay.h"
#include "server/tokenize_handler.h"
#include "util/error.h"

namespace spindle::server {

using nlohmann::json;

namespace {

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

// /tokenize, /detokenize: on the work pool (a body may be megabytes), answered back on the strand.
void Session::run_tokenize(bool tokenize) {
  engine::DpGroup* engine = server_.engine.load();
  asio::post(*server_.work, [self = shared_from_this(), engine, tokenize, body = std::move(parser_->get().body())] {
    HttpResponse res;
    try {
      const size_t limit = self->server_.options.max_body_bytes;
      const json j = tokenize ? tokenize_response(*engine, body, limit) : detokenize_response(*engine, body, limit);
      res = make_response(http::status::ok, self->version_, to_json_text(j));
    } catch (const ApiError& e) {
      res = error_response(e, self->version_);
    } catch (const std::exception& e) {
      res = error_response(ApiError(500, "internal_error", "", e.what()), self->version_);
    }
    asio::post(self->stream_.get_executor(), [self, res = std::move(res)]() mutable {
      if (self->state_ != State::kClosed) self->respond(std::move(res));
    });
  });
}

// Parse, validate, tokenize and submit on the work pool; the generation starts back on the strand.
void Session::run_generation(bool chat) {
  if (refused_multipart()) return;
  engine::DpGroup* engine = server_.engine.load();
  asio::post(*server_.work, [self = shared_from_this(), engine, chat, body = std::move(parser_->get().body())] {
    std::shared_ptr<GenerationRequest> request;
    Submitted submitted;
    std::optional<ApiError> error;
    try {
      const size_t limit = self->server_.options.max_body_bytes;
      request = std::make_shared<GenerationRequest>(chat ? parse_chat_request(body, limit)
                                                         : parse_completion_request(body, limit));
      submitted = submit_request(*engine, *request);
    } catch (const ApiError& e) {
      error = e;
    } catch (const std::exception& e) {
      spdlog::error("request failed: {}", e.what());
      error = ApiError(500, "internal_error", "", e.what());
    }
    asio::post(self->stream_.get_executor(), [self, request, submitted = std::move(submitted), error]() mutable {
      if (error) {
        if (self->state_ != State::kClosed) self->respond(error_response(*error, self->version_));
        return;
      }
      self->start_generation(std::move(request), std::move(submitted));
    });
  });
}

void Session::start_generation(std::shared_ptr<GenerationRequest> request, Submitted submitted) {
  engine::DpGroup* engine = server_.engine.load();
  if (state_ == State::kClosed || engine == nullptr) {
    for (auto& s : submitted.streams) s->cancel();
    return;
  }
  start_relay(std::make_unique<CompletionRelay>(*engine, std::move(request), std::move(submitted)));
}

bool Session::refused_multipart() {
  if (!boost::istarts_with(parser_->get()[http::field::content_type], "multipart/form-data")) return false;
  reject(Reject::kCount, ApiError(415, "invalid_request_error", "",
                                  "request bodies must be JSON (Content-Type: application/json)"));
  return true;
}

void Session::relay_from_work_pool(const char* what, MakeRelay make) {
  engine::DpGroup* engine = server_.engine.load();
  asio::post(*server_.work, [self = shared_from_this(), engine, what, make = std::move(make),
                             body = std::move(parser_->get().body())] {
    std::shared_ptr<Relay> relay;
    std::optional<ApiError> error;
    try {
      relay = make(*engine, body);
    } catch (const ApiError& e) {
      error = e;
    } catch (const std::exception& e) {
      spdlog::error("{} request failed: {}", what, e.what());
      error = ApiError(500, "internal_error", "", e.what());
    }
    asio::post(self->stream_.get_executor(), [self, relay, error]() mutable {
      if (error) {
        if (self->state_ != State::kClosed) self->respond(error_response(*error, self->version_));
        return;
      }
      if (self->state_ == State::kClosed) {
        relay->cancel();
        return;
      }
      self->start_relay(std::move(relay));
    });
  });
}

// /v1/embeddings: parsed, tokenized and submitted on the work pool, answered as one JSON body.
void Session::run_embeddings() {
  const size_t limit = server_.options.max_body_bytes;
  const PoolingConfig* pooling = &server_.pooling;
  relay_from_work_pool("embeddings", [limit, pooling](engine::DpGroup& engine, const std::string& body) {
    return submit_embeddings(engine, parse_embedding_request(body, limit), *pooling);
  });
}

// /v1/responses: parsed, tokenized and submitted on the work pool like a chat request, relayed
// as the Responses API's object or events.
void Session::run_responses() {
  if (refused_multipart()) return;
  const size_t limit = server_.options.max_body_bytes;
  relay_from_work_pool("responses", [limit](engine::DpGroup& engine, const std::string& body) {
    ResponsesRequest request = parse_responses_request(body, limit);
    Submitted submitted = submit_responses_request(engine, request.generation);
    return std::shared_ptr<Relay>(std::make_shared<ResponsesRelay>(engine, request, std::move(submitted)));
  });
}

void Session::start_relay(std::shared_ptr<Relay> relay) {
  relay_ = std::move(relay);
  state_ = State::kGenerating;
  // The engine's wake-up: at most one pump posted at a time; the session may be gone by then.
  auto posted = std::make_shared<std::atomic<bool>>(false);
  auto wake = [weak = weak_from_this(), exec = stream_.get_executor(), posted] {
    if (posted->exchange(true)) return;
    asio::post(exec, [weak, posted] {
      posted->store(false);
      if (auto self = weak.lock()) self->pump();
    });
  };
  for (const auto& s : relay_->streams()) s->set_notify(wake);
  watch_client();
  if (!relay_->streaming()) {
    pump();
    return;
  }
  head_ = std::make_unique<http::response<http::empty_body>>(http::status::ok, version_);
  head_->set(http::field::content_type, "text/event-stream");
  head_->set(http::field::cache_control, "no-cache");
  set_common_fields(*head_);
  head_->keep_alive(keep_alive_);
  head_->chunked(true);
  head_sr_ = std::make_unique<http::response_serializer<http::empty_body>>(*head_);
  writing_ = true;
  stream_.expires_after(seconds(server_.options.write_timeout_s));
  http::async_write_header(stream_, *head_sr_,
                           [self = shared_from_this()](beast::error_code ec, size_t) { self->on_stream_written(ec); });
}

// A streamed response's head or event chunk written: the next events go out (a failed write
// closes the session, which cancels its request).
void Session::on_stream_written(beast::error_code ec) {
  if (written(ec)) pump();
}

// Moves what the engine produced to the client: one write at a time, the events that arrived
// meanwhile coalesced into the next one.
void Session::pump() {
  if (state_ != State::kGenerating || writing_ || !relay_) return;
  if (relay_->streaming()) {
    std::string text = abort_reason_ ? relay_->abort_stream(*abort_reason_) : relay_->take_events();
    if (!text.empty()) {
      write_events(std::move(text));
    } else if (relay_->done()) {
      finish_events();
    }
    return;
  }
  if (!relay_->poll()) return;
  HttpResponse res;
  try {
    res = make_response(http::status::ok, version_, to_json_text(relay_->response()));
  } catch (const ApiError& e) {
    res = error_response(e, version_);
  }
  relay_.reset();
  respond(std::move(res));
}

void Session::write_events(std::string text) {
  events_ = std::move(text);
  writing_ = true;
  stream_.expires_after(seconds(server_.options.write_timeout_s));
  asio::async_write(stream_, http::make_chunk(asio::buffer(events_)),
                    [self = shared_from_this()](beast::error_code ec, size_t) { self->on_stream_written(ec); });
}

void Session::finish_events() {
  writing_ = true;
  stream_.expires_after(seconds(server_.options.write_timeout_s));
  asio::async_write(stream_, http::make_chunk_last(),
                    [self = shared_from_this()](beast::error_code ec, size_t) { self->on_response_written(ec); });
}

// While generating, a read on the raw socket (no deadline) notices a client that hangs up; bytes
// a pipelining client sends stay in the buffer for its next request (and end the watch).
void Session::watch_client() {
  if (buffer_.size() > 0) return;  // pipelined input already: write errors will tell
  watching_ = true;
  stream_.socket().async_read_some(buffer_.prepare(kFirstReadBytes),
                                   [self = shared_from_this()](beast::error_code ec, size_t n) {
                                     self->watching_ = false;
                                     if (!ec) self->buffer_.commit(n);
                                     if (self->after_watch_) {
                                       auto next = std::move(self->after_watch_);
                                       self->after_watch_ = nullptr;
                                       next();
                                       return;
                                     }
                                     if (ec && self->state_ == State::kGenerating) self->close();  // gone
                                   });
}

}  // namespace spindle::server
