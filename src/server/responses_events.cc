#include "server/responses_events.h"

#include <fmt/format.h>

#include <random>

#include "util/error.h"

namespace spindle::server {

using nlohmann::json;

std::string responses_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}_{:016x}{:016x}", prefix, rng(), rng());
}

json responses_usage(const Usage& u, int reasoning_tokens) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

ResponseEvents::ResponseEvents(std::string id, int64_t created_at, std::string model, json echo)
    : id_(std::move(id)), created_at_(created_at), model_(std::move(model)), echo_(std::move(echo)) {}

std::string ResponseEvents::sse(const json& e) {
  return fmt::format("event: {}\ndata: {}\n\n", e["type"].get<std::string>(), to_json_text(e));
}

json ResponseEvents::event(const char* type, json fields) {
  json e = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [key, value] : fields.items()) e[key] = std::move(value);
  return e;
}

json ResponseEvents::response_with(const char* status) const {
  json r = {{"id", id_},
            {"object", "response"},
            {"created_at", created_at_},
            {"status", status},
            {"error", nullptr},
            {"incomplete_details", incomplete_details_},
            {"model", model_},
            {"output", output_}};
  for (const auto& [key, value] : echo_.items()) r[key] = value;
  r["usage"] = usage_;
  return r;
}

json ResponseEvents::response() const { return response_with(status_.c_str()); }

std::vector<json> ResponseEvents::start() {
  std::vector<json> out;
  out.push_back(event("response.created", {{"response", response_with("in_progress")}}));
  out.push_back(event("response.in_progress", {{"response", response_with("in_progress")}}));
  return out;
}

// A reasoning or message item with one empty text part: added, then its part added.
void ResponseEvents::open(Open kind, std::vector<json>& out) {
  const bool message = kind == Open::kMessage;
  json item = message ? json{{"id", responses_id("msg")}, {"type", "message"}, {"status", "in_progress"},
                             {"role", "assistant"}, {"content", json::array()}}
                      : json{{"id", responses_id("rs")}, {"type", "reasoning"}, {"status", "in_progress"},
                             {"summary", json::array()}, {"content", json::array()}};
  const json part = message ? json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}
                            : json{{"type", "reasoning_text"}, {"text", ""}};
  const int index = static_cast<int>(output_.size());
  out.push_back(event("response.output_item.added", {{"output_index", index}, {"item", item}}));
  out.push_back(event("response.content_part.added",
                      {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}}));
  item["content"].push_back(part);
  output_.push_back(std::move(item));
  open_ = kind;
}

// The open item's text done, its part done, the item done with `status`.
void ResponseEvents::close(const char* status, std::vector<json>& out) {
  if (open_ == Open::kNone) return;
  json& item = output_.back();
  const int index = static_cast<int>(output_.size()) - 1;
  const json& part = item["content"][0];
  const json at = {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}};
  json done = at;
  done["text"] = part["text"];
  if (open_ == Open::kMessage) done["logprobs"] = json::array();
  out.push_back(event(open_ == Open::kMessage ? "response.output_text.done" : "response.reasoning_text.done", done));
  json part_done = at;
  part_done["part"] = part;
  out.push_back(event("response.content_part.done", part_done));
  item["status"] = status;
  out.push_back(event("response.output_item.done", {{"output_index", index}, {"item", item}}));
  open_ = Open::kNone;
}

void ResponseEvents::text(Open kind, const std::string& delta, std::vector<json>& out) {
  if (delta.empty()) return;
  if (open_ != kind) {
    close("completed", out);
    open(kind, out);
  }
  json& item = output_.back();
  item["content"][0]["text"] = item["content"][0]["text"].get<std::string>() + delta;
  json e = {{"item_id", item["id"]}, {"output_index", static_cast<int>(output_.size()) - 1}, {"content_index", 0},
            {"delta", delta}};
  if (kind == Open::kMessage) e["logprobs"] = json::array();
  out.push_back(event(kind == Open::kMessage ? "response.output_text.delta" : "response.reasoning_text.delta", e));
}

std::vector<json> ResponseEvents::push(const ChoiceDelta& d) {
  SPINDLE_CHECK(!finished_, "ResponseEvents::push after finish");
  std::vector<json> out;
  text(Open::kReasoning, d.reasoning, out);
  text(Open::kMessage, d.content, out);
  for (const auto& call : d.calls) {
    close("completed", out);
    const int index = static_cast<int>(output_.size());
    json item = {{"id", responses_id("fc")}, {"type", "function_call"}, {"status", "in_progress"},
                 {"call_id", call.id}, {"name", call.name}, {"arguments", ""}};
    out.push_back(event("response.output_item.added", {{"output_index", index}, {"item", item}}));
    out.push_back(event("response.function_call_arguments.delta",
                        {{"item_id", item["id"]}, {"output_index", index}, {"delta", call.arguments}}));
    out.push_back(event("response.function_call_arguments.done",
                        {{"item_id", item["id"]}, {"output_index", index}, {"arguments", call.arguments}}));
    item["arguments"] = call.arguments;
    item["status"] = "completed";
    out.push_back(event("response.output_item.done", {{"output_index", index}, {"item", item}}));
    output_.push_back(std::move(item));
  }
  return out;
}

json ResponseEvents::error(const std::string& code, const std::string& message) {
  return event("error", {{"code", code}, {"message", message}, {"param", nullptr}});
}

std::vector<json> ResponseEvents::finish(engine::FinishReason reason, const json& usage) {
  SPINDLE_CHECK(!finished_, "ResponseEvents::finish twice");
  std::vector<json> out;
  const bool truncated = reason == engine::FinishReason::kLength;
  close(truncated ? "incomplete" : "completed", out);
  finished_ = true;
  usage_ = usage;
  status_ = truncated ? "incomplete" : "completed";
  if (truncated) incomplete_details_ = {{"reason", "max_output_tokens"}};
  out.push_back(event(truncated ? "response.incomplete" : "response.completed", {{"response", response()}}));
  return out;
}

}  // namespace spindle::server
