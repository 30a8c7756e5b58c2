// What an HTTP session relays while the engine works on a request (http_session.h): the events of
// submitted engine requests turned into one response, without ever waiting. CompletionRelay
// (completion_handler.h) answers completions and chat, EmbeddingRelay (embeddings_handler.h)
// /v1/embeddings. Not thread-safe: one caller at a time. Destroying one cancels what has not
// finished.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "engine/request_stream.h"

namespace spindle::server {

class Relay {
 public:
  virtual ~Relay() = default;
  // The engine requests whose events it reads (the session sets their wake-ups).
  virtual const std::vector<std::shared_ptr<engine::RequestStream>>& streams() const = 0;
  // Server-sent events (take_events, abort_stream) rather than one body (poll, response).
  virtual bool streaming() const = 0;
  // Streaming: every event available now, concatenated; "" when nothing new.
  virtual std::string take_events() = 0;
  // Whole response: consumes what is available; true once every request has finished.
  virtual bool poll() = 0;
  // After poll() returned true: the response body. Throws ApiError (500) when a request failed.
  virtual nlohmann::json response() const = 0;
  // Everything has been handed out.
  virtual bool done() const = 0;
  // The client is gone (or the server stops): cancels every unfinished request.
  virtual void cancel() = 0;
  // Streaming: the events that end the stream now, naming `reason`; cancels the rest.
  virtual std::string abort_stream(const std::string& reason) = 0;
};

}  // namespace spindle::server
