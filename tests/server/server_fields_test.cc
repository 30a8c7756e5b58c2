// Request fields end to end (src/server/request_fields.cc): the real `spindle serve` with the
// embedded kjv-tiny. Each honoured sampling field changes the draws the way it says (compared with
// the server's own greedy or seeded output, the property each field promises); the documented
// no-op fields and the "off" values of refused fields leave greedy text and usage exactly as they
// were; refused and unknown fields are 400s naming the field, streaming or not.
// The prefix cache is off so that two requests with the same prompt run the same computation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "server_checks.h"
#include "spindle_server.h"
#include "tokenizer/tokenizer.h"

namespace spindle::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kSourceDir = SPINDLE_SOURCE_DIR;
const std::string kCompletions = "/v1/completions", kChat = "/v1/chat/completions";

const tokenizer::Tokenizer& kjv_tokenizer() {
  static const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(kSourceDir / "models" / "kjv-tiny");
  return tok;
}

json user_messages(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }

class ServerFieldsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = SpindleServer::start({"--max-total-tokens", "8192", "--disable-prefix-cache"}, &start_error_);
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << start_error_;
    ASSERT_TRUE(server_->alive()) << "the server died:\n" << server_->log();
    client_ = server_->client();
  }
  void TearDown() override {
    if (server_ && server_->alive()) {
      EXPECT_TRUE(kv_settled(*client_));
    }
  }

  // A 200 response to `body` on `path` (a failed expectation otherwise).
  json ok(const std::string& path, const json& body) {
    const JsonReply r = post(*client_, path, body);
    EXPECT_EQ(r.status, 200) << body.dump() << "\n" << r.body;
    return r.status == 200 ? r.json : json::object();
  }
  // The text of choice `i`.
  static std::string text(const json& response, size_t i = 0) {
    if (!response.contains("choices") || response["choices"].size() <= i) return "<no choice>";
    const json& c = response["choices"][i];
    const json& t = c.contains("message") ? c["message"]["content"] : c["text"];
    return t.is_string() ? t.get<std::string>() : "<no text>";
  }
  // The request body for `path`: a prompt or one user message, then `extra`.
  static json body(const std::string& path, const std::string& prompt, json extra) {
    json b = path == kChat ? json{{"messages", user_messages(prompt)}} : json{{"prompt", prompt}};
    b.update(extra);
    return b;
  }

  static inline std::unique_ptr<SpindleServer> server_;
  static inline std::string start_error_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ServerFieldsTest, TemperatureSeedAndTopP) {
  for (const std::string& path : {kCompletions, kChat}) {
    SCOPED_TRACE(path);
    const json base = {{"max_tokens", 24}, {"ignore_eos", true}};
    auto with = [&](json extra) {
      extra.update(base);
      return text(ok(path, body(path, "And God said", extra)));
    };
    const std::string greedy = with({{"temperature", 0}});
    const std::string hot1 = with({{"temperature", 1.5}, {"seed", 1}});
    EXPECT_EQ(with({{"temperature", 1.5}, {"seed", 1}}), hot1) << "the same seed draws the same tokens";
    const std::set<std::string> seeded = {hot1, with({{"temperature", 1.5}, {"seed", 2}}),
                                          with({{"temperature", 1.5}, {"seed", 3}})};
    EXPECT_EQ(seeded.size(), 3u) << "three seeds, three texts";
    EXPECT_NE(hot1, greedy) << "temperature 1.5 draws other tokens than greedy";
    // top_p that keeps only the most likely token is greedy, at any temperature.
    EXPECT_EQ(with({{"temperature", 1.5}, {"seed", 1}, {"top_p", 1e-6}}), greedy);
    EXPECT_EQ(with({{"temperature", 1.5}, {"seed", 1}, {"top_p", 1.0}}), hot1) << "top_p 1 keeps every token";
  }
}

TEST_F(ServerFieldsTest, TopKAndMinP) {
  for (const std::string& path : {kCompletions, kChat}) {
    SCOPED_TRACE(path);
    auto with = [&](json extra) {
      extra.update({{"max_tokens", 24}, {"ignore_eos", true}});
      return text(ok(path, body(path, "In the beginning", extra)));
    };
    const std::string greedy = with({{"temperature", 0}});
    const std::string hot = with({{"temperature", 1.5}, {"seed", 7}});
    ASSERT_NE(hot, greedy);
    EXPECT_EQ(with({{"temperature", 1.5}, {"seed", 7}, {"top_k", 1}}), greedy) << "top_k 1 keeps the most likely token";
    EXPECT_EQ(with({{"temperature", 1.5}, {"seed", 7}, {"top_k", 0}}), hot) << "top_k 0 is off";
    EXPECT_EQ(with({{"temperature", 1.5}, {"seed", 7}, {"min_p", 1.0}}), greedy) << "min_p 1 keeps p(max) only";
    EXPECT_EQ(with({{"temperature", 1.5}, {"seed", 7}, {"min_p", 0.0}}), hot) << "min_p 0 is off";
  }
}

// Each penalty makes the greedy output repeat itself less: fewer output tokens that are a repeat
// of an earlier output token, over 48 tokens.
TEST_F(ServerFieldsTest, Penalties) {
  for (const std::string& path : {kCompletions, kChat}) {
    SCOPED_TRACE(path);
    auto repeats = [&](json extra, std::string* out) {
      extra.update({{"max_tokens", 48}, {"ignore_eos", true}, {"temperature", 0}, {"logprobs", path == kChat ? json(true) : json(0)}});
      const json r = ok(path, body(path, "And the LORD said unto Moses", extra));
      *out = text(r);
      if (!r.contains("choices")) return -1;
      const json& lp = r["choices"][0]["logprobs"];
      const json& entries = path == kChat ? lp["content"] : lp["tokens"];
      std::set<std::string> seen;
      int num_repeats = 0;
      for (const auto& e : entries) num_repeats += !seen.insert(path == kChat ? e["token"].get<std::string>() : e.get<std::string>()).second;
      return num_repeats;
    };
    std::string plain_text, t;
    const int plain = repeats(json::object(), &plain_text);
    ASSERT_GE(plain, 4) << "the greedy text should repeat tokens: " << plain_text;
    for (const json& penalty : {json{{"presence_penalty", 2.0}}, json{{"frequency_penalty", 2.0}},
                                json{{"repetition_penalty", 1.5}}}) {
      SCOPED_TRACE(penalty.dump());
      EXPECT_LT(repeats(penalty, &t), plain) << t << "\nvs\n" << plain_text;
    }
    // Neutral values change nothing.
    EXPECT_EQ(repeats({{"presence_penalty", 0}, {"frequency_penalty", 0}, {"repetition_penalty", 1}}, &t), plain);
    EXPECT_EQ(t, plain_text);
  }
}

TEST_F(ServerFieldsTest, IgnoreEos) {
  const int eos = kjv_tokenizer().eos_ids().at(0);
  for (const std::string& path : {kCompletions, kChat}) {
    SCOPED_TRACE(path);
    const json forced = {{"max_tokens", 6}, {"logit_bias", {{std::to_string(eos), 100}}}};
    const json stopped = ok(path, body(path, "Amen.", forced));
    EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(stopped["usage"]["completion_tokens"], 1);
    json past = forced;
    past["ignore_eos"] = true;
    const json kept_on = ok(path, body(path, "Amen.", past));
    EXPECT_EQ(kept_on["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(kept_on["usage"]["completion_tokens"], 6);
  }
}

TEST_F(ServerFieldsTest, ChatChoicesStopAndStopTokenIds) {
  const json messages = user_messages("Who made the heaven and the earth?");
  const json base = {{"messages", messages}, {"max_tokens", 16}, {"temperature", 0}, {"ignore_eos", true}};
  const json one = ok(kChat, base);
  const std::string greedy = text(one);
  // n: two choices, both the greedy text; seeded sampling draws two texts (seed + i).
  json two_body = base;
  two_body["n"] = 2;
  const json two = ok(kChat, two_body);
  ASSERT_EQ(two["choices"].size(), 2u);
  EXPECT_EQ(text(two, 0), greedy);
  EXPECT_EQ(text(two, 1), greedy);
  EXPECT_EQ(two["choices"][1]["index"], 1);
  EXPECT_EQ(two["usage"]["completion_tokens"], 32);
  two_body.update({{"temperature", 1.5}, {"seed", 11}});
  const json sampled = ok(kChat, two_body);
  EXPECT_NE(text(sampled, 0), text(sampled, 1));

  // stop: the text up to the stop string's first occurrence.
  ASSERT_GE(greedy.size(), 8u) << greedy;
  const std::string stop = greedy.substr(greedy.size() / 2, 3);
  json stop_body = base;
  stop_body["stop"] = stop;
  const json stopped = ok(kChat, stop_body);
  EXPECT_EQ(text(stopped), greedy.substr(0, greedy.find(stop))) << "stop " << json(stop).dump();
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");

  // stop_token_ids: a token forced by logit_bias ends the output at once.
  const auto be = kjv_tokenizer().encode(" be", false);
  ASSERT_EQ(be.size(), 1u);
  json forced = base;
  forced["logit_bias"] = {{std::to_string(be[0]), 100}};
  const json runs_on = ok(kChat, forced);
  EXPECT_EQ(runs_on["usage"]["completion_tokens"], 16);
  forced["stop_token_ids"] = {be[0]};
  const json ends = ok(kChat, forced);
  EXPECT_EQ(ends["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(ends["usage"]["completion_tokens"], 1);
}

TEST_F(ServerFieldsTest, DeveloperRoleAndTextParts) {
  const json base = {{"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  auto run = [&](const json& messages) {
    json b = base;
    b["messages"] = messages;
    return ok(kChat, b);
  };
  const json system = run({{{"role", "system"}, {"content", "Answer briefly."}},
                           {{"role", "user"}, {"content", "Who made the heaven?"}}});
  const json developer = run({{{"role", "developer"}, {"content", "Answer briefly."}},
                              {{"role", "user"}, {"content", "Who made the heaven?"}}});
  EXPECT_EQ(developer["choices"], system["choices"]) << "developer is rendered as system";
  EXPECT_EQ(developer["usage"], system["usage"]);
  const json parts = run({{{"role", "system"}, {"content", {{{"type", "text"}, {"text", "Answer "}}, {{"type", "text"}, {"text", "briefly."}}}}},
                          {{"role", "user"}, {"content", "Who made the heaven?"}}});
  EXPECT_EQ(parts["choices"], system["choices"]) << "text parts are their concatenated text";
  EXPECT_EQ(parts["usage"], system["usage"]);
  // The messages matter: without the system message the prompt is shorter.
  const json user_only = run(user_messages("Who made the heaven?"));
  EXPECT_LT(user_only["usage"]["prompt_tokens"].get<int>(), system["usage"]["prompt_tokens"].get<int>());
  expect_api_error(post(*client_, kChat, json{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}}}}}}),
                   400, "messages[0].content", "an image part");
  expect_api_error(post(*client_, kChat, json{{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "x"}, {"cache_control", {{"type", "ephemeral"}}}}}}}}}}),
                   400, "messages[0].content[0].cache_control", "an unknown part field");
}

// user, metadata, store: false, service_tier and a message's name: the same greedy text and usage.
TEST_F(ServerFieldsTest, NoOpFieldsChangeNothing) {
  const json messages = {{{"role", "system"}, {"content", "Answer from the scriptures."}},
                         {{"role", "user"}, {"content", "Who made the heaven and the earth?"}}};
  const json base = {{"messages", messages}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  const json plain = ok(kChat, base);
  json with = base;
  with.update({{"user", "user-1234"}, {"metadata", {{"project", "spindle"}}}, {"store", false}, {"service_tier", "auto"}});
  with["messages"][1]["name"] = "alice";
  const json noop = ok(kChat, with);
  EXPECT_EQ(noop["choices"], plain["choices"]);
  EXPECT_EQ(noop["usage"], plain["usage"]);

  const json cbase = {{"prompt", "And God said"}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  const json cplain = ok(kCompletions, cbase);
  json cwith = cbase;
  cwith["user"] = "user-1234";
  const json cnoop = ok(kCompletions, cwith);
  EXPECT_EQ(cnoop["choices"], cplain["choices"]);
  EXPECT_EQ(cnoop["usage"], cplain["usage"]);

  json stored = base;
  stored["store"] = true;
  expect_api_error(post(*client_, kChat, stored), 400, "store", "store: true");
  json bad_metadata = base;
  bad_metadata["metadata"] = {{"k", 5}};
  expect_api_error(post(*client_, kChat, bad_metadata), 400, "metadata", "a metadata value that is not a string");
}

// The value that turns a refused feature off is accepted and changes nothing.
TEST_F(ServerFieldsTest, OffValuesOfRefusedFieldsChangeNothing) {
  const json base = {{"messages", user_messages("Who made the heaven?")}, {"max_tokens", 12}, {"temperature", 0},
                     {"ignore_eos", true}};
  const json plain = ok(kChat, base);
  json off = base;
  off.update({{"tools", json::array()}, {"tool_choice", "none"}, {"functions", json::array()}, {"function_call", "none"},
              {"modalities", {"text"}}, {"response_format", {{"type", "text"}}}, {"skip_special_tokens", true},
              {"include_stop_str_in_output", false}, {"min_tokens", 0}, {"add_generation_prompt", true},
              {"continue_final_message", false}, {"parallel_tool_calls", nullptr}, {"audio", nullptr},
              {"reasoning_effort", nullptr}});
  off["messages"][0]["tool_calls"] = json::array();
  const json same = ok(kChat, off);
  EXPECT_EQ(same["choices"], plain["choices"]);
  EXPECT_EQ(same["usage"], plain["usage"]);

  const json cbase = {{"prompt", "And God said"}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  const json cplain = ok(kCompletions, cbase);
  json coff = cbase;
  coff.update({{"best_of", 1}, {"response_format", {{"type", "text"}}}, {"skip_special_tokens", true},
               {"include_stop_str_in_output", false}, {"min_tokens", 0}, {"suffix", nullptr}});
  const json csame = ok(kCompletions, coff);
  EXPECT_EQ(csame["choices"], cplain["choices"]);
  EXPECT_EQ(csame["usage"], cplain["usage"]);
}

TEST_F(ServerFieldsTest, RefusedAndUnknownFieldsAre400sNamingThem) {
  const json chat = {{"messages", user_messages("Who made the heaven?")}, {"max_tokens", 4}};
  const json completion = {{"prompt", "And God said"}, {"max_tokens", 4}};
  struct Case {
    std::string what, path;
    json extra;
    std::string param, message;
  };
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}};
  const std::vector<Case> cases = {
      // kjv-tiny's template teaches no tool-call format: the generic one, whose grammar reads the schemas.
      {"tools with a schema the grammar cannot read", kChat,
       {{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"},
          {"patternProperties", {{"a", json::object()}}}}}}}}}}}, "tools[0].function.parameters", "patternProperties"},
      {"tool_choice required without tools", kChat, {{"tool_choice", "required"}}, "tool_choice", "needs a non-empty 'tools'"},
      {"unknown field", kChat, {{"foo_unknown", 1}}, "foo_unknown", "Unrecognized request argument supplied: foo_unknown"},
      {"unknown field set to null", kCompletions, {{"foo_unknown", nullptr}}, "foo_unknown", "Unrecognized"},
      {"best_of 3", kCompletions, {{"best_of", 3}}, "best_of", ""},
      {"best_of below n", kCompletions, {{"best_of", 1}, {"n", 2}}, "best_of", "at least"},
      {"suffix", kCompletions, {{"suffix", "amen"}}, "suffix", "fill-in-the-middle"},
      {"prompt_logprobs past 20", kCompletions, {{"prompt_logprobs", 21}}, "prompt_logprobs", "between 0 and 20"},
      {"guided_decoding_backend", kChat, {{"guided_decoding_backend", "xgrammar"}}, "guided_decoding_backend",
       "one grammar engine"},
      {"two output constraints", kChat, {{"guided_regex", "a+"}, {"json_schema", schema}}, "json_schema",
       "only one output constraint"},
      {"max_completion_tokens on completions", kCompletions, {{"max_completion_tokens", 4}}, "max_completion_tokens",
       "Unrecognized"},
      {"stream_options without stream", kChat, {{"stream_options", {{"include_usage", true}}}}, "stream_options", ""},
      {"unknown stream option", kChat, {{"stream", true}, {"stream_options", {{"continuous_usage_stats", true}}}},
       "stream_options.continuous_usage_stats", "Unrecognized"},
      {"skip_special_tokens false", kChat, {{"skip_special_tokens", false}}, "skip_special_tokens", ""},
  };
  for (const auto& c : cases) {
    json b = c.path == kChat ? chat : completion;
    b.update(c.extra);
    const JsonReply r = post(*client_, c.path, b);
    expect_api_error(r, 400, c.param, c.what);
    EXPECT_EQ(r.json["error"].value("type", ""), "invalid_request_error") << c.what;
    if (!c.message.empty()) {
      EXPECT_THAT(r.json["error"].value("message", ""), ::testing::HasSubstr(c.message)) << c.what;
    }
    b["stream"] = true;  // refused the same way before any event
    if (c.what != "stream_options without stream") {
      expect_api_error(post(*client_, c.path, b), 400, c.param, c.what + " (streaming)");
    }
  }
  // The request: refused on its first refused field, whichever the JSON object order gives.
  json several = chat;
  several.update({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}, {"tool_choice", "required"},
                  {"best_of", 3}, {"foo_unknown", 1}});
  const JsonReply r = post(*client_, kChat, several);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.json["error"].value("param", ""), ::testing::AnyOf("tools", "tool_choice", "best_of", "foo_unknown"));
  // Message fields.
  const std::vector<std::pair<json, std::string>> messages = {
      {{{"role", "tool"}, {"content", "42"}}, "messages[0].tool_call_id"},
      {{{"role", "function"}, {"content", "42"}, {"name", "f"}}, "messages[0].role"},
      {{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {{{"id", "c1"}, {"type", "function"}}}}},
       "messages[0].tool_calls[0].function"},
      {{{"role", "assistant"}, {"content", "x"}, {"refusal", "no"}}, "messages[0].refusal"},
      {{{"role", "assistant"}, {"content", "x"}, {"audio", {{"id", "a"}}}}, "messages[0].audio"},
      {{{"role", "user"}, {"content", "x"}, {"name", 5}}, "messages[0].name"},
      {{{"role", "user"}, {"content", "x"}, {"foo", 1}}, "messages[0].foo"},
  };
  for (const auto& [m, param] : messages) {
    json b = chat;
    b["messages"] = json::array({m});
    expect_api_error(post(*client_, kChat, b), 400, param, m.dump());
  }
  // The server still serves.
  EXPECT_EQ(post(*client_, kChat, chat).status, 200);
}

}  // namespace
}  // namespace spindle::testing
