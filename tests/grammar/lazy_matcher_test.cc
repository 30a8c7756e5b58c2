// LazyMatcher: unconstrained until a trigger string or token, constrained from there; rollback
// across the arming point; a token carrying a trigger plus refused bytes is refused. A free section
// (<think>...</think>) hides triggers; arming at the content; required arming refuses EOS. The
// unarmed mask equals a brute-force oracle (each token accepted, then rolled back) on random walks.
#include <gtest/gtest.h>

#include <random>

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

// A trigger string that is an allowed special token of the grammar arms on that token (its text
// joins the output's text) as on its spelling; the grammar then reads on after it.
TEST(LazyMatcher, AnAllowedSpecialTokenArmsItsTriggerString) {
  Vocabulary v;
  v.token_bytes = {"[T]", "hi", "{\"a\":1}", "[", "T]", ""};  // 0: special, 5: EOS
  v.special = {1, 0, 0, 0, 0, 0};
  v.eos_ids = {5};
  const auto tok = std::make_shared<const TokenizerInfo>(v);
  Grammar g = grammar_from_regex(R"(\[T\]\{"a":\d\})");
  g.allow_special_token("[T]");
  const auto compiled = CompiledGrammar::compile(g);
  LazyMatcher m(Matcher(compiled, tok), {"[T]"}, {});
  EXPECT_TRUE(allowed(m, 0));
  ASSERT_TRUE(m.accept_token(1));
  ASSERT_TRUE(m.accept_token(0));
  EXPECT_TRUE(m.armed());
  EXPECT_FALSE(allowed(m, 1));
  EXPECT_TRUE(allowed(m, 2));
  ASSERT_TRUE(m.accept_token(2));
  EXPECT_TRUE(m.is_complete());
  LazyMatcher spelled(Matcher(compiled, tok), {"[T]"}, {});
  ASSERT_TRUE(spelled.accept_token(3));
  ASSERT_TRUE(spelled.accept_token(4));
  EXPECT_TRUE(spelled.armed());
  // Not allowed by the grammar: the special token is no text and never arms it.
  LazyMatcher other(Matcher(CompiledGrammar::compile(grammar_from_regex(R"(\[T\]\{"a":\d\})")), tok), {"[T]"}, {});
  ASSERT_TRUE(other.accept_token(0));
  EXPECT_FALSE(other.armed());
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


// Tokens for the section and the tool marker, split and joined every way that matters.
std::shared_ptr<const TokenizerInfo> section_vocab() {
  Vocabulary v;
  v.token_bytes = {"hi",        " ",           "\n",        "<think>",   "</think>", "</th",   "ink>", "<",
                   "tool_call>", "<tool_call>", "{",         "\"a\":1}", "}",        "\n\n{", "x",    "</think>\n{",
                   "</think>x",  "<tool_call>{", "<tool_call>x", "",          "",         "<th",    "ll>",  "<tool_ca"};
  v.special.assign(v.token_bytes.size(), 0);
  v.special[19] = 1;  // a special trigger token
  v.eos_ids = {20};
  return std::make_shared<const TokenizerInfo>(v);
}

// JSON {"a":1} after optional whitespace; the tool variant starts with its marker.
std::shared_ptr<const CompiledGrammar> content_grammar() {
  return CompiledGrammar::compile(grammar_from_regex(R"(\s{0,3}\{"a":1\})"));
}
std::shared_ptr<const CompiledGrammar> call_grammar() {
  return CompiledGrammar::compile(grammar_from_regex(R"(<tool_call>\{"a":1\})"));
}

std::vector<bool> mask_bits(LazyMatcher& m, size_t n) {
  std::vector<uint32_t> mask(2);
  m.fill_mask(mask);
  std::vector<bool> bits(n);
  for (size_t i = 0; i < n; ++i) bits[i] = (mask[i / 32] >> (i % 32)) & 1u;
  return bits;
}

// The oracle: a token is allowed when accept_token takes it (then it is rolled back).
std::vector<bool> oracle_bits(LazyMatcher& m, size_t n) {
  std::vector<bool> bits(n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = m.accept_token(static_cast<TokenId>(i));
    if (bits[i]) m.rollback(1);
  }
  return bits;
}

TEST(LazyMatcher, UnarmedMaskEqualsTheOracleOnRandomWalks) {
  const auto tok = section_vocab();
  const size_t n = tok->vocab().token_bytes.size();
  std::vector<std::pair<std::string, LazyArming>> armings;
  {
    LazyArming a;  // tool calls: triggers only
    a.trigger_strings = {"<tool_call>"};
    a.trigger_tokens = {19};
    armings.emplace_back("tool trigger", a);
    a.section_open = "<think>";  // ... outside a section the output may open
    a.section_close = "</think>";
    armings.emplace_back("tool trigger after a section", a);
    a.section_opened = true;  // ... outside a section the prompt opened
    armings.emplace_back("tool trigger after an opened section", a);
  }
  for (bool opened : {false, true}) {
    LazyArming a;  // response_format after reasoning
    a.at_content = true;
    a.required = true;
    a.section_open = "<think>";
    a.section_close = "</think>";
    a.section_opened = opened;
    armings.emplace_back(opened ? "content after an opened section" : "content after a section", a);
  }
  std::mt19937 rng(7);
  int num_armed = 0, num_refused = 0;
  for (const auto& [name, arming] : armings) {
    const bool tools = !arming.trigger_strings.empty();
    for (int walk = 0; walk < 60; ++walk) {
      LazyMatcher m(Matcher(tools ? call_grammar() : content_grammar(), tok), arming);
      for (int step = 0; step < 8 && !m.is_terminated(); ++step) {
        const std::vector<bool> bits = mask_bits(m, n);
        const std::vector<bool> truth = oracle_bits(m, n);
        ASSERT_EQ(bits, truth) << name << " walk " << walk << " step " << step;
        std::vector<TokenId> allowed;
        for (size_t i = 0; i < n; ++i) {
          if (truth[i]) allowed.push_back(static_cast<TokenId>(i));
          num_refused += !truth[i];
        }
        if (allowed.empty()) break;
        ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]));
      }
      num_armed += m.armed();
    }
  }
  EXPECT_GE(num_armed, 50);     // the walks reach the armed state often
  EXPECT_GE(num_refused, 200);  // and the unarmed masks refuse tokens
}

TEST(LazyMatcher, TriggersInsideTheSectionDoNotCount) {
  const auto tok = section_vocab();
  LazyArming a;
  a.trigger_strings = {"<tool_call>"};
  a.section_open = "<think>";
  a.section_close = "</think>";
  LazyMatcher m(Matcher(call_grammar(), tok), a);
  for (TokenId id : {1, 3, 9, 14}) ASSERT_TRUE(m.accept_token(id));  // " <think><tool_call>x": reasoning
  EXPECT_FALSE(m.armed());
  ASSERT_TRUE(m.accept_token(4));  // </think>
  ASSERT_TRUE(m.accept_token(0));
  EXPECT_FALSE(m.armed());
  EXPECT_FALSE(m.accept_token(18));  // "<tool_call>x": the grammar refuses the x
  ASSERT_TRUE(m.accept_token(17));   // "<tool_call>{" arms
  EXPECT_TRUE(m.armed());
  ASSERT_TRUE(m.accept_token(11));
  EXPECT_TRUE(m.can_only_end());
  m.rollback(5);
  EXPECT_FALSE(m.armed());
  ASSERT_TRUE(m.accept_token(4));  // " <think><tool_call></think>": the marker was reasoning
  EXPECT_FALSE(m.armed());
}

TEST(LazyMatcher, ContentAfterTheSectionIsConstrainedAndRequired) {
  const auto tok = section_vocab();
  LazyArming a;
  a.at_content = true;
  a.required = true;
  a.section_open = "<think>";
  a.section_close = "</think>";
  a.section_opened = true;
  LazyMatcher m(Matcher(content_grammar(), tok), a);
  EXPECT_FALSE(m.is_complete());
  EXPECT_FALSE(m.accept_token(20));  // EOS: the content has not come yet
  ASSERT_TRUE(m.accept_token(0));    // reasoning: "hi{"
  ASSERT_TRUE(m.accept_token(10));
  EXPECT_FALSE(m.accept_token(16));  // "</think>x": content the grammar refuses
  ASSERT_TRUE(m.accept_token(15));   // "</think>\n{"
  EXPECT_TRUE(m.armed());
  ASSERT_TRUE(m.accept_token(11));
  EXPECT_TRUE(m.can_only_end());

  a.section_opened = false;  // the output opens its section, or starts the content at once
  LazyMatcher open(Matcher(content_grammar(), tok), a);
  ASSERT_TRUE(open.accept_token(1));  // " "
  ASSERT_TRUE(open.accept_token(21));  // "<th"
  EXPECT_FALSE(open.accept_token(14));  // "<thx...": neither the section nor JSON
  ASSERT_TRUE(open.accept_token(6));   // "ink>": the section opened
  ASSERT_TRUE(open.accept_token(10));  // "{" inside it is reasoning
  EXPECT_FALSE(open.armed());
  LazyMatcher direct(Matcher(content_grammar(), tok), a);
  ASSERT_TRUE(direct.accept_token(1));
  EXPECT_FALSE(direct.accept_token(0));  // "hi": content the grammar refuses
  ASSERT_TRUE(direct.accept_token(10));  // "{": the content starts
  EXPECT_TRUE(direct.armed());
}

}  // namespace
}  // namespace spindle::grammar
