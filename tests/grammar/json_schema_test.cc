// JSON Schema -> grammar against independent truth (Debian's python3-jsonschema, through
// validate_instances.py): for every schema of data/schema_corpus.json, random documents made by
// walking the grammar byte by byte all validate, the corpus' valid instances are accepted and its
// invalid instances (confirmed invalid by jsonschema) rejected. Unsupported keywords and
// pathological schemas are errors naming a JSON pointer, in bounded time.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <random>
#include <sstream>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "support/byte_grammar.h"
#include "support/jsonschema_verdicts.h"
#include "util/error.h"

namespace spindle::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::filesystem::path here() { return std::filesystem::path(SPINDLE_FIXTURES_DIR) / ".." / "grammar"; }

using testing::jsonschema_verdicts;
using testing::matches;

// A random document: random allowed bytes, steering to closing bytes once long.
std::optional<std::string> random_document(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937& rng) {
  return testing::random_walk(g, rng,
                              {.max_bytes = 4000, .end_one_in = 16, .end_after = 300, .steer_after = 150,
                               .random_one_in = 4, .closers = {'}', ']', '"'}});
}

Json corpus() {
  std::ifstream f(here() / "data" / "schema_corpus.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return Json::parse(ss.str());
}

// format uri-template (RFC 6570 section 2): reduced from MaskBench MCPspec---CompleteRequest,
// whose invalid instance (an unclosed expression) was accepted while the format was ignored.
// Debian's python3-jsonschema cannot check this format (its uri_template module is not
// packaged), so the verdicts are read from RFC 6570's grammar: literals exclude space, " ' % < >
// \ ^ ` { | } (except pct-encoded); an expression is "{" [operator] varspec *("," varspec) "}",
// varspec = varname [":" 1-9 *3DIGIT / "*"].
TEST(JsonSchema, UriTemplateFormat) {
  const auto g = CompiledGrammar::compile(grammar_from_json_schema(R"({"type":"string","format":"uri-template"})"));
  for (const char* ok : {R"("http://example.com/resource/{id}")", R"("{+path}/here{?q,lang}")", R"("{var:3}{list*}")",
                         R"("/search{?q}&x=%20")", R"("{a.b,c_d}")", R"("")"}) {
    EXPECT_TRUE(matches(g, ok)) << ok;
  }
  for (const char* bad : {R"("http://example.com/resource/{")", R"("{}")", R"("a b")", R"("{var:0}")",
                          R"("{va r}")", R"("x}")", R"("100%")", R"("{a,}")"}) {
    EXPECT_FALSE(matches(g, bad)) << bad;
  }
}

TEST(JsonSchema, CorpusAgainstJsonschema) {
  const Json entries = corpus();
  ASSERT_GE(entries.size(), 10u);
  std::vector<std::pair<Json, std::string>> jobs;
  std::vector<std::string> expect;  // verdict wanted per job
  std::vector<std::string> what;
  std::mt19937 rng(7);
  for (const Json& e : entries) {
    const std::string name = e["name"].get<std::string>();
    for (const bool flexible : {false, true}) {
      JsonGrammarOptions o;
      if (flexible) o.whitespace = JsonGrammarOptions::Whitespace::kFlexible;
      const auto g = CompiledGrammar::compile(grammar_from_json_schema(e["schema"].dump(), o));
      for (const auto& v : e["valid"]) {
        EXPECT_TRUE(matches(g, v.get<std::string>())) << name << ": valid instance refused: " << v;
        jobs.push_back({e["schema"], v.get<std::string>()}), expect.push_back("1"), what.push_back(name + " valid");
      }
      for (const auto& v : e["invalid"]) {
        EXPECT_FALSE(matches(g, v.get<std::string>())) << name << ": invalid instance accepted: " << v;
        jobs.push_back({e["schema"], v.get<std::string>()}), expect.push_back("0"), what.push_back(name + " invalid");
      }
      if (e.contains("walk") && !e["walk"].get<bool>()) continue;
      // Random walks through extra keys allowed anywhere rarely reach the required ones, so the
      // walks use the grammar with extra keys after the declared ones: a sublanguage of g (the
      // instances above check the rest).
      o.extra_keys_anywhere = false;
      const auto walk_g = CompiledGrammar::compile(grammar_from_json_schema(e["schema"].dump(), o));
      int made = 0;
      for (int i = 0; i < 25; ++i) {
        if (auto doc = random_document(walk_g, rng)) {
          EXPECT_TRUE(matches(g, *doc)) << name << ": the full grammar refuses " << *doc;
          ++made;
          jobs.push_back({e["schema"], *doc}), expect.push_back("1"), what.push_back(name + " generated: " + *doc);
        }
      }
      EXPECT_GE(made, 20) << name << ": random walks did not finish";
    }
  }
  const std::string verdicts = jsonschema_verdicts(jobs);
  ASSERT_EQ(verdicts.size(), jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (expect[i] == "1") {
      EXPECT_EQ(verdicts[i], '1') << what[i];
    } else {  // invalid: jsonschema refuses it, or it is not JSON at all
      EXPECT_NE(verdicts[i], '1') << what[i];
    }
  }
}

TEST(JsonSchema, StrictModeClosesObjects) {
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  const auto loose = CompiledGrammar::compile(grammar_from_json_schema(schema));
  const auto strict = CompiledGrammar::compile(grammar_from_json_schema(schema, {.strict = true}));
  EXPECT_TRUE(matches(loose, R"({"a":1,"b":[true]})"));
  EXPECT_FALSE(matches(strict, R"({"a":1,"b":[true]})"));
  EXPECT_TRUE(matches(strict, R"({"a":1})"));
  EXPECT_TRUE(matches(strict, R"({})"));
}

TEST(JsonSchema, ExtraKeysAnywhereButNeverADeclaredName) {
  const auto g = CompiledGrammar::compile(
      grammar_from_json_schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}}})"));
  EXPECT_TRUE(matches(g, R"({"x":true,"a":1,"y":null,"b":"s","z":[]})"));
  EXPECT_TRUE(matches(g, R"({"$schema":"s","b":"s"})"));
  EXPECT_FALSE(matches(g, R"({"a":"not an integer"})"));    // "a" cannot pass as an extra key
  EXPECT_FALSE(matches(g, R"({"\u0061":"not an integer"})"));  // nor spelled with an escape
  EXPECT_FALSE(matches(g, R"({"b":"s","a":1})"));           // declared order
  EXPECT_TRUE(matches(g, R"({"ab":"extra","a":1})"));
}

TEST(JsonSchema, WhitespaceCompactAllowsOneGap) {
  const auto g = CompiledGrammar::compile(grammar_from_json_schema(R"({"type":"array","items":{"type":"integer"}})"));
  EXPECT_TRUE(matches(g, "[1, 2,\n  3]"));
  EXPECT_FALSE(matches(g, "[1,  2]"));
  EXPECT_FALSE(matches(g, "[1,\n\n2]"));
  EXPECT_FALSE(matches(g, " [1]"));
  const auto flex = CompiledGrammar::compile(grammar_from_json_schema(R"({"type":"array","items":{"type":"integer"}})",
                                                                      {.whitespace = JsonGrammarOptions::Whitespace::kFlexible}));
  EXPECT_TRUE(matches(flex, "[1 ,  2,\n\n\t3 ]"));
}

TEST(JsonSchema, PropertyOrderAsDeclared) {
  const auto g = CompiledGrammar::compile(
      grammar_from_json_schema(R"({"type":"object","properties":{"z":{"type":"null"},"a":{"type":"null"}},"required":["z","a"]})"));
  EXPECT_TRUE(matches(g, R"({"z":null,"a":null})"));
  EXPECT_FALSE(matches(g, R"({"a":null,"z":null})"));
}

void expect_error(const std::string& schema, const std::string& needle) {
  try {
    grammar_from_json_schema(schema);
    ADD_FAILURE() << "no error for " << schema;
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
}

TEST(JsonSchema, UnsupportedIsAnErrorWithPointer) {
  expect_error(R"({"type":"object","properties":{"a~b/c":{"not":{"type":"string"}}}})", "#/properties/a~0b~1c/not");
  expect_error(R"({"type":"string","pattern":"(?=x)y"})", "lookahead");
  expect_error(R"({"type":"string","pattern":"(a)\\1"})", "backreference");
  expect_error(R"({"items":{"uniqueItems":true}})", "#/items/uniqueItems");
  expect_error(R"({"$ref":"http://example.com/s.json"})", "#/$ref");
  expect_error(R"({"$ref":"#/$defs/missing"})", "points to nothing");
  expect_error(R"({"type":"number","minimum":0.5})", "non-integral");
  expect_error(R"({"type":"object","properties":{"a":1}})", "#/properties/a");
  expect_error("{not json", "not valid JSON");
  // oneOf is matched as anyOf only where the branches cannot overlap.
  expect_error(R"({"oneOf":[{"type":"integer"},{"type":"number","maximum":3}]})", "#/oneOf");
  expect_error(R"({"oneOf":[{"required":["a"]},{"required":["b"]}]})", "may both match");
}

TEST(JsonSchema, PathologicalSchemasFailFast) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < 200; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  expect_error(deep, "nested deeper");
  expect_error(R"({"type":"array","maxItems":100000000})", "maxItems");
  expect_error(R"({"type":"string","maxLength":100000000})", "maxLength");
  // A pattern whose automaton is too large for the limits.
  try {
    CompiledGrammar::compile(grammar_from_json_schema(R"({"type":"string","pattern":"^(.{1000}){1000}$"})"));
    ADD_FAILURE() << "huge pattern compiled";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("too large"), std::string::npos) << e.message();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

}  // namespace
}  // namespace spindle::grammar
