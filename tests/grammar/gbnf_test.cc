// GBNF front end: grammars in llama.cpp's syntax (written here from its grammars/README.md)
// accept and refuse strings as the grammar says; syntax errors name line and column.
#include <gtest/gtest.h>

#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "support/byte_grammar.h"
#include "util/error.h"

namespace spindle::grammar {
namespace {

using testing::byte_vocab;

class Gbnf {
 public:
  explicit Gbnf(const std::string& text) : g_(CompiledGrammar::compile(grammar_from_gbnf(text))) {}
  bool ok(const std::string& s) const {
    Matcher m(g_, byte_vocab());
    return m.accept_bytes(s) && m.is_complete();
  }

 private:
  std::shared_ptr<const CompiledGrammar> g_;
};

TEST(Gbnf, ChessLikeMoves) {
  const Gbnf g(R"G(# numbered move pairs
root ::= (
    "1. " move " " move "\n"
    ([1-9] [0-9]? ". " move " " move "\n")+
)
move ::= (pawn | nonpawn | castle) [+#]?
pawn ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBKQR])?
nonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]
castle ::= "O-O" "-O"?
)G");
  EXPECT_TRUE(g.ok("1. e4 e5\n2. Nf3 Nc6\n"));
  EXPECT_TRUE(g.ok("1. e4 e5\n10. O-O-O exd8=Q#\n"));
  EXPECT_FALSE(g.ok("1. e4 e5\n"));  // at least one more line
  EXPECT_FALSE(g.ok("1. e9 e5\n2. a3 a6\n"));
}

TEST(Gbnf, AmbiguityAndRepetition) {
  // "a" | "ab" followed by "b": both "ab" and "abb" are sentences.
  const Gbnf g(R"G(root ::= ("a" | "ab") "b" x{2,3}
x ::= [0-9] | "\x41" | [^\n0-9A]
)G");
  EXPECT_TRUE(g.ok("ab12"));
  EXPECT_TRUE(g.ok("abbA9z"));
  EXPECT_FALSE(g.ok("ab1"));
  EXPECT_FALSE(g.ok("ab1234"));
  EXPECT_FALSE(g.ok("ab1\n"));
}

TEST(Gbnf, RecursionAndEmpty) {
  const Gbnf g(R"G(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" ws expr ws ")"
ws ::= [ ]*
)G");
  EXPECT_TRUE(g.ok("1+2*(3-4)"));
  EXPECT_TRUE(g.ok("((  7 ))"));
  EXPECT_FALSE(g.ok("1+"));
  EXPECT_FALSE(g.ok("(1"));
  const Gbnf e(R"G(root ::= "" | "x" root)G");
  EXPECT_TRUE(e.ok(""));
  EXPECT_TRUE(e.ok("xxx"));
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    grammar_from_gbnf(text);
    ADD_FAILURE() << "no error for " << text;
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
}

TEST(Gbnf, Errors) {
  expect_error("item ::= \"a\"", "no 'root'");
  expect_error("root ::= item", "'item' is used but not defined");
  expect_error("root ::= \"a", "unterminated string");
  expect_error("root ::= [a", "unterminated character class");
  expect_error("root ::= <think> \"a\"", "token references");
  expect_error("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
  expect_error("root ::= (\"a\"", "expected ')'");
  expect_error("root ::= \"a\"{3,1}", "n < m");
  expect_error("root ::= \"a\"\n  \"b\" ::= x", "line 2");
}

// The limits shared with the regex front end (regex_ast.h): kMaxGroupDepth nested groups parse,
// one more is refused; a repetition count above kMaxRepeatCount is refused.
TEST(Gbnf, SharedLimits) {
  const auto nested = [](int depth) {
    return "root ::= " + std::string(static_cast<size_t>(depth), '(') + "\"a\"" + std::string(static_cast<size_t>(depth), ')');
  };
  EXPECT_TRUE(Gbnf(nested(kMaxGroupDepth)).ok("a"));
  expect_error(nested(kMaxGroupDepth + 1), "nested too deeply");
  expect_error("root ::= \"a\"{" + std::to_string(kMaxRepeatCount + 1) + "}", "repetition count above 10000");
}

}  // namespace
}  // namespace spindle::grammar
