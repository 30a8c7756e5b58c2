// Relays one submitted /v1/responses request (responses_request.h): the engine's text sorted into
// reasoning, message text and function calls (ChoiceFields, chat_output.h) and turned into the
// Responses API's output items (ResponseEvents, responses_events.h): one response object, or its
// server-sent events ("event: TYPE\ndata: JSON\n\n", no [DONE], as OpenAI sends them). A
// generation failure while streaming is an "error" event that ends the stream.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/completion_handler.h"
#include "server/relay.h"
#include "server/responses_events.h"
#include "server/responses_request.h"

namespace spindle::server {

class ResponsesRelay : public Relay {
 public:
  // submitted: one engine request.
  ResponsesRelay(engine::DpGroup& engine, const ResponsesRequest& request, Submitted submitted);

  bool streaming() const override { return stream_; }
  std::string take_events() override;
  bool poll() override;
  nlohmann::json response() const override;

 private:
  // Consumes the engine's events now available; the ResponseEvents events they give appended to
  // `out` when given. True once the request has finished (or failed: error_ is set).
  bool consume(std::vector<nlohmann::json>* out);
  std::string error_event(const std::string& code, const std::string& message);
  // An aborted stream's end: an "error" event (server_shutting_down) naming `reason`.
  std::string abort_events(const std::string& reason) override;

  engine::DpGroup& engine_;
  int num_prompt_tokens_;
  bool stream_;
  ChoiceFields fields_;
  ResponseEvents events_;
  std::string reasoning_;  // all reasoning text (its token count goes in usage)
  bool started_ = false;
  std::string error_;
};

}  // namespace spindle::server
