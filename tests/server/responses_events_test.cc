// The Responses API's streaming events (src/server/responses_events.h) in OpenAI's order, as the
// API reference's streaming section lists them: created, in_progress; per item added, part added,
// deltas, text done, part done, item done (function_call: added, arguments delta, arguments done,
// item done); completed or incomplete. Sequence numbers count from 0 without a gap; item events
// carry output_index, part and text events item_id and content_index; the final response holds the
// items the events built.
#include <gtest/gtest.h>

#include "server/responses_events.h"

namespace spindle::server {
namespace {

using nlohmann::json;

const json kEcho = {{"store", false}, {"tools", json::array()}, {"tool_choice", "auto"}};

std::vector<std::string> types(const std::vector<json>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e["type"]);
  return out;
}

ChoiceDelta delta(std::string reasoning, std::string content, std::vector<chat::ToolCall> calls = {}) {
  ChoiceDelta d;
  d.reasoning = std::move(reasoning);
  d.content = std::move(content);
  d.calls = std::move(calls);
  return d;
}

void append(std::vector<json>& all, std::vector<json> more) {
  for (auto& e : more) all.push_back(std::move(e));
}

TEST(ResponsesEventsTest, ReasoningTextAndACallInOpenAIsOrder) {
  ResponseEvents r("resp_1", 1700000000, "kjv-tiny", kEcho);
  std::vector<json> all = r.start();
  append(all, r.push(delta("Think", "")));
  append(all, r.push(delta("ing.", "Hel")));
  append(all, r.push(delta("", "lo")));
  append(all, r.push(delta("", "", {{"call_x", "amen", R"({"loud": true})"}})));
  append(all, r.finish(engine::FinishReason::kStop, json{{"input_tokens", 3}}));
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(types(all), expected);
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(all[i].dump());
    EXPECT_EQ(all[i]["sequence_number"], i);
    const std::string t = all[i]["type"];
    const bool whole = t == "response.created" || t == "response.in_progress" || t == "response.completed";
    EXPECT_EQ(all[i].contains("response"), whole);
    EXPECT_EQ(all[i].contains("output_index"), !whole);
    const bool part = t.find("content_part") != std::string::npos || t.find("_text.") != std::string::npos;
    EXPECT_EQ(all[i].contains("content_index"), part);
    EXPECT_EQ(all[i].contains("item_id"), part || t.find("function_call_arguments") != std::string::npos);
  }
  // Indices: reasoning item 0, message 1, call 2; each event names its item's id.
  EXPECT_EQ(all[2]["output_index"], 0);
  EXPECT_EQ(all[4]["item_id"], all[2]["item"]["id"]);
  EXPECT_EQ(all[6]["text"], "Thinking.");
  EXPECT_EQ(all[11]["output_index"], 1);
  EXPECT_EQ(all[11]["delta"], "Hel");
  EXPECT_EQ(all[13]["text"], "Hello");
  EXPECT_EQ(all[14]["part"], json::parse(R"({"type": "output_text", "text": "Hello", "annotations": []})"));
  EXPECT_EQ(all[16]["output_index"], 2);
  EXPECT_EQ(all[16]["item"]["arguments"], "");
  EXPECT_EQ(all[17]["delta"], R"({"loud": true})");
  EXPECT_EQ(all[18]["arguments"], R"({"loud": true})");
  EXPECT_EQ(all[19]["item"]["status"], "completed");
  EXPECT_EQ(all[0]["response"]["status"], "in_progress");
  EXPECT_EQ(all[0]["response"]["output"], json::array());

  const json& done = all.back()["response"];
  EXPECT_EQ(done, r.response());
  EXPECT_EQ(done["id"], "resp_1");
  EXPECT_EQ(done["object"], "response");
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["store"], false);
  EXPECT_TRUE(done["incomplete_details"].is_null());
  EXPECT_EQ(done["usage"]["input_tokens"], 3);
  ASSERT_EQ(done["output"].size(), 3u);
  EXPECT_EQ(done["output"][0]["type"], "reasoning");
  EXPECT_EQ(done["output"][0]["content"][0], json::parse(R"({"type": "reasoning_text", "text": "Thinking."})"));
  EXPECT_EQ(done["output"][1]["type"], "message");
  EXPECT_EQ(done["output"][1]["role"], "assistant");
  EXPECT_EQ(done["output"][1]["status"], "completed");
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "Hello");
  EXPECT_EQ(done["output"][2], (json{{"id", all[16]["item"]["id"]}, {"type", "function_call"}, {"status", "completed"},
                                     {"call_id", "call_x"}, {"name", "amen"}, {"arguments", R"({"loud": true})"}}));
  EXPECT_TRUE(done["output"][1]["id"].get<std::string>().starts_with("msg_"));
  EXPECT_TRUE(done["output"][0]["id"].get<std::string>().starts_with("rs_"));
  EXPECT_TRUE(done["output"][2]["id"].get<std::string>().starts_with("fc_"));
}

TEST(ResponsesEventsTest, TruncationIsIncomplete) {
  ResponseEvents r("resp_2", 1, "m", kEcho);
  std::vector<json> all = r.start();
  append(all, r.push(delta("", "In the")));
  append(all, r.finish(engine::FinishReason::kLength, json::object()));
  EXPECT_EQ(types(all).back(), "response.incomplete");
  EXPECT_EQ(all[all.size() - 2]["type"], "response.output_item.done");
  EXPECT_EQ(all[all.size() - 2]["item"]["status"], "incomplete");
  const json done = r.response();
  EXPECT_EQ(done["status"], "incomplete");
  EXPECT_EQ(done["incomplete_details"], json::parse(R"({"reason": "max_output_tokens"})"));
  // Text after a call opens a new message item; nothing after finish.
  ResponseEvents s("resp_3", 1, "m", kEcho);
  s.push(delta("", "", {{"call_1", "f", "{}"}}));
  s.push(delta("", "after"));
  s.finish(engine::FinishReason::kStop, json::object());
  EXPECT_EQ(s.response()["output"].size(), 2u);
  EXPECT_EQ(s.response()["output"][1]["content"][0]["text"], "after");
  EXPECT_THROW(s.push(delta("", "x")), std::exception);
}

TEST(ResponsesEventsTest, SseFormAndUsage) {
  EXPECT_EQ(ResponseEvents::sse(json{{"type", "response.created"}, {"sequence_number", 0}}),
            "event: response.created\ndata: {\"sequence_number\":0,\"type\":\"response.created\"}\n\n");
  const json u = responses_usage({.prompt_tokens = 5, .completion_tokens = 3, .cached_prompt_tokens = 2}, 1);
  EXPECT_EQ(u, json::parse(R"({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 2}, "output_tokens": 3,
                               "output_tokens_details": {"reasoning_tokens": 1}, "total_tokens": 8})"));
}

}  // namespace
}  // namespace spindle::server
