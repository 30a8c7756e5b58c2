// Structured output end to end (src/server/structured_output.cc, engine/grammar_state.h): the real
// `spindle serve` with the embedded kjv-tiny, sampling at temperature 1 so the model would wander
// anywhere unconstrained. Every constraint field, on both endpoints: the text follows it, checked
// by independent means — JSON Schema instances by Debian's python3-jsonschema (Draft 2020-12),
// regexes by std::regex (ECMAScript), GBNF grammars by an equivalent std::regex, choices by set
// membership, json_object by nlohmann's parser. Then the edges: a malformed or uncompilable
// constraint is a 400 naming its field; n > 1 choices each follow the grammar; logprobs are those
// of the masked distribution (the allowed first tokens' probabilities sum to 1); stop strings
// still end a document early; max_tokens cuts a document with finish_reason "length"; a grammar
// that can only end stops with "stop" even with ignore_eos; streaming deltas join into the same.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "server_checks.h"
#include "spindle_server.h"

namespace spindle::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kCompletions = "/v1/completions", kChat = "/v1/chat/completions";

json body_for(const std::string& path, json extra) {
  json b = path == kChat ? json{{"messages", json::array({{{"role", "user"}, {"content", "Answer."}}})}}
                         : json{{"prompt", "And God said"}};
  b["temperature"] = 1.0;
  b["max_tokens"] = 400;  // compact JSON whitespace allows a newline plus 48 blanks per gap, one token each on kjv-tiny
  b.update(extra);
  return b;
}

std::string text_of(const json& response, size_t i = 0) {
  const json& c = response["choices"][i];
  const json& t = c.contains("message") ? c["message"]["content"] : c["text"];
  return t.is_string() ? t.get<std::string>() : "<no text>";
}

// Validates each (schema, instance text) with python3-jsonschema; "" where valid, else why.
std::vector<std::string> validate_with_python(const std::vector<std::pair<json, std::string>>& cases) {
  const fs::path dir = fs::temp_directory_path() / ("spindle_structured_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  json all = json::array();
  for (const auto& [schema, text] : cases) all.push_back({{"schema", schema}, {"text", text}});
  std::ofstream(dir / "cases.json") << all.dump();
  const std::string script =
      "import json,sys,jsonschema\n"
      "for c in json.load(open(sys.argv[1])):\n"
      "  try:\n"
      "    jsonschema.Draft202012Validator(c['schema']).validate(json.loads(c['text']))\n"
      "    print('OK')\n"
      "  except Exception as e:\n"
      "    print('BAD ' + str(e).splitlines()[0])\n";
  std::ofstream(dir / "validate.py") << script;
  std::vector<std::string> verdicts;
  FILE* p = ::popen(("python3 " + (dir / "validate.py").string() + " " + (dir / "cases.json").string()).c_str(), "r");
  if (p == nullptr) return std::vector<std::string>(cases.size(), "python3 did not start");
  char line[4096];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    std::string s(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    verdicts.push_back(s == "OK" ? "" : s);
  }
  ::pclose(p);
  fs::remove_all(dir);
  verdicts.resize(cases.size(), "no verdict (is python3-jsonschema installed? scripts/setup.sh)");
  return verdicts;
}

class ServerStructuredTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = SpindleServer::start({"--max-total-tokens", "16384"}, &start_error_); }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << start_error_;
    ASSERT_TRUE(server_->alive()) << "the server died:\n" << server_->log();
    client_ = server_->client();
  }
  void TearDown() override {
    if (server_ && server_->alive()) EXPECT_TRUE(kv_settled(*client_));
  }
  json ok(const std::string& path, const json& body) {
    const JsonReply r = post(*client_, path, body);
    EXPECT_EQ(r.status, 200) << body.dump() << "\n" << r.body;
    return r.status == 200 ? r.json : json::object();
  }

  static inline std::unique_ptr<SpindleServer> server_;
  static inline std::string start_error_;
  std::unique_ptr<httplib::Client> client_;
};

// Bounded schemas: every document ends well within max_tokens.
const json kVerse = {{"type", "object"},
                     {"properties",
                      {{"book", {{"type", "string"}, {"enum", {"Genesis", "Exodus", "Psalms"}}}},
                       {"chapter", {{"type", "integer"}, {"minimum", 1}, {"maximum", 150}}},
                       {"amen", {{"type", "boolean"}}}}},
                     {"required", {"book", "chapter"}},
                     {"additionalProperties", false}};
const json kList = {{"type", "array"},
                    {"items", {{"type", "string"}, {"pattern", "^[a-z]{1,6}$"}}},
                    {"minItems", 1},
                    {"maxItems", 3}};

TEST_F(ServerStructuredTest, EveryConstraintFieldConstrains) {
  struct Case {
    std::string what;
    json extra;
    enum { kSchema, kObject, kRegex, kChoice } check;
    json schema;           // kSchema
    std::string pattern;   // kRegex (ECMAScript, whole text)
    std::set<std::string> choices;
  };
  const json strict_rf = {{"type", "json_schema"}, {"json_schema", {{"name", "verse"}, {"schema", kVerse}, {"strict", true}}}};
  const std::string gbnf = "root ::= (\"yea\" | \"nay\") \" \" [0-9] [0-9]?";
  const std::string gbnf_re = "(yea|nay) [0-9][0-9]?";
  const std::vector<Case> cases = {
      {"response_format json_schema", {{"response_format", strict_rf}}, Case::kSchema, kVerse, "", {}},
      {"response_format json_object", {{"response_format", {{"type", "json_object"}}}}, Case::kObject, {}, "", {}},
      {"structured_outputs.json", {{"structured_outputs", {{"json", kList}}}}, Case::kSchema, kList, "", {}},
      {"structured_outputs.json without whitespace", {{"structured_outputs", {{"json", kList}, {"disable_any_whitespace", true}}}},
       Case::kSchema, kList, "", {}},
      {"structured_outputs.regex", {{"structured_outputs", {{"regex", "[0-9]{2,4}-[a-z]{3}"}}}}, Case::kRegex, {}, "[0-9]{2,4}-[a-z]{3}", {}},
      {"structured_outputs.choice", {{"structured_outputs", {{"choice", {"light", "darkness"}}}}}, Case::kChoice, {}, "", {"light", "darkness"}},
      {"structured_outputs.grammar", {{"structured_outputs", {{"grammar", gbnf}}}}, Case::kRegex, {}, gbnf_re, {}},
      {"guided_json", {{"guided_json", kVerse}}, Case::kSchema, kVerse, "", {}},
      {"guided_json + guided_whitespace_pattern", {{"guided_json", kList}, {"guided_whitespace_pattern", "[ ]?"}},
       Case::kSchema, kList, "", {}},
      {"guided_regex", {{"guided_regex", "(amen|selah)!{1,3}"}}, Case::kRegex, {}, "(amen|selah)!{1,3}", {}},
      {"guided_choice", {{"guided_choice", {"yes", "no", "maybe so"}}}, Case::kChoice, {}, "", {"yes", "no", "maybe so"}},
      {"guided_grammar", {{"guided_grammar", gbnf}}, Case::kRegex, {}, gbnf_re, {}},
      {"regex (SGLang)", {{"regex", "[A-Z][a-z]{2,5}"}}, Case::kRegex, {}, "[A-Z][a-z]{2,5}", {}},
      {"ebnf (SGLang)", {{"ebnf", gbnf}}, Case::kRegex, {}, gbnf_re, {}},
      {"json_schema string (SGLang)", {{"json_schema", kList.dump()}}, Case::kSchema, kList, "", {}},
      {"json_schema object (llama.cpp)", {{"json_schema", kVerse}}, Case::kSchema, kVerse, "", {}},
      {"grammar (llama.cpp)", {{"grammar", gbnf}}, Case::kRegex, {}, gbnf_re, {}},
  };
  std::vector<std::pair<json, std::string>> to_validate;
  std::vector<std::string> where;
  for (const std::string& path : {kCompletions, kChat}) {
    for (const auto& c : cases) {
      for (int seed : {1, 2}) {
        const std::string what = path + " " + c.what + " seed " + std::to_string(seed);
        json extra = c.extra;
        extra["seed"] = seed;
        const json r = ok(path, body_for(path, extra));
        if (!r.contains("choices")) continue;
        const std::string text = text_of(r);
        EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << what << ": " << text;
        if (c.what.ends_with("without whitespace")) {
          EXPECT_EQ(text.find_first_of(" \n\t\r"), std::string::npos) << what << ": " << text;
        }
        if (c.check == Case::kSchema) {
          to_validate.emplace_back(c.schema, text);
          where.push_back(what + ": " + text);
        } else if (c.check == Case::kObject) {
          const json v = json::parse(text, nullptr, false);
          EXPECT_TRUE(v.is_object()) << what << ": " << text;
        } else if (c.check == Case::kRegex) {
          EXPECT_TRUE(std::regex_match(text, std::regex(c.pattern))) << what << ": " << text;
        } else {
          EXPECT_TRUE(c.choices.count(text)) << what << ": " << text;
        }
      }
    }
  }
  const auto verdicts = validate_with_python(to_validate);
  for (size_t i = 0; i < verdicts.size(); ++i) EXPECT_EQ(verdicts[i], "") << where[i];
  EXPECT_GE(to_validate.size(), 20u);
}

TEST_F(ServerStructuredTest, BadConstraintsAre400sNamingTheField) {
  struct Case {
    json extra;
    std::string param, message;
  };
  auto j = [](const char* text) { return json::parse(text); };
  const std::vector<Case> cases = {
      {j(R"({"guided_json": {"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}}})"), "guided_json",
       "#/properties/a/multipleOf"},
      {j(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}})"),
       "response_format.json_schema.schema", "#/not"},
      {j(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})"),
       "response_format.json_schema.schema", "required"},
      {j(R"({"response_format": {"type": "xml"}})"), "response_format.type", "json_schema"},
      {j(R"({"response_format": {"type": "json_object", "schema": {}}})"), "response_format.schema", ""},
      {j(R"({"guided_regex": "(?=a)b"})"), "guided_regex", "regex"},
      {j(R"({"regex": "a("})"), "regex", "regex"},
      {j(R"({"grammar": "root ::= missing"})"), "grammar", "gbnf"},
      {j(R"({"ebnf": "root ::= <[12]>"})"), "ebnf", "gbnf"},
      {j(R"({"guided_choice": []})"), "guided_choice", "non-empty"},
      {j(R"({"guided_choice": ["a", 1]})"), "guided_choice", "strings"},
      {j(R"({"json_schema": "{not json"})"), "json_schema", "not valid JSON"},
      {j(R"({"structured_outputs": {}})"), "structured_outputs", "needs one of"},
      {j(R"({"structured_outputs": {"structural_tag": "x"}})"), "structured_outputs.structural_tag", "not supported"},
      {j(R"({"structured_outputs": {"regex": "a", "choice": ["b"]}})"), "structured_outputs.choice", "only one"},
      {j(R"({"guided_whitespace_pattern": " ", "guided_regex": "a"})"), "guided_whitespace_pattern", "JSON"},
      {j(R"({"structured_outputs": {"json": {}, "disable_any_whitespace": true, "whitespace_pattern": " "}})"),
       "structured_outputs.disable_any_whitespace", "contradict"},
      {j(R"({"response_format": {"type": "json_object"}, "guided_choice": ["a"]})"), "guided_choice", "only one"},
  };
  for (const std::string& path : {kCompletions, kChat}) {
    for (const auto& c : cases) {
      for (bool stream : {false, true}) {
        json b = body_for(path, c.extra);
        b["stream"] = stream;
        const JsonReply r = post(*client_, path, b);
        expect_api_error(r, 400, c.param, b.dump());
        if (!c.message.empty()) {
          EXPECT_THAT(r.json["error"].value("message", ""), ::testing::HasSubstr(c.message)) << b.dump();
        }
      }
    }
  }
  EXPECT_TRUE(server_->alive());
}

TEST_F(ServerStructuredTest, ChoicesLogprobsStopStringsAndLength) {
  // n = 3 choices, each its own matcher: each is one of the strings.
  const json n3 = ok(kChat, body_for(kChat, {{"n", 3}, {"seed", 4}, {"guided_choice", {"alpha", "omega", "amen"}}}));
  ASSERT_EQ(n3["choices"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_THAT(text_of(n3, i), ::testing::AnyOf("alpha", "omega", "amen")) << i;
    EXPECT_EQ(n3["choices"][i]["finish_reason"], "stop");
  }
  // Logprobs of the masked distribution: the first token's alternatives are all prefixes of a
  // choice, and with every allowed token listed their probabilities sum to 1.
  const json lp = ok(kCompletions, body_for(kCompletions, {{"seed", 1}, {"logprobs", 20}, {"guided_choice", {"yes", "no"}}}));
  const json& first = lp["choices"][0]["logprobs"]["top_logprobs"][0];
  double mass = 0;
  for (const auto& [token, logprob] : first.items()) {
    EXPECT_TRUE(std::string("yes").starts_with(token) || std::string("no").starts_with(token)) << token;
    mass += std::exp(logprob.get<double>());
  }
  EXPECT_NEAR(mass, 1.0, 1e-4) << first.dump();
  EXPECT_LE(lp["choices"][0]["logprobs"]["token_logprobs"][0].get<double>(), 0.0);
  // A stop string ends the document early (documented: the text is then a prefix).
  const json stopped = ok(kCompletions, body_for(kCompletions, {{"guided_choice", {"light and darkness"}}, {"stop", " and"}}));
  EXPECT_EQ(text_of(stopped), "light");
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  // max_tokens cuts it: "length", and the text is a prefix of a matching one.
  const json cut = ok(kCompletions, body_for(kCompletions, {{"guided_regex", "[a-z]{60}"}, {"max_tokens", 4}}));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(std::regex_match(text_of(cut), std::regex("[a-z]{1,59}"))) << text_of(cut);
  // Only end-of-sequence can follow: "stop", even with ignore_eos.
  const json ended = ok(kCompletions, body_for(kCompletions, {{"guided_choice", {"selah"}}, {"ignore_eos", true}, {"max_tokens", 50}}));
  EXPECT_EQ(text_of(ended), "selah");
  EXPECT_EQ(ended["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(ended["usage"]["completion_tokens"].get<int>(), 50);
  // Streaming: the deltas join into a valid document.
  const SseReply s = post_stream(*client_, kChat, body_for(kChat, {{"stream", true}, {"seed", 3}, {"guided_json", kVerse}}));
  EXPECT_TRUE(s.done) << s.raw;
  std::string joined;
  for (const auto& e : s.events) {
    if (e.contains("choices") && !e["choices"].empty() && e["choices"][0]["delta"].contains("content")) {
      joined += e["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  const auto verdicts = validate_with_python({{kVerse, joined}});
  EXPECT_EQ(verdicts.at(0), "") << joined;
}

}  // namespace
}  // namespace spindle::testing
