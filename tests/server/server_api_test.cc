// The OpenAI-compatible API end to end: the real `spindle serve` with the embedded kjv-tiny on
// loopback. Responses and SSE streams are well-formed, usage counts are exact, 32 concurrent
// streams complete, a client that hangs up releases its pages, every bad input gets its status,
// greedy output equals `spindle generate`, and the official OpenAI Node client works. After every
// test the KV pool must settle (no page referenced) and pass its integrity check.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <atomic>

#include <filesystem>
#include <future>
#include <thread>

#include "node_client.h"
#include "server_checks.h"
#include "spindle_server.h"
#include "support/spindle_binary.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace spindle::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kSourceDir = SPINDLE_SOURCE_DIR;
constexpr int kContext = 512;  // kjv-tiny's max_position_embeddings
const std::vector<std::string> kServerArgs = {"--max-total-tokens", "8192"};

const tokenizer::Tokenizer& kjv_tokenizer() {
  static const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(kSourceDir / "models" / "kjv-tiny");
  return tok;
}

int num_prompt_tokens(const std::string& prompt) { return static_cast<int>(kjv_tokenizer().encode(prompt, true).size()); }

int num_chat_tokens(const json& messages) {
  std::vector<tokenizer::ChatMessage> m;
  for (const auto& x : messages) m.push_back({x["role"], x["content"]});
  const auto chat = tokenizer::ChatTemplate::for_tokenizer(kjv_tokenizer());
  return static_cast<int>(kjv_tokenizer().encode(chat.render(m, true), false).size());
}

// Per-chunk token counts: completions logprobs.tokens, chat logprobs.content.
int num_logprob_tokens(const json& choice, bool chat) {
  if (!choice.contains("logprobs") || choice["logprobs"].is_null()) return 0;
  return static_cast<int>(chat ? choice["logprobs"]["content"].size() : choice["logprobs"]["tokens"].size());
}

struct StreamSummary {
  std::string text;
  int num_tokens = 0;           // from the logprobs of every chunk
  int num_finish_reasons = 0;   // chunks with a non-null finish_reason
  json finish_reason;
  json usage;                   // the usage chunk's, or null
  int num_roles = 0;
  bool first_has_role = false;
};

// Checks every chunk's envelope and sums up what the stream carried.
StreamSummary summarise(const SseReply& s, bool chat) {
  StreamSummary out;
  EXPECT_EQ(s.status, 200) << s.raw;
  EXPECT_THAT(s.content_type, ::testing::StartsWith("text/event-stream"));
  EXPECT_THAT(s.problems, ::testing::IsEmpty()) << s.raw;
  EXPECT_TRUE(s.done) << "no data: [DONE] at the end:\n" << s.raw;
  if (s.events.empty()) {
    ADD_FAILURE() << "no events:\n" << s.raw;
    return out;
  }
  const std::string id = s.events[0].value("id", "");
  EXPECT_THAT(id, ::testing::StartsWith(chat ? "chatcmpl-" : "cmpl-"));
  for (size_t i = 0; i < s.events.size(); ++i) {
    const json& e = s.events[i];
    SCOPED_TRACE("event " + std::to_string(i) + ": " + e.dump());
    EXPECT_EQ(e.value("object", ""), chat ? "chat.completion.chunk" : "text_completion");
    EXPECT_EQ(e.value("id", ""), id);
    EXPECT_EQ(e.value("model", ""), "kjv-tiny");
    EXPECT_TRUE(e.contains("created") && e["created"].is_number_integer());
    if (e.contains("usage") && !e["usage"].is_null()) {
      EXPECT_EQ(i + 1, s.events.size()) << "the usage chunk must come last";
      EXPECT_TRUE(e["choices"].is_array() && e["choices"].empty());
      out.usage = e["usage"];
      continue;
    }
    if (!e["choices"].is_array() || e["choices"].size() != 1) {
      ADD_FAILURE() << "a chunk needs exactly one choice";
      continue;
    }
    const json& c = e["choices"][0];
    EXPECT_EQ(c.value("index", -1), 0);
    EXPECT_TRUE(c.contains("finish_reason"));
    if (!c["finish_reason"].is_null()) {
      ++out.num_finish_reasons;
      out.finish_reason = c["finish_reason"];
    } else {
      EXPECT_EQ(out.num_finish_reasons, 0) << "a chunk after the finish_reason";
    }
    if (chat) {
      if (!c.contains("delta") || !c["delta"].is_object()) {
        ADD_FAILURE() << "a chat chunk needs a delta object";
        continue;
      }
      if (c["delta"].contains("role")) {
        ++out.num_roles;
        if (i == 0) out.first_has_role = c["delta"]["role"] == "assistant";
      }
      if (c["delta"].contains("content")) out.text += c["delta"]["content"].get<std::string>();
    } else {
      if (!c.contains("text") || !c["text"].is_string()) {
        ADD_FAILURE() << "a completion chunk needs a text string";
        continue;
      }
      out.text += c["text"].get<std::string>();
    }
    out.num_tokens += num_logprob_tokens(c, chat);
  }
  EXPECT_EQ(out.num_finish_reasons, 1);
  return out;
}

void expect_usage(const json& usage, int prompt_tokens, int completion_tokens) {
  ASSERT_TRUE(usage.is_object()) << usage.dump();
  EXPECT_EQ(usage.value("prompt_tokens", -1), prompt_tokens) << usage.dump();
  EXPECT_EQ(usage.value("completion_tokens", -1), completion_tokens) << usage.dump();
  EXPECT_EQ(usage.value("total_tokens", -1), prompt_tokens + completion_tokens) << usage.dump();
}

class ServerApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = SpindleServer::start(kServerArgs, &start_error_); }
  static void TearDownTestSuite() {
    if (!server_) return;
    bool graceful = false;
    const int code = server_->stop(&graceful);
    EXPECT_TRUE(graceful && code == 0) << "SIGTERM: exit " << code << (graceful ? "" : " (killed)") << "\n"
                                       << server_->log();
    server_.reset();
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << start_error_;
    ASSERT_TRUE(server_->alive()) << "the server died:\n" << server_->log();
    client_ = server_->client();
  }
  void TearDown() override {
    if (!server_) return;
    if (!server_->alive()) {
      ADD_FAILURE() << "the server died:\n" << server_->log();
      return;
    }
    EXPECT_TRUE(kv_settled(*client_));
  }

  JsonReply completion(json body) { return post(*client_, "/v1/completions", body); }
  JsonReply chat(json body) { return post(*client_, "/v1/chat/completions", body); }

  static inline std::unique_ptr<SpindleServer> server_;
  static inline std::string start_error_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ServerApiTest, HealthModelsAndMetrics) {
  EXPECT_TRUE(server_->saw_loading()) << "/health never answered 503 while the model loaded";
  const auto& [loading_status, loading_body] = server_->models_while_loading();
  EXPECT_EQ(loading_status, 503) << loading_body;
  EXPECT_THAT(loading_body, ::testing::HasSubstr("server_loading"));
  const JsonReply health = get(*client_, "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json.value("status", ""), "ok");

  const JsonReply models = get(*client_, "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(models.json.value("object", ""), "list");
  ASSERT_EQ(models.json["data"].size(), 1u);
  EXPECT_EQ(models.json["data"][0].value("id", ""), "kjv-tiny");
  EXPECT_EQ(models.json["data"][0].value("object", ""), "model");
  EXPECT_EQ(models.json["data"][0].value("max_model_len", 0), kContext);

  const JsonReply metrics = get(*client_, "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.content_type, ::testing::StartsWith("text/plain"));
  const auto m = parse_metrics(metrics.body);
  EXPECT_EQ(metric(m, "spindle_kv_pages_total"), 8192 / 16);
  EXPECT_GE(metric(m, "spindle_kv_pages_in_use"), 0);
  EXPECT_GE(metric(m, "spindle_requests_aborted_total"), 0);
}

TEST_F(ServerApiTest, CompletionNonStreaming) {
  const std::string prompt = "And God said";
  const int n = num_prompt_tokens(prompt);
  const JsonReply r = completion({{"model", "kjv-tiny"}, {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0},
                                  {"ignore_eos", true}, {"logprobs", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.content_type, ::testing::StartsWith("application/json"));
  const json& j = r.json;
  EXPECT_EQ(j.value("object", ""), "text_completion");
  EXPECT_THAT(j.value("id", ""), ::testing::StartsWith("cmpl-"));
  EXPECT_EQ(j.value("model", ""), "kjv-tiny");
  EXPECT_TRUE(j["created"].is_number_integer());
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c.value("index", -1), 0);
  EXPECT_FALSE(c.value("text", "").empty());
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(num_logprob_tokens(c, false), 8);
  expect_usage(j["usage"], n, 8);

  // The same prompt with max_tokens 1, and given as the tokenizer's ids: same prompt_tokens,
  // same greedy text.
  const JsonReply one = completion({{"prompt", prompt}, {"max_tokens", 1}});
  ASSERT_EQ(one.status, 200) << one.body;
  expect_usage(one.json["usage"], n, 1);
  const JsonReply ids = completion({{"prompt", kjv_tokenizer().encode(prompt, true)}, {"max_tokens", 8}, {"temperature", 0},
                                    {"ignore_eos", true}});
  ASSERT_EQ(ids.status, 200) << ids.body;
  expect_usage(ids.json["usage"], n, 8);
  EXPECT_EQ(ids.json["choices"][0]["text"], c["text"]);
  // echo prepends the prompt.
  const JsonReply echo = completion({{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true},
                                     {"echo", true}});
  ASSERT_EQ(echo.status, 200) << echo.body;
  EXPECT_EQ(echo.json["choices"][0]["text"], prompt + c["text"].get<std::string>());
}

// n = 2: the second choice reads the first one's prompt pages (the prompt is computed once and
// a little: P + (P - M) prompt tokens, M = the full 16-token pages of P - 1, where two
// independent requests compute 2 P); usage counts the prompt once, and its
// prompt_tokens_details.cached_tokens is what every choice read from the prefix cache: 0 the
// first time, M once the prompt is cached.
TEST_F(ServerApiTest, ChoicesShareThePromptsPages) {
  const std::string prompt =
      "And the LORD God formed man of the dust of the ground, and breathed into his nostrils the breath of life; "
      "and man became a living soul.";
  const int p = num_prompt_tokens(prompt), m = (p - 1) / 16 * 16;
  ASSERT_GE(m, 32) << "the prompt should span pages";
  const json body = {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}, {"n", 2}};
  const auto before = server_metrics(*client_);
  const JsonReply two = completion(body);
  ASSERT_EQ(two.status, 200) << two.body;
  const auto after = server_metrics(*client_);
  auto delta = [](const auto& a, const auto& b, const char* name) { return metric(b, name) - metric(a, name); };
  EXPECT_EQ(delta(before, after, "spindle_prompt_tokens_total"), p + (p - m));
  EXPECT_EQ(delta(before, after, "spindle_prefix_cache_hits_total"), m);
  expect_usage(two.json["usage"], p, 8);
  EXPECT_EQ(two.json["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << two.body;
  ASSERT_EQ(two.json["choices"].size(), 2u);
  EXPECT_EQ(two.json["choices"][0]["text"], two.json["choices"][1]["text"]) << "greedy choices are one text";

  // Again: both choices read the cached prompt; each computes only its last P - M tokens.
  const JsonReply again = completion(body);
  ASSERT_EQ(again.status, 200) << again.body;
  const auto last = server_metrics(*client_);
  EXPECT_EQ(delta(after, last, "spindle_prompt_tokens_total"), 2 * (p - m));
  EXPECT_EQ(again.json["usage"]["prompt_tokens_details"]["cached_tokens"], m) << again.body;
  EXPECT_EQ(again.json["choices"], two.json["choices"]);
  // n = 1 answers the same text.
  json one_body = body;
  one_body["n"] = 1;
  const JsonReply one = completion(one_body);
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(one.json["choices"][0]["text"], two.json["choices"][0]["text"]);
  EXPECT_EQ(one.json["usage"]["prompt_tokens_details"]["cached_tokens"], m);
}

TEST_F(ServerApiTest, ChatNonStreaming) {
  const json messages = {{{"role", "system"}, {"content", "Answer from the scriptures."}},
                         {{"role", "user"}, {"content", "Who made the heaven and the earth?"}}};
  const int n = num_chat_tokens(messages);
  const JsonReply r = chat({{"model", "kjv-tiny"}, {"messages", messages}, {"max_tokens", 8}, {"temperature", 0},
                            {"ignore_eos", true}, {"logprobs", true}, {"top_logprobs", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json& j = r.json;
  EXPECT_EQ(j.value("object", ""), "chat.completion");
  EXPECT_THAT(j.value("id", ""), ::testing::StartsWith("chatcmpl-"));
  EXPECT_EQ(j.value("model", ""), "kjv-tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["message"].value("role", ""), "assistant");
  ASSERT_TRUE(c["message"]["content"].is_string());
  EXPECT_FALSE(c["message"]["content"].get<std::string>().empty());
  EXPECT_EQ(c["finish_reason"], "length");
  ASSERT_EQ(num_logprob_tokens(c, true), 8);
  EXPECT_EQ(c["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  expect_usage(j["usage"], n, 8);

  // max_completion_tokens wins over max_tokens.
  const JsonReply r3 = chat({{"messages", messages}, {"max_completion_tokens", 3}, {"max_tokens", 9}, {"ignore_eos", true}});
  ASSERT_EQ(r3.status, 200) << r3.body;
  expect_usage(r3.json["usage"], n, 3);
}

TEST_F(ServerApiTest, StopStringAndEndOfSequence) {
  const std::string prompt = "And God said";
  const JsonReply free_run = completion({{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(free_run.status, 200) << free_run.body;
  const std::string full = free_run.json["choices"][0]["text"];
  const size_t newline = full.find('\n');
  ASSERT_NE(newline, std::string::npos) << "the greedy text has no newline to stop at: " << full;

  const JsonReply stopped =
      completion({{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}, {"ignore_eos", true}, {"stop", {"\n"}}});
  ASSERT_EQ(stopped.status, 200) << stopped.body;
  EXPECT_EQ(stopped.json["choices"][0]["text"], full.substr(0, newline));
  EXPECT_EQ(stopped.json["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(stopped.json["usage"]["completion_tokens"].get<int>(), 16);

  // An end-of-sequence token (forced by logit_bias) ends the request with "stop" and counts as
  // one completion token, streamed or not.
  const int eos = kjv_tokenizer().eos_ids().at(0);
  const json messages = {{{"role", "user"}, {"content", "Amen."}}};
  const json body = {{"messages", messages}, {"max_tokens", 8}, {"logit_bias", {{std::to_string(eos), 100}}}};
  const JsonReply r = chat(body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r.json["choices"][0]["message"]["content"], "");
  expect_usage(r.json["usage"], num_chat_tokens(messages), 1);

  json streamed_body = body;
  streamed_body["stream"] = true;
  streamed_body["stream_options"] = {{"include_usage", true}};
  const StreamSummary s = summarise(post_stream(*client_, "/v1/chat/completions", streamed_body), true);
  EXPECT_EQ(s.finish_reason, "stop");
  EXPECT_EQ(s.text, "");
  expect_usage(s.usage, num_chat_tokens(messages), 1);
}

// Text held back because it could start a stop string is still delivered when the request ends
// on a stop token (or EOS) instead: the same greedy run with and without an unmatched stop string.
TEST_F(ServerApiTest, HeldBackTextIsDeliveredWhenAStopTokenEnds) {
  const auto be = kjv_tokenizer().encode(" be", false);
  ASSERT_EQ(be.size(), 1u) << "' be' is one token of the KJV tokenizer";
  const json base = {{"prompt", "And God said"}, {"max_tokens", 32}, {"temperature", 0}, {"stop_token_ids", {be[0]}}};
  const JsonReply plain = completion(base);
  ASSERT_EQ(plain.status, 200) << plain.body;
  const std::string text = plain.json["choices"][0]["text"];
  ASSERT_EQ(plain.json["choices"][0]["finish_reason"], "stop") << text;
  json with_stop = base;
  with_stop["stop"] = {" will not", " never matches this"};
  ASSERT_EQ(text.find(" will not"), std::string::npos);
  const JsonReply r = completion(with_stop);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["choices"][0]["text"], text);
  with_stop["stream"] = true;
  const StreamSummary s = summarise(post_stream(*client_, "/v1/completions", with_stop), false);
  EXPECT_EQ(s.text, text);
}

// A non-streaming client that gives up is noticed (the body is sent chunked, with a space about
// every 200 ms) and its request aborted rather than run to max_tokens. Eight streams of 400 tokens
// run beside it so that its 480 tokens take longer than noticing the hang-up (four of 200 did not
// on the 2-core AVX-512 Xeon VM: it finished first in 4 of 4 runs, main's binary included).
TEST_F(ServerApiTest, NonStreamingClientThatHangsUpIsAborted) {
  const auto before = server_metrics(*client_);
  std::vector<std::thread> load;
  std::atomic<int> num_load_ok{0};
  constexpr int kLoad = 8;
  for (int i = 0; i < kLoad; ++i) {
    load.emplace_back([&] {
      auto c = server_->client(120);
      const StreamSummary s = summarise(
          post_stream(*c, "/v1/completions",
                      {{"prompt", "In the beginning"}, {"max_tokens", 400}, {"ignore_eos", true}, {"stream", true}}),
          false);
      if (s.finish_reason == "length") ++num_load_ok;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    // A raw client: sends the request, waits until it runs, hangs up (an HTTP client's read timeout
    // would never fire: the server's keep-alive spaces arrive every 200 ms). Not a fixed wait: on a
    // fast machine (a 2-core AVX-512 Xeon, ~1 ms per step of 5) its 480 tokens took about as long
    // as the 0.5 s this waited before, and it finished before its hang-up was noticed.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    const std::string body = json{{"prompt", "And God said"}, {"max_tokens", 480}, {"ignore_eos", true}}.dump();
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
    const auto running_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < running_by &&
           metric(server_metrics(*client_), "spindle_num_requests_running") < kLoad + 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::close(fd);
  }
  for (auto& t : load) t.join();
  EXPECT_EQ(num_load_ok.load(), kLoad);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::map<std::string, double> m;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    m = server_metrics(*client_);
  } while (std::chrono::steady_clock::now() < deadline &&
           (metric(m, "spindle_requests_aborted_total") - metric(before, "spindle_requests_aborted_total") < 1 ||
            metric(m, "spindle_num_requests_running") != 0));
  EXPECT_EQ(metric(m, "spindle_requests_aborted_total") - metric(before, "spindle_requests_aborted_total"), 1);
  EXPECT_TRUE(kv_settled(*client_));
}

TEST_F(ServerApiTest, CompletionStreaming) {
  const std::string prompt = "In the beginning God created";
  const json body = {{"model", "kjv-tiny"}, {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true},
                     {"logprobs", 0}};
  const JsonReply whole = completion(body);
  ASSERT_EQ(whole.status, 200) << whole.body;

  json streamed = body;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  const SseReply sse = post_stream(*client_, "/v1/completions", streamed);
  const StreamSummary s = summarise(sse, false);
  EXPECT_EQ(s.text, whole.json["choices"][0]["text"]) << "the streamed text differs from the whole response";
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_EQ(s.num_tokens, 8) << "tokens streamed (one logprobs entry per token)";
  expect_usage(s.usage, num_prompt_tokens(prompt), 8);

  // Without stream_options.include_usage no chunk carries usage.
  streamed.erase("stream_options");
  const StreamSummary plain = summarise(post_stream(*client_, "/v1/completions", streamed), false);
  EXPECT_TRUE(plain.usage.is_null());
  EXPECT_EQ(plain.text, s.text);
}

// Tests that compare the text of two requests keep their prompts under one KV page (16 tokens):
// a prompt that shares a cached page with an earlier request is partly prefilled from the prefix
// cache, a different batch shape whose rounding may flip a near-tie greedy choice.

TEST_F(ServerApiTest, ChatStreaming) {
  const json messages = {{{"role", "user"}, {"content", "Who made the heaven?"}}};
  ASSERT_LE(num_chat_tokens(messages), 16);
  const json body = {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true},
                     {"logprobs", true}};
  const JsonReply whole = chat(body);
  ASSERT_EQ(whole.status, 200) << whole.body;

  json streamed = body;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  const SseReply sse = post_stream(*client_, "/v1/chat/completions", streamed);
  const StreamSummary s = summarise(sse, true);
  EXPECT_TRUE(s.first_has_role) << "the first chunk must carry delta.role = assistant:\n" << sse.raw;
  EXPECT_EQ(s.num_roles, 1);
  EXPECT_EQ(s.text, whole.json["choices"][0]["message"]["content"]);
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_EQ(s.num_tokens, 8);
  expect_usage(s.usage, num_chat_tokens(messages), 8);
}

TEST_F(ServerApiTest, ThirtyTwoConcurrentStreamingClients) {
  constexpr int kClients = 32;
  const auto before = server_metrics(*client_);
  struct Case {
    bool chat;
    int max_tokens;
    int prompt_tokens;
    json body;
    SseReply reply;
  };
  std::vector<Case> cases(kClients);
  int total_tokens = 0;
  for (int i = 0; i < kClients; ++i) {
    Case& c = cases[i];
    c.chat = i % 2 == 1;
    c.max_tokens = 4 + i % 9;
    total_tokens += c.max_tokens;
    const std::string text = "And it came to pass on the " + std::to_string(i + 1) + " day of the month, that";
    c.body = {{"max_tokens", c.max_tokens}, {"ignore_eos", true}, {"seed", i}, {"stream", true},
              {"stream_options", {{"include_usage", true}}}};
    if (c.chat) {
      c.body["messages"] = {{{"role", "user"}, {"content", text}}};
      c.body["logprobs"] = true;
      c.prompt_tokens = num_chat_tokens(c.body["messages"]);
    } else {
      c.body["prompt"] = text;
      c.body["logprobs"] = 0;
      c.prompt_tokens = num_prompt_tokens(text);
    }
  }
  std::vector<std::thread> threads;
  for (auto& c : cases) {
    threads.emplace_back([&c, this] {
      auto client = server_->client();
      c.reply = post_stream(*client, c.chat ? "/v1/chat/completions" : "/v1/completions", c.body);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE("client " + std::to_string(i));
    const Case& c = cases[i];
    const StreamSummary s = summarise(c.reply, c.chat);
    EXPECT_EQ(s.finish_reason, "length");
    EXPECT_EQ(s.num_tokens, c.max_tokens);
    expect_usage(s.usage, c.prompt_tokens, c.max_tokens);
  }
  const auto after = server_metrics(*client_);
  EXPECT_EQ(metric(after, "spindle_requests_finished_total") - metric(before, "spindle_requests_finished_total"), kClients);
  EXPECT_EQ(metric(after, "spindle_generation_tokens_total") - metric(before, "spindle_generation_tokens_total"),
            total_tokens);
}

TEST_F(ServerApiTest, ClientThatHangsUpMidStreamReleasesItsPages) {
  const auto before = server_metrics(*client_);
  constexpr int kMaxTokens = 400;
  // A completion cut after three chunks, a chat cut right after its role chunk.
  const SseReply a = post_stream(*client_, "/v1/completions",
                                 {{"prompt", "And God said"}, {"max_tokens", kMaxTokens}, {"ignore_eos", true}, {"stream", true}},
                                 /*stop_after_events=*/3);
  EXPECT_EQ(a.status, 200);
  EXPECT_TRUE(a.cancelled) << a.raw;
  const SseReply b = post_stream(*client_, "/v1/chat/completions",
                                 {{"messages", {{{"role", "user"}, {"content", "Amen."}}}},
                                  {"max_tokens", kMaxTokens},
                                  {"ignore_eos", true},
                                  {"stream", true}},
                                 /*stop_after_events=*/1);
  EXPECT_EQ(b.status, 200);
  EXPECT_TRUE(b.cancelled) << b.raw;

  // Both are aborted (not run to max_tokens) and every page they referenced is released.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  std::map<std::string, double> m;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    m = server_metrics(*client_);
  } while (std::chrono::steady_clock::now() < deadline &&
           (metric(m, "spindle_requests_aborted_total") - metric(before, "spindle_requests_aborted_total") < 2 ||
            metric(m, "spindle_kv_pages_in_use") != 0 || metric(m, "spindle_num_requests_running") != 0));
  EXPECT_EQ(metric(m, "spindle_requests_aborted_total") - metric(before, "spindle_requests_aborted_total"), 2);
  EXPECT_EQ(metric(m, "spindle_requests_finished_total") - metric(before, "spindle_requests_finished_total"), 0);
  EXPECT_LT(metric(m, "spindle_generation_tokens_total") - metric(before, "spindle_generation_tokens_total"),
            2 * kMaxTokens);
  EXPECT_EQ(metric(m, "spindle_kv_pages_in_use"), 0);
  EXPECT_EQ(metric(m, "spindle_num_requests_running"), 0);
  EXPECT_TRUE(kv_settled(*client_));

  // The server goes on serving.
  EXPECT_EQ(completion({{"prompt", "And God said"}, {"max_tokens", 2}}).status, 200);
}

TEST_F(ServerApiTest, EveryBadInputGetsItsStatus) {
  const std::string too_long_prompt = [] {
    std::string p;
    while (num_prompt_tokens(p) <= kContext) p += "And God said, Let there be light. ";
    return p;
  }();
  const int vocab = kjv_tokenizer().vocab_size();
  const json user = {{{"role", "user"}, {"content", "Amen."}}};
  struct BadCase {
    std::string what, path, body;
    int status;
    std::string param;
  };
  const std::string c = "/v1/completions", ch = "/v1/chat/completions";
  const std::vector<BadCase> cases = {
      {"malformed JSON", c, R"({"prompt": "And God said",)", 400, ""},
      {"malformed JSON (chat)", ch, R"({"messages": [)", 400, ""},
      {"empty body", c, "", 400, ""},
      {"not an object", c, "[1, 2]", 400, ""},
      {"max_tokens a string", c, R"({"prompt": "x", "max_tokens": "5"})", 400, "max_tokens"},
      {"max_tokens a float", c, R"({"prompt": "x", "max_tokens": 5.5})", 400, "max_tokens"},
      {"temperature a string", c, R"({"prompt": "x", "temperature": "hot"})", 400, "temperature"},
      {"stream a string", c, R"({"prompt": "x", "stream": "yes"})", 400, "stream"},
      {"prompt a number", c, R"({"prompt": 5})", 400, "prompt"},
      {"prompt missing", c, R"({"max_tokens": 5})", 400, "prompt"},
      {"messages a string", ch, R"({"messages": "hi"})", 400, "messages"},
      {"message without role", ch, R"({"messages": [{"content": "hi"}]})", 400, "messages[0]"},
      {"message content a number", ch, R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content"},
      {"unknown role", ch, R"({"messages": [{"role": "wizard", "content": "hi"}]})", 400, "messages[0].role"},
      {"negative max_tokens", c, R"({"prompt": "x", "max_tokens": -5})", 400, "max_tokens"},
      {"zero max_tokens", c, R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens"},
      {"negative max_tokens (chat)", ch, json{{"messages", user}, {"max_tokens", -1}}.dump(), 400, "max_tokens"},
      {"max_tokens past the context", c, R"({"prompt": "x", "max_tokens": 600})", 400, "max_tokens"},
      {"huge max_tokens", c, R"({"prompt": "x", "max_tokens": 1099511627776})", 400, "max_tokens"},
      {"max_completion_tokens past the context", ch, json{{"messages", user}, {"max_completion_tokens", 100000}}.dump(), 400,
       "max_completion_tokens"},
      {"prompt longer than the context", c, json{{"prompt", too_long_prompt}, {"max_tokens", 1}}.dump(), 400, "prompt"},
      {"messages longer than the context", ch,
       json{{"messages", {{{"role", "user"}, {"content", too_long_prompt}}}}, {"max_tokens", 1}}.dump(), 400, "messages"},
      {"token id past the vocabulary", c, json{{"prompt", {1, 2, vocab}}}.dump(), 400, "prompt"},
      {"token id past int32", c, R"({"prompt": [4294967297]})", 400, "prompt"},
      {"stop token id past int32", c, R"({"prompt": "x", "stop_token_ids": [4294967296]})", 400, "stop_token_ids"},
      {"n > 8", c, R"({"prompt": "x", "n": 9})", 400, "n"},
      {"n = 0", c, R"({"prompt": "x", "n": 0})", 400, "n"},
      {"temperature out of range", c, R"({"prompt": "x", "temperature": 5})", 400, "temperature"},
      {"logit_bias key not a token", c, R"({"prompt": "x", "logit_bias": {"abc": 1}})", 400, "logit_bias"},
      {"unknown model", c, R"({"model": "gpt-4", "prompt": "x"})", 404, "model"},
      {"unknown model (chat)", ch, json{{"model", "gpt-4"}, {"messages", user}}.dump(), 404, "model"},
      {"unknown route", "/v1/images/generations", R"({"prompt": "x"})", 404, ""},
      {"embeddings without input", "/v1/embeddings", R"({"model": "kjv-tiny"})", 400, "input"},
      {"invalid UTF-8 in a string", c, "{\"prompt\": \"And \xff\xfe God\"}", 400, ""},
  };
  for (const auto& bad : cases) {
    expect_api_error(post(*client_, bad.path, bad.body), bad.status, bad.param, bad.what);
  }
  // An unknown path that is not UTF-8 once decoded is echoed in the 404 message (as U+FFFD).
  client_->set_url_encode(false);
  expect_api_error(get(*client_, "/v1/%FF%FE"), 404, "", "invalid UTF-8 path");
  expect_api_error(post(*client_, "/v1/%C3%28", std::string("{}")), 404, "", "invalid UTF-8 path (POST)");
  client_->set_url_encode(true);
  // A streaming request is refused the same way, before any event.
  const JsonReply stream_bad = post(*client_, c, std::string(R"({"prompt": "x", "max_tokens": -1, "stream": true})"));
  expect_api_error(stream_bad, 400, "max_tokens", "streaming, negative max_tokens");
  EXPECT_THAT(stream_bad.content_type, ::testing::StartsWith("application/json"));

  // After all of these the server still serves.
  const JsonReply ok = completion({{"prompt", "And God said"}, {"max_tokens", 2}});
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(get(*client_, "/health").status, 200);
}

TEST_F(ServerApiTest, JsonBodyWithAnotherContentType) {
  // curl -d sends application/x-www-form-urlencoded; a JSON body over 8 KiB must still be read
  // as JSON, not refused as an oversized form.
  const std::string body = json{{"prompt", "And God said"}, {"max_tokens", 2}}.dump() + std::string(20000, ' ');
  for (const std::string type : {"application/x-www-form-urlencoded", "text/plain"}) {
    const JsonReply r = post(*client_, "/v1/completions", body, type);
    EXPECT_EQ(r.status, 200) << type << ": " << r.body;
    EXPECT_EQ(r.json["usage"]["completion_tokens"], 2) << type;
  }
}

TEST_F(ServerApiTest, GreedyOutputEqualsSpindleGenerate) {
  constexpr int kTokens = 16;
  const std::string prompt = "In the beginning was the Word";
  const std::string question = "Who is the King of glory?";
  std::vector<std::string> generate = {spindle_binary(), "generate", "--max-tokens", std::to_string(kTokens),
                                       "--temperature", "0", "--ignore-eos", "--no-stats", "--no-backend-cache",
                                       "--attention-backend-policy", "priority"};
  generate.insert(generate.end(), kServerArgs.begin(), kServerArgs.end());
  std::vector<std::string> plain = generate, chat_args = generate;
  plain.insert(plain.end(), {"--prompt", prompt});
  chat_args.insert(chat_args.end(), {"--chat", "--prompt", question});
  auto plain_run = std::async(std::launch::async, [&] { return run_child(plain, std::chrono::seconds(120)); });
  auto chat_run = std::async(std::launch::async, [&] { return run_child(chat_args, std::chrono::seconds(120)); });

  const JsonReply r = completion({{"prompt", prompt}, {"max_tokens", kTokens}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const JsonReply rc = chat({{"messages", {{{"role", "user"}, {"content", question}}}},
                             {"max_tokens", kTokens},
                             {"temperature", 0},
                             {"ignore_eos", true}});
  ASSERT_EQ(rc.status, 200) << rc.body;

  const ChildResult g = plain_run.get();
  ASSERT_EQ(g.exit_code, 0) << g.err;
  // generate prints the prompt, the continuation and a newline.
  EXPECT_EQ(g.out, prompt + r.json["choices"][0]["text"].get<std::string>() + "\n");
  const ChildResult gc = chat_run.get();
  ASSERT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_EQ(gc.out, rc.json["choices"][0]["message"]["content"].get<std::string>() + "\n");
}

TEST_F(ServerApiTest, OfficialOpenAiNodeClient) {
  if (std::string why = node_client_unavailable({"openai"}); !why.empty()) GTEST_SKIP() << why;
  expect_node_client_passes("openai_client_test", server_->base_url() + "/v1");
}

}  // namespace
}  // namespace spindle::testing
