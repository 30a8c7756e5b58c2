// The expression half of the template parser (jinja2's grammar, lowest precedence first):
//   a if b else c; or; and; not; comparisons (==, !=, <, <=, >, >=, in, not in; chained);
//   + -; ~; * / // %; **; unary - +; primary with .attr, [index], [a:b:c], (call), |filter, is test.
// It holds the token cursor; the statement half (parser.cc) derives from it.
#pragma once

#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/template_error.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

namespace spindle::jinja {

class ExpressionParser {
 public:
  ExpressionParser(const std::vector<Token>& tokens, const std::string& name) : t_(tokens), name_(name) {}

 protected:
  // Counts nesting; past kMaxParseDepth the template is refused.
  struct DepthGuard {
    explicit DepthGuard(ExpressionParser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) p_.fail(fmt::format("nested more than {} levels deep", kMaxParseDepth));
    }
    ~DepthGuard() { --p_.depth_; }
    ExpressionParser& p_;
  };

  [[noreturn]] void fail(const std::string& what) const {
    JINJA_FAIL_KIND(ErrorKind::kSyntax, "template {} line {}: {}", name_, cur().line, what);
  }

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == TokenType::kName && cur().value == n; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(fmt::format("expected '{}'{}", op, found()));
  }
  // Items up to the operator `close` (consumed), separated by commas, a trailing comma allowed;
  // item() parses one.
  template <typename Item>
  void comma_separated(const char* close, Item&& item) {
    for (bool first = true; !is_op(close); first = false) {
      if (!first) expect_op(",");
      if (is_op(close)) break;
      item();
    }
    expect_op(close);
  }
  std::string found() const {
    switch (cur().type) {
      case TokenType::kEof: return ", found the end of the template";
      case TokenType::kBlockEnd: return ", found '%}'";
      case TokenType::kVarEnd: return ", found '}}'";
      case TokenType::kText: return ", found template text";
      default: return fmt::format(", found '{}'", cur().value);
    }
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail("expected a name" + found());
    std::string n = cur().value;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) fail("expected '%}'" + found());
    next();
  }

  ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  StmtPtr make_stmt(StmtKind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr binary(ExprKind kind, const std::string& op, ExprPtr lhs, ExprPtr rhs, int line);
  // One precedence level of left-associative binary operators: operand (op operand)*, where op is
  // one of `ops` and each makes a `kind` node (defined in expression_parser.cc, its only user).
  template <typename Operand>
  ExprPtr binary_level(ExprKind kind, std::initializer_list<const char*> ops, Operand operand);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr literal(Value v, int line);
  ExprPtr parse_primary();
  ExprPtr parse_list(int line);
  ExprPtr parse_dict(int line);
  bool is_tuple_end() const;
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parentheses);
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node, int line);
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr node);
  std::string parse_dotted_name();
  ExprPtr parse_filter(ExprPtr node, bool pipe_consumed);
  ExprPtr parse_test(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);

  const std::vector<Token>& t_;
  const std::string& name_;
  size_t i_ = 0;
  int depth_ = 0;
  std::vector<MacroDef*> macros_;  // open macro definitions: their use of varargs/kwargs/caller
};

}  // namespace spindle::jinja
