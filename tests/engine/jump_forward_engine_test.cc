// Speculative drafts under a grammar and jump-forward (the grammar's forced continuation verified
// as drafts), end to end on the CPU with the golden llama-gqa-f32 checkpoint (random weights, a
// 1024-token byte-level BPE vocabulary: whatever structure comes out is the grammar's doing), for
// a schema of 6 fixed keys (strict: every key required, in order) and for looser ones:
//   - greedy: the tokens with jump-forward, and with the n-gram proposer or a draft model (the
//     target itself) on top of it, equal those without any drafts, token for token; jump-forward
//     drafted and the model accepted its drafts (the metrics), so the paths compared differ;
//   - temperature 1, seeded: jump-forward's point-mass drafts leave every draw as it was (equal
//     tokens); every output that ends "stop" validates by python3-jsonschema (Draft 2020-12, an
//     independent implementation), with the host sampler and the device sampler's contract
//     (sample_rows_on_host: each verify row's mask in SamplingBatch::masks); a draft model's q
//     drafts (the rejection rule under the mask) validate too;
//   - GrammarState::forced_tokens: the tokenizer's encoding of the forced bytes, cut to what the
//     grammar accepts, and empty where there is a choice.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "support/jsonschema_reasons.h"
#include "engine/grammar_state.h"
#include "engine/spec_harness.h"
#include "grammar/json_schema.h"
#include "grammar/tokenizer_vocabulary.h"
#include "model/golden_fixtures.h"

namespace spindle {
namespace {

using nlohmann::json;
using testing::model_dir;
using testing::serve_speculative;
using testing::SpecResult;
using testing::SpecRun;

const char* const kFixedKeys = R"({"type": "object", "properties": {
    "id": {"type": "integer", "minimum": 0, "maximum": 999},
    "name": {"enum": ["alpha", "beta", "gamma"]},
    "active": {"type": "boolean"},
    "score": {"type": "integer", "minimum": -50, "maximum": 50},
    "color": {"enum": ["red", "green", "blue"]},
    "verified": {"type": "boolean"}},
  "required": ["id", "name", "active", "score", "color", "verified"], "additionalProperties": false})";
const char* const kLoose = R"({"type": "object", "properties": {
    "tags": {"type": "array", "items": {"enum": ["x", "yy", "zzz"]}, "maxItems": 3},
    "ok": {"type": ["boolean", "null"]}}, "required": ["ok"], "additionalProperties": false})";

const std::string kModel = "llama-gqa-f32";

// python3-jsonschema's verdict per (schema, text): "" where valid, else why.
std::vector<std::string> validate(const std::vector<std::pair<json, std::string>>& cases) {
  return testing::jsonschema_reasons(cases);
}

std::shared_ptr<const grammar::CompiledGrammar> compile(const char* schema, bool strict) {
  grammar::JsonGrammarOptions options;  // the server's default: compact whitespace
  options.strict = strict;
  return grammar::CompiledGrammar::compile(grammar::grammar_from_json_schema(schema, options));
}

class JumpForwardEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fixed_ = compile(kFixedKeys, true);
    loose_ = compile(kLoose, false);
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(model_dir(kModel));
    for (const char* text : {"Return the record as JSON.", "A record:", "{", "The answer is", "id name active"}) {
      prompts_.push_back(tok.encode(text, true));
    }
  }
  // Each prompt once per params (prompt-major); the schema of each request in schemas_of.
  static SpecResult serve(SpecRun run, const std::vector<engine::SamplingParams>& params) {
    run.max_model_len = 256;
    run.num_pages = 512;
    std::vector<std::vector<TokenId>> prompts;
    std::vector<engine::SamplingParams> all;
    for (const auto& prompt : prompts_) {
      for (const auto& p : params) {
        prompts.push_back(prompt);
        all.push_back(p);
      }
    }
    return serve_speculative(model_dir(kModel), run, prompts, all);
  }
  static engine::SamplingParams params(std::shared_ptr<const grammar::CompiledGrammar> g, float temperature,
                                       uint64_t seed) {
    engine::SamplingParams p;
    p.temperature = temperature;
    p.seed = seed;
    p.max_tokens = 120;
    p.grammar = std::move(g);
    return p;
  }
  // Every output that ends "stop" validates against its schema (schema_of[i % params]); returns
  // how many did.
  static int check_valid(const SpecResult& r, const std::vector<const char*>& schema_of, const std::string& what) {
    std::vector<std::pair<json, std::string>> cases;
    std::vector<std::string> where;
    for (size_t i = 0; i < r.texts.size(); ++i) {
      EXPECT_TRUE(r.finish_reasons[i] == engine::FinishReason::kStop ||
                  r.finish_reasons[i] == engine::FinishReason::kLength)
          << what << " " << i;
      if (r.finish_reasons[i] != engine::FinishReason::kStop) continue;
      cases.emplace_back(json::parse(schema_of[i % schema_of.size()]), r.texts[i]);
      where.push_back(what + " request " + std::to_string(i) + ": " + r.texts[i]);
    }
    const auto verdicts = validate(cases);
    for (size_t i = 0; i < verdicts.size(); ++i) EXPECT_EQ(verdicts[i], "") << where[i];
    EXPECT_TRUE(r.integrity_ok) << what;
    EXPECT_EQ(r.metrics.kv_pages_in_use, 0) << what;
    return static_cast<int>(cases.size());
  }

  static inline std::shared_ptr<const grammar::CompiledGrammar> fixed_, loose_;
  static inline std::vector<std::vector<TokenId>> prompts_;
};

TEST_F(JumpForwardEngineTest, GreedyOutputsEqualDecodingWithoutDrafts) {
  const std::vector<engine::SamplingParams> p = {params(fixed_, 0.0f, 1), params(loose_, 0.0f, 2)};
  SpecRun off;
  off.jump_forward = false;
  const SpecResult reference = serve(off, p);
  EXPECT_EQ(reference.metrics.jump_forward_draft_tokens_total, 0u);
  EXPECT_EQ(reference.metrics.spec_num_draft_tokens, 0u);
  // All complete documents: the schemas are bounded and 120 tokens hold them.
  EXPECT_EQ(check_valid(reference, {kFixedKeys, kLoose}, "without drafts"), static_cast<int>(reference.texts.size()));

  const SpecResult jf = serve({}, p);
  EXPECT_EQ(jf.tokens, reference.tokens);
  EXPECT_EQ(jf.texts, reference.texts);
  EXPECT_EQ(jf.finish_reasons, reference.finish_reasons);
  // Jump-forward drafted, and the model's own draws took most of it (the keys).
  EXPECT_GT(jf.metrics.jump_forward_draft_tokens_total, 0u);
  EXPECT_GT(jf.metrics.jump_forward_accepted_tokens_total, jf.metrics.jump_forward_draft_tokens_total / 2);
  uint64_t num_output = 0;
  for (const auto& t : jf.tokens) num_output += t.size();
  std::printf("jump-forward: %llu of %llu draft tokens accepted, %llu output tokens\n",
              static_cast<unsigned long long>(jf.metrics.jump_forward_accepted_tokens_total),
              static_cast<unsigned long long>(jf.metrics.jump_forward_draft_tokens_total),
              static_cast<unsigned long long>(num_output));

  // A proposer's drafts are cut to what the grammar accepts and each verify row is masked.
  SpecRun ngram;
  ngram.proposer = "ngram";
  const SpecResult with_ngram = serve(ngram, p);
  EXPECT_EQ(with_ngram.tokens, reference.tokens);
  SpecRun ngram_only = ngram;
  ngram_only.jump_forward = false;
  const SpecResult ngram_alone = serve(ngram_only, p);
  EXPECT_EQ(ngram_alone.tokens, reference.tokens);
  EXPECT_GT(ngram_alone.metrics.spec_num_draft_tokens, 0u) << "the n-gram proposer never drafted";
  SpecRun draft;
  draft.proposer = "draft";
  draft.draft_dir = model_dir(kModel);
  draft.jump_forward = false;
  const SpecResult with_draft = serve(draft, p);
  EXPECT_EQ(with_draft.tokens, reference.tokens);
  // The draft model is the target: every draft the grammar allows is accepted, so drafts flowed.
  EXPECT_GT(with_draft.metrics.spec_num_accepted_draft_tokens, 0u);
}

TEST_F(JumpForwardEngineTest, SampledOutputsKeepTheirDrawsAndValidate) {
  std::vector<engine::SamplingParams> p;
  for (uint64_t seed = 0; seed < 4; ++seed) p.push_back(params(seed % 2 ? loose_ : fixed_, 1.0f, 10 + seed));
  p[2].top_k = 20;
  p[3].top_p = 0.9f;
  const std::vector<const char*> schemas = {kFixedKeys, kLoose, kFixedKeys, kLoose};
  SpecRun off;
  off.jump_forward = false;
  const SpecResult reference = serve(off, p);
  const SpecResult jf = serve({}, p);
  EXPECT_EQ(jf.tokens, reference.tokens);
  EXPECT_GT(jf.metrics.jump_forward_accepted_tokens_total, 0u);
  EXPECT_GE(check_valid(jf, schemas, "temperature 1, jump-forward"), 12);
  // The device sampler's contract: each verify row's mask goes in the sampling rows.
  SpecRun device;
  device.sample_on_host = true;
  const SpecResult on_device = serve(device, p);
  EXPECT_GT(on_device.metrics.jump_forward_accepted_tokens_total, 0u);
  EXPECT_GE(check_valid(on_device, schemas, "device contract, jump-forward"), 12);
  // A draft model sampling (q drafts, the rejection rule against the masked p).
  SpecRun draft;
  draft.proposer = "draft";
  draft.draft_dir = model_dir(kModel);
  const SpecResult with_draft = serve(draft, p);
  EXPECT_GE(check_valid(with_draft, schemas, "temperature 1, draft model"), 12);
}

TEST_F(JumpForwardEngineTest, ForcedTokensAreTheTokenizersEncodingOfTheForcedBytes) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(model_dir(kModel));
  const auto info = std::make_shared<const grammar::TokenizerInfo>(grammar::vocabulary_from_tokenizer(tok));
  engine::GrammarState g(grammar::Matcher(fixed_, info), nullptr);
  // At the start: "{" then a choice of whitespace.
  EXPECT_EQ(tok.decode(g.forced_tokens(tok, 16)), "{");
  for (TokenId id : tok.encode("{\"", false)) ASSERT_TRUE(g.accept_token(id));
  // Inside the first key: the rest of it, its quote, then a choice (whitespace or ':').
  const std::vector<TokenId> rest = g.forced_tokens(tok, 16);
  EXPECT_EQ(tok.decode(rest), "id\"");
  EXPECT_EQ(rest, tok.encode("id\"", false));
  EXPECT_EQ(g.forced_tokens(tok, 1).size(), 1u);  // at most max_tokens
  EXPECT_TRUE(g.forced_tokens(tok, 0).empty());
  for (TokenId id : rest) ASSERT_TRUE(g.accept_token(id));
  EXPECT_TRUE(g.forced_tokens(tok, 16).empty());  // whitespace or ':'
  // The state is unchanged by asking: the colon is still next.
  EXPECT_EQ(g.num_allowed_drafts(tok.encode(":", false)), 1);
  EXPECT_EQ(g.num_allowed_drafts(tok.encode("x", false)), 0);
}

// A Metaspace tokenizer with a Prepend("\u2581") normalizer (the golden mistral-f32's): forced bytes
// are encoded as a continuation, without the "\u2581" a piece's start gets, which the grammar would
// refuse (every jump-forward draft was empty on such tokenizers before; found by cuda_engine_test
// on mistral).
TEST_F(JumpForwardEngineTest, ForcedTokensOfAMetaspaceTokenizerHaveNoPrefix) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(model_dir("mistral-f32"));
  const auto info = std::make_shared<const grammar::TokenizerInfo>(grammar::vocabulary_from_tokenizer(tok));
  engine::GrammarState g(grammar::Matcher(fixed_, info), nullptr);
  const std::vector<TokenId> first = g.forced_tokens(tok, 16);
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(tok.decode(first, false), "{");
  for (TokenId id : first) ASSERT_TRUE(g.accept_token(id));
  ASSERT_TRUE(g.accept_token(tok.encode_continuation("\"").front()));
  const std::vector<TokenId> rest = g.forced_tokens(tok, 16);
  EXPECT_EQ(rest, tok.encode_continuation("id\""));
  EXPECT_EQ(tok.decode(rest, false), "id\"");
}

// A grammar forced to "\xEF\xBD\x9Cab" (U+FF5C, as in DeepSeek's tool markers, then "ab") after the
// output's last token was the character's first byte alone: the forced bytes start inside the
// character, which the tokenizer cannot encode; no drafts (found when a served deepseek_v3 call
// grammar failed the request with "prompt is not valid UTF-8").
TEST_F(JumpForwardEngineTest, NoForcedTokensFromInsideACharacter) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(model_dir(kModel));
  const auto info = std::make_shared<const grammar::TokenizerInfo>(grammar::vocabulary_from_tokenizer(tok));
  grammar::Grammar grammar;
  grammar.set_start(grammar.choice({{grammar.literal("\uFF5Cab")}}, "marker"));
  const auto compiled = grammar::CompiledGrammar::compile(grammar);
  TokenId first_byte = -1;
  for (TokenId id = 0; id < info->vocab_size() && first_byte < 0; ++id) {
    const std::string* b = info->grammar_bytes(id);
    if (b != nullptr && *b == "\xEF") first_byte = id;
  }
  ASSERT_GE(first_byte, 0) << "the golden vocabulary has no token of the byte 0xEF alone";
  engine::GrammarState whole(grammar::Matcher(compiled, info), nullptr);
  EXPECT_EQ(tok.decode(whole.forced_tokens(tok, 16)), "\uFF5Cab");  // from a character boundary
  engine::GrammarState g(grammar::Matcher(compiled, info), nullptr);
  ASSERT_TRUE(g.accept_token(first_byte));
  EXPECT_TRUE(g.forced_tokens(tok, 16).empty());
}

}  // namespace
}  // namespace spindle
