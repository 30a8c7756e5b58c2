// LazyMatcher: unconstrained until a trigger string or token, constrained from there; rollback
// across the arming point; a token carrying a trigger plus refused bytes is refused.
#include <gtest/gtest.h>

#include "grammar/json_schema.h"
#include "grammar/lazy_matcher.h"
#include "grammar/simple_grammars.h"

namespace spindle::grammar {
namespace {

std::shared_ptr<const TokenizerInfo> vocab() {
  Vocabulary v;
  // 0..4: text pieces, 5: "<tool>" split over two tokens 6 + 7, 8: a special trigger token, 9: EOS
  v.token_bytes = {"hello", " world", "{\"a\":1}", "{", "x", "<tool>{", "<to", "ol>", "", ""};
  v.special = {0, 0, 0, 0, 0, 0, 0, 0, 1, 0};
  v.eos_ids = {9};
  return std::make_shared<const TokenizerInfo>(v);
}

std::shared_ptr<const CompiledGrammar> tool_grammar() {
  return CompiledGrammar::compile(grammar_from_regex(R"(<tool>\{"a":\d\})"));
}

bool allowed(LazyMatcher& m, TokenId id) {
  std::vector<uint32_t> mask(1);
  m.fill_mask(mask);
  return (mask[0] >> id) & 1u;
}

TEST(LazyMatcher, StringTriggerArmsAndConstrains) {
  const auto tok = vocab();
  LazyMatcher m(Matcher(tool_grammar(), tok), {"<tool>"}, {});
  EXPECT_TRUE(allowed(m, 4));
  EXPECT_TRUE(allowed(m, 9));  // unarmed: EOS allowed too
  ASSERT_TRUE(m.accept_token(0));
  ASSERT_TRUE(m.accept_token(4));
  ASSERT_TRUE(m.accept_token(6));  // "<to": not yet a trigger
  EXPECT_FALSE(m.armed());
  ASSERT_TRUE(m.accept_token(7));  // "ol>" completes it across tokens
  EXPECT_TRUE(m.armed());
  EXPECT_FALSE(allowed(m, 4));
  EXPECT_TRUE(allowed(m, 3));
  EXPECT_FALSE(allowed(m, 9));
  EXPECT_FALSE(m.is_complete());
  m.rollback(1);
  EXPECT_FALSE(m.armed());
  EXPECT_TRUE(allowed(m, 4));
  ASSERT_TRUE(m.accept_token(7));
  ASSERT_TRUE(m.accept_token(3));
  EXPECT_FALSE(m.accept_token(4));  // 'x' is not '"'
}

TEST(LazyMatcher, TriggerInsideATokenChecksTheRest) {
  const auto tok = vocab();
  LazyMatcher m(Matcher(tool_grammar(), tok), {"<tool>"}, {});
  ASSERT_TRUE(m.accept_token(5));  // "<tool>{" arms with "{" already inside the grammar
  EXPECT_TRUE(m.armed());
  LazyMatcher bad(Matcher(CompiledGrammar::compile(grammar_from_regex("<tool>x")), tok), {"<tool>"}, {});
  EXPECT_FALSE(bad.accept_token(5));  // "{" after the trigger is refused
  EXPECT_FALSE(bad.armed());
}

TEST(LazyMatcher, TokenTriggerStartsTheGrammarAfterIt) {
  const auto tok = vocab();
  LazyMatcher m(Matcher(CompiledGrammar::compile(grammar_from_json_schema(R"({"type":"object"})")), tok), {}, {8});
  ASSERT_TRUE(m.accept_token(0));
  ASSERT_TRUE(m.accept_token(8));
  EXPECT_TRUE(m.armed());
  EXPECT_TRUE(allowed(m, 2));
  EXPECT_FALSE(allowed(m, 0));
  ASSERT_TRUE(m.accept_token(2));
  EXPECT_TRUE(m.is_complete());
  EXPECT_TRUE(allowed(m, 9));
  m.rollback(3);
  EXPECT_EQ(m.num_tokens(), 0);
  EXPECT_FALSE(m.armed());
}

}  // namespace
}  // namespace spindle::grammar
