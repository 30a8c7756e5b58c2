#include "server/responses_relay.h"

#include <ctime>

#include "engine/dp_group.h"
#include "util/error.h"

namespace spindle::server {

using nlohmann::json;

ResponsesRelay::ResponsesRelay(engine::DpGroup& engine, const ResponsesRequest& request, Submitted submitted)
    : Relay(std::move(submitted.streams)),
      engine_(engine),
      num_prompt_tokens_(submitted.num_prompt_tokens),
      stream_(request.generation.stream),
      fields_(submitted.parsing),
      events_(responses_id("resp"), static_cast<int64_t>(std::time(nullptr)), engine.model_name(), request.echo) {
  SPINDLE_CHECK(streams().size() == 1, "a response is one engine request, got {}", streams().size());
}

bool ResponsesRelay::consume(std::vector<json>* out) {
  engine::RequestOutput o;
  while (next_output(0, o)) {
    if (o.finish_reason == engine::FinishReason::kError) {
      error_ = o.error.empty() ? "unknown error" : o.error;
      set_finished(0);
      return true;
    }
    ChoiceDelta d = fields_.push(o.text, o.finished);
    reasoning_ += d.reasoning;
    std::vector<json> events = events_.push(d);
    if (o.finished) {
      set_finished(0);
      const Usage usage{num_prompt_tokens_, o.num_output_tokens, o.num_accepted_draft_tokens,
                        o.num_cached_prompt_tokens};
      const int reasoning_tokens =
          reasoning_.empty() ? 0 : static_cast<int>(engine_.tokenizer().encode(reasoning_, false).size());
      for (json& e : events_.finish(o.finish_reason, responses_usage(usage, reasoning_tokens))) events.push_back(std::move(e));
    }
    if (out) {
      for (json& e : events) out->push_back(std::move(e));
    }
  }
  return finished(0);
}

std::string ResponsesRelay::error_event(const std::string& code, const std::string& message) {
  return ResponseEvents::sse(events_.error(code, message));
}

std::string ResponsesRelay::take_events() {
  if (done_) return "";
  std::vector<json> events;
  if (!started_) {
    started_ = true;
    events = events_.start();
  }
  consume(&events);
  std::string text;
  for (const json& e : events) text += ResponseEvents::sse(e);
  if (!error_.empty()) {
    text += error_event("internal_error", "generation failed: " + error_);
    done_ = true;
  } else if (finished(0)) {
    done_ = true;
  }
  return text;
}

std::string ResponsesRelay::abort_events(const std::string& reason) {
  return error_event("server_shutting_down", reason);
}

bool ResponsesRelay::poll() {
  if (done_) return true;
  done_ = consume(nullptr);
  if (!error_.empty()) cancel();
  return done_;
}

json ResponsesRelay::response() const {
  if (!error_.empty()) throw ApiError(500, "internal_error", "", "generation failed: " + error_);
  return events_.response();
}

}  // namespace spindle::server
