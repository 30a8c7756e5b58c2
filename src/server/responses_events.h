// One /v1/responses answer built from its sorted output (ChoiceDelta: reasoning, content, tool
// calls, chat_output.h): the output items and, when streamed, OpenAI's events in OpenAI's order,
// each with its sequence_number (0, 1, ...):
//
//   response.created, response.in_progress                       (start)
//   per output item, in output order:
//     reasoning:     output_item.added, content_part.added, reasoning_text.delta..., reasoning_text.done,
//                    content_part.done, output_item.done
//     message:       output_item.added, content_part.added, output_text.delta..., output_text.done,
//                    content_part.done, output_item.done
//     function_call: output_item.added, function_call_arguments.delta, function_call_arguments.done,
//                    output_item.done
//   response.completed, or response.incomplete (max_output_tokens reached)   (finish)
//
// Item events carry output_index; part and text events item_id and content_index too. Engine-free.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "engine/request_stream.h"
#include "server/chat_output.h"
#include "server/openai_protocol.h"

namespace spindle::server {

class ResponseEvents {
 public:
  // echo: the request settings the response object repeats (ResponsesRequest::echo).
  ResponseEvents(std::string id, int64_t created_at, std::string model, nlohmann::json echo);

  // The opening events: response.created and response.in_progress (status in_progress, no output).
  std::vector<nlohmann::json> start();
  // The events of one piece of sorted output: items opened, text deltas, items closed (a call is
  // whole when it comes, so its item opens and closes at once; text after it opens a new item).
  std::vector<nlohmann::json> push(const ChoiceDelta& delta);
  // The end: the open item closed, then response.completed, or response.incomplete with
  // incomplete_details {reason: "max_output_tokens"} when `reason` is kLength.
  std::vector<nlohmann::json> finish(engine::FinishReason reason, const nlohmann::json& usage);

  // OpenAI's stream error event {type: "error", code, message, param: null, sequence_number}: a
  // failure that ends the stream.
  nlohmann::json error(const std::string& code, const std::string& message);

  // The response object as it stands (after finish: status completed or incomplete, usage).
  nlohmann::json response() const;
  bool finished() const { return finished_; }

  // The text of the SSE event `e`: "event: TYPE\ndata: JSON\n\n".
  static std::string sse(const nlohmann::json& e);

 private:
  enum class Open { kNone, kReasoning, kMessage };
  nlohmann::json event(const char* type, nlohmann::json fields);
  void open(Open kind, std::vector<nlohmann::json>& out);
  void close(const char* status, std::vector<nlohmann::json>& out);
  void text(Open kind, const std::string& delta, std::vector<nlohmann::json>& out);
  nlohmann::json response_with(const char* status) const;

  std::string id_;
  int64_t created_at_;
  std::string model_;
  nlohmann::json echo_;
  nlohmann::json output_ = nlohmann::json::array();  // the items so far (the open one last)
  Open open_ = Open::kNone;
  int sequence_ = 0;
  bool finished_ = false;
  std::string status_ = "in_progress";
  nlohmann::json incomplete_details_;
  nlohmann::json usage_;
};

// Responses usage: {input_tokens, input_tokens_details {cached_tokens}, output_tokens,
// output_tokens_details {reasoning_tokens}, total_tokens}.
nlohmann::json responses_usage(const Usage& usage, int reasoning_tokens);

// A fresh id for a response or an item: prefix + "_" + 32 hex digits ("resp", "msg", "rs", "fc").
std::string responses_id(const char* prefix);

}  // namespace spindle::server
