// What an HTTP session relays while the engine works on a request (http_session.h): the events of
// submitted engine requests turned into one response, without ever waiting. CompletionRelay
// (completion_handler.h) answers completions and chat, ResponsesRelay (responses_relay.h)
// /v1/responses, EmbeddingRelay (embeddings_handler.h) /v1/embeddings. Not thread-safe: one
// caller at a time.
//
// The base keeps what every relay does alike: the engine requests it reads and which of them have
// finished (an unfinished one is cancelled when the client goes, and when the relay is destroyed,
// which also clears their wake-ups), whether everything has been handed out, and the once-only
// abort of a stream. The formats (JSON bodies, SSE events) are the subclasses'.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "engine/request_stream.h"

namespace spindle::server {

class Relay {
 public:
  virtual ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // The engine requests whose events it reads (the session sets their wake-ups).
  const std::vector<std::shared_ptr<engine::RequestStream>>& streams() const { return streams_; }
  // Server-sent events (take_events, abort_stream) rather than one body (poll, response).
  virtual bool streaming() const = 0;
  // Streaming: every event available now, concatenated; "" when nothing new.
  virtual std::string take_events() = 0;
  // Whole response: consumes what is available; true once every request has finished.
  virtual bool poll() = 0;
  // After poll() returned true: the response body. Throws ApiError (500) when a request failed.
  virtual nlohmann::json response() const = 0;
  // Everything has been handed out.
  bool done() const { return done_; }
  // The client is gone (or the server stops): cancels every unfinished request.
  void cancel();
  // Streaming: the events that end the stream now (abort_events(reason)); cancels every unfinished
  // request. "" once done.
  std::string abort_stream(const std::string& reason);

 protected:
  // streams: [one per engine request], none finished yet.
  explicit Relay(std::vector<std::shared_ptr<engine::RequestStream>> streams);

  // Pops request i's next output unless it has finished; false when nothing new has come.
  bool next_output(size_t i, engine::RequestOutput& out);
  bool finished(size_t i) const { return finished_[i]; }
  // Request i has given its last output: cancel() leaves it alone.
  void set_finished(size_t i) { finished_[i] = true; }
  // Streaming: the format's events that end an aborted stream, naming `reason`.
  virtual std::string abort_events(const std::string& reason) = 0;

  bool done_ = false;

 private:
  std::vector<std::shared_ptr<engine::RequestStream>> streams_;
  std::vector<bool> finished_;  // [streams_.size()]
};

}  // namespace spindle::server
