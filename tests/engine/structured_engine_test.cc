// Structured output in the engine, end to end on the CPU with the embedded kjv-tiny (a model that
// knows no JSON: whatever structure comes out is the grammar's doing). Every schema of
// tests/grammar/data/schema_corpus.json (strict: unspecified additionalProperties false) and four
// bounded schemas x seeds, sampled at temperature 1 (top-k / top-p and a
// repetition penalty on some, so the mask meets every sampling step), plus regexes and choices:
//   - every output that ends "stop" validates against its schema by python3-jsonschema (Draft
//     2020-12; Debian's, an independent implementation), regexes by std::regex, choices by
//     membership; an output cut by max_tokens ("length") is a prefix the grammar still accepts
//     (the grammar's own matcher; about half, the model rambles inside unbounded strings);
//   - the same requests give the same tokens with the engine's host sampler (engine::Sampler),
//     with the device sampler's contract on the host (SamplingBatch masks, sample_rows_on_host:
//     validated again, a different draw), with that and the overlap schedule (equal to one step
//     at a time token for token: constrained steps do not run ahead), and with the n-gram
//     proposer speculating on every step (its drafts cut to what the grammar accepts, each verify
//     row masked: point-mass drafts leave every draw as it was, so the tokens are equal).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <set>

#include "support/jsonschema_reasons.h"
#include "engine/kjv_grammar_fixture.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/simple_grammars.h"

namespace spindle {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using testing::SpecResult;
using testing::SpecRun;

const std::filesystem::path kCorpus = std::filesystem::path(SPINDLE_SOURCE_DIR) / "tests/grammar/data/schema_corpus.json";

struct Constrained {
  std::string name;
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  json schema;           // JSON Schema cases
  std::string pattern;   // regex cases (ECMAScript, whole text)
  std::set<std::string> choices;
};

std::vector<Constrained> load_cases() {
  std::vector<Constrained> cases;
  std::ifstream f(kCorpus);
  const ordered_json corpus = ordered_json::parse(f);
  for (const auto& entry : corpus) {
    Constrained c;
    c.name = entry.at("name").get<std::string>();
    c.schema = json::parse(entry.at("schema").dump());
    // At most one space between JSON tokens (vLLM's whitespace_pattern): kjv-tiny fills the default
    // compact whitespace's newline-plus-48-blanks one token at a time, and documents run long.
    // strict: an unspecified additionalProperties means false (else the model invents long keys).
    grammar::JsonGrammarOptions options;
    options.whitespace_pattern = "[ ]?";
    options.strict = true;
    c.grammar = grammar::CompiledGrammar::compile(grammar::grammar_from_json_schema(entry.at("schema").dump(), options));
    cases.push_back(std::move(c));
  }
  // Bounded schemas (every document ends within max_tokens unless the model dawdles in numbers).
  for (const char* text : {
           R"({"type": "object", "properties": {"book": {"enum": ["Genesis", "Exodus", "Psalms"]},
               "chapter": {"type": "integer", "minimum": 1, "maximum": 150}, "amen": {"type": "boolean"}},
               "required": ["book", "chapter"], "additionalProperties": false})",
           R"({"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,6}$"}, "minItems": 1, "maxItems": 3})",
           R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": ["integer", "null"], "maximum": 99,
               "minimum": -9}}, "required": ["ok", "n"], "additionalProperties": false})",
           R"({"anyOf": [{"type": "boolean"}, {"type": "string", "maxLength": 4}, {"enum": [1, 2, 3]}]})"}) {
    Constrained c;
    c.name = text;
    c.schema = json::parse(text);
    grammar::JsonGrammarOptions options;
    options.whitespace_pattern = "[ ]?";
    c.grammar = grammar::CompiledGrammar::compile(grammar::grammar_from_json_schema(text, options));
    cases.push_back(std::move(c));
  }
  for (const std::string& re : {std::string("[A-Z][a-z]{2,8}( [0-9]{1,3}:[0-9]{1,3})?"), std::string("(amen|selah)!")}) {
    cases.push_back({"regex " + re, grammar::CompiledGrammar::compile(grammar::grammar_from_regex(re)), {}, re, {}});
  }
  const std::vector<std::string> choices = {"In the beginning", "And God said", "Amen"};
  cases.push_back({"choice", grammar::CompiledGrammar::compile(grammar::grammar_from_choices(choices)), {}, "",
                   std::set<std::string>(choices.begin(), choices.end())});
  return cases;
}

// python3-jsonschema's verdict per (schema, text): "" where valid, else why.
std::vector<std::string> validate(const std::vector<std::pair<json, std::string>>& cases) {
  return testing::jsonschema_reasons(cases);
}

class StructuredEngineTest : public testing::KjvGrammarFixture {
 protected:
  static void SetUpTestSuite() {
    KjvGrammarFixture::SetUpTestSuite();
    cases_ = load_cases();
    prompt_ = tok_->encode("And God said, Let there be", true);
    for (size_t i = 0; i < cases_.size(); ++i) {
      for (int seed = 0; seed < kSeeds; ++seed) {
        engine::SamplingParams p;
        p.temperature = 1.0f;
        p.seed = 100 * i + seed;
        p.max_tokens = 160;
        if (seed == 1) p.top_k = 40;
        if (seed == 1 && i % 2 == 0) {
          p.top_p = 0.9f;
          p.repetition_penalty = 1.2f;
        }
        p.grammar = cases_[i].grammar;
        params_.push_back(p);
      }
    }
    // One unconstrained request among them (the batch is mixed).
    engine::SamplingParams free = testing::greedy_params(40);
    params_.push_back(free);
  }
  static SpecResult serve(SpecRun run) {
    run.max_running_requests = 64;
    return serve_prompt(run, prompt_, params_);
  }
  // Checks every constrained output of `r`; returns how many ended "length".
  static int check_outputs(const SpecResult& r, const std::string& what) {
    std::vector<std::pair<json, std::string>> to_validate;
    std::vector<std::string> where;
    int num_length = 0;
    for (size_t k = 0; k + 1 < params_.size(); ++k) {
      const Constrained& c = cases_[k / kSeeds];
      const std::string text = r.texts[k];
      const std::string at = what + " " + c.name + " seed " + std::to_string(k % kSeeds) + ": " + text;
      EXPECT_TRUE(r.finish_reasons[k] == engine::FinishReason::kStop || r.finish_reasons[k] == engine::FinishReason::kLength)
          << at;
      if (r.finish_reasons[k] == engine::FinishReason::kLength) {
        ++num_length;
        grammar::Matcher m(c.grammar, info_);
        EXPECT_TRUE(m.accept_bytes(text)) << "not a prefix of a valid document: " << at;
        continue;
      }
      if (!c.pattern.empty()) {
        EXPECT_TRUE(std::regex_match(text, std::regex(c.pattern))) << at;
      } else if (!c.choices.empty()) {
        EXPECT_TRUE(c.choices.count(text)) << at;
      } else {
        to_validate.emplace_back(c.schema, text);
        where.push_back(at);
      }
    }
    const auto verdicts = validate(to_validate);
    for (size_t i = 0; i < verdicts.size(); ++i) EXPECT_EQ(verdicts[i], "") << where[i];
    EXPECT_GE(to_validate.size(), 8u) << what << ": too few JSON documents completed to validate";
    EXPECT_TRUE(r.integrity_ok) << what;
    EXPECT_EQ(r.metrics.kv_pages_in_use, 0) << what;
    return num_length;
  }

  static constexpr int kSeeds = 2;
  static inline std::vector<Constrained> cases_;
  static inline std::vector<engine::SamplingParams> params_;
  static inline std::vector<TokenId> prompt_;
};

TEST_F(StructuredEngineTest, HostSamplerOutputsFollowTheirGrammars) {
  const SpecResult host = serve({});
  const int num_length = check_outputs(host, "host sampler");
  // kjv-tiny rambles inside unbounded strings and numbers: about half are cut (20 of 38 here).
  EXPECT_LE(num_length, static_cast<int>(params_.size()) * 3 / 4) << "nearly every document was cut by max_tokens";
  // The same with the n-gram proposer on every step: its drafts are checked against the grammar
  // and verified under masks, so seeded draws are those of decoding without drafts.
  SpecRun ngram;
  ngram.proposer = "ngram";
  const SpecResult spec = serve(ngram);
  for (size_t k = 0; k + 1 < params_.size(); ++k) EXPECT_EQ(spec.tokens[k], host.tokens[k]) << k;
  EXPECT_EQ(spec.tokens.back(), host.tokens.back());
}

TEST_F(StructuredEngineTest, DeviceContractAndOverlapScheduleFollowTheirGrammars) {
  SpecRun device;
  device.sample_on_host = true;  // SamplingBatch masks through sample_rows_on_host
  const SpecResult a = serve(device);
  check_outputs(a, "device contract");
  SpecRun overlap = device;
  overlap.overlap_schedule = true;
  const SpecResult b = serve(overlap);
  for (size_t k = 0; k < params_.size(); ++k) {
    EXPECT_EQ(b.tokens[k], a.tokens[k]) << k;
    EXPECT_EQ(b.finish_reasons[k], a.finish_reasons[k]) << k;
  }
}

}  // namespace
}  // namespace spindle
