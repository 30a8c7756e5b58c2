#include "jinja/parser.h"

#include "jinja/template_error.h"

#include <algorithm>
#include <initializer_list>

namespace spindle::jinja {
namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name) : t_(tokens), name_(name) {}

  Body parse_template() {
    Body body = parse_body({});
    if (cur().type != TokenType::kEof) fail("unexpected tag");
    return body;
  }

 private:
  // Counts nesting; past kMaxParseDepth the template is refused.
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) p_.fail(fmt::format("nested more than {} levels deep", kMaxParseDepth));
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
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

  // ---- statements ----

  // Statements until a block tag named in `ends` (left unconsumed) or the end of the template.
  Body parse_body(std::initializer_list<const char*> ends) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEof) {
        if (ends.size() == 0) return body;
        std::string expected;
        for (const char* e : ends) expected += fmt::format("{}'{}'", expected.empty() ? "" : " or ", e);
        fail("unexpected end of template, expected " + expected);
      }
      if (t.type == TokenType::kText) {
        auto s = make_stmt(StmtKind::kText, t.line);
        s->text = t.value;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TokenType::kVarBegin) {
        next();
        auto s = make_stmt(StmtKind::kOutput, t.line);
        s->expr = parse_tuple(true, false);
        if (cur().type != TokenType::kVarEnd) fail("expected '}}'" + found());
        next();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        const Token& n = peek();
        if (n.type == TokenType::kName &&
            std::any_of(ends.begin(), ends.end(), [&](const char* e) { return n.value == e; }))
          return body;
        next();
        body.push_back(parse_statement());
      } else {
        fail("unexpected token" + found());
      }
    }
  }

  // At a block tag named `name` (BlockBegin current): consumes "{% name".
  void consume_tag(const char* name) {
    next();
    if (!is_name(name)) fail(fmt::format("expected '{}'", name));
    next();
  }
  std::string tag_name() const { return peek().value; }

  StmtPtr parse_statement() {
    const int line = cur().line;
    const std::string kw = expect_name();
    if (kw == "if") return parse_if(line);
    if (kw == "for") return parse_for(line);
    if (kw == "set") return parse_set(line);
    if (kw == "macro") return parse_macro(line);
    if (kw == "call") return parse_call_block(line);
    if (kw == "filter") return parse_filter_block(line);
    if (kw == "with") return parse_with(line);
    if (kw == "generation") {  // transformers' AssistantTracker: a scoped body
      auto s = make_stmt(StmtKind::kWith, line);
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      consume_tag("endgeneration");
      expect_block_end();
      return s;
    }
    if (kw == "break" || kw == "continue") {
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside of a loop", kw));
      expect_block_end();
      return make_stmt(kw == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
    }
    fail(fmt::format("unknown or unsupported tag '{}'", kw));
  }

  StmtPtr parse_if(int line) {
    auto s = make_stmt(StmtKind::kIf, line);
    ExprPtr cond = parse_tuple(false, false);
    expect_block_end();
    while (true) {
      Body body = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      const std::string end = tag_name();
      if (end == "elif") {
        consume_tag("elif");
        cond = parse_tuple(false, false);
        expect_block_end();
        continue;
      }
      if (end == "else") {
        consume_tag("else");
        expect_block_end();
        s->else_body = parse_body({"endif"});
      }
      consume_tag("endif");
      expect_block_end();
      return s;
    }
  }

  std::vector<std::string> parse_target_names() {
    std::vector<std::string> names;
    const bool paren = accept_op("(");
    do {
      if (paren && is_op(")")) break;
      names.push_back(expect_name());
    } while (accept_op(","));
    if (paren) expect_op(")");
    return names;
  }

  StmtPtr parse_for(int line) {
    auto s = make_stmt(StmtKind::kFor, line);
    s->targets = parse_target_names();
    if (!is_name("in")) fail("expected 'in'" + found());
    next();
    s->expr = parse_tuple(false, false);
    if (is_name("if")) {
      next();
      s->condition = parse_expression(true);
    }
    if (is_name("recursive")) fail("recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"});
    --loop_depth_;
    if (tag_name() == "else") {
      consume_tag("else");
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    consume_tag("endfor");
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(int line) {
    if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().value == ".") {
      auto s = make_stmt(StmtKind::kSet, line);
      s->targets.push_back(expect_name());
      next();
      s->attr = expect_name();
      expect_op("=");
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    std::vector<std::string> names = parse_target_names();
    if (accept_op("=")) {
      auto s = make_stmt(StmtKind::kSet, line);
      s->targets = std::move(names);
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    if (names.size() != 1) fail("a set block assigns one name");
    auto s = make_stmt(StmtKind::kSetBlock, line);
    s->targets = std::move(names);
    if (is_op("|")) s->filter = parse_filter_chain();
    expect_block_end();
    s->body = parse_body({"endset"});
    consume_tag("endset");
    expect_block_end();
    return s;
  }

  // "| f(args) | g" over a placeholder for the block's rendered body.
  ExprPtr parse_filter_chain() {
    ExprPtr node = make(ExprKind::kPlaceholder, cur().line);
    if (!is_op("|")) node = parse_filter(std::move(node), /*pipe_consumed=*/true);
    while (is_op("|")) node = parse_filter(std::move(node), false);
    return node;
  }

  void parse_signature(MacroDef& m) {
    expect_op("(");
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      if (is_op(")")) break;
      m.params.push_back(expect_name());
      m.defaults.push_back(accept_op("=") ? parse_expression(true) : nullptr);
    }
    expect_op(")");
  }

  StmtPtr parse_macro(int line) {
    auto s = make_stmt(StmtKind::kMacro, line);
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = expect_name();
    parse_signature(*s->macro);
    expect_block_end();
    macros_.push_back(s->macro.get());
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->macro->body = parse_body({"endmacro"});
    loop_depth_ = saved_loops;
    macros_.pop_back();
    consume_tag("endmacro");
    if (cur().type == TokenType::kName) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(int line) {
    auto s = make_stmt(StmtKind::kCallBlock, line);
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = "caller";
    if (is_op("(")) parse_signature(*s->macro);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail("expected a call after 'call'");
    expect_block_end();
    macros_.push_back(s->macro.get());
    s->macro->body = parse_body({"endcall"});
    macros_.pop_back();
    consume_tag("endcall");
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(int line) {
    auto s = make_stmt(StmtKind::kFilterBlock, line);
    s->filter = parse_filter_chain();
    expect_block_end();
    s->body = parse_body({"endfilter"});
    consume_tag("endfilter");
    expect_block_end();
    return s;
  }

  StmtPtr parse_with(int line) {
    auto s = make_stmt(StmtKind::kWith, line);
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect_name());
      expect_op("=");
      s->values.push_back(parse_expression(true));
    }
    expect_block_end();
    s->body = parse_body({"endwith"});
    consume_tag("endwith");
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    DepthGuard guard(*this);
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const int line = cur().line;
      next();
      auto cond = make(ExprKind::kCondition, line);
      cond->args.push_back(parse_or());
      cond->args.push_back(std::move(expr));
      if (is_name("else")) {
        next();
        cond->args.push_back(parse_condexpr());
      } else {
        cond->args.push_back(nullptr);
      }
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, const std::string& op, ExprPtr lhs, ExprPtr rhs, int line) {
    auto e = make(kind, line);
    e->name = op;
    e->args.push_back(std::move(lhs));
    e->args.push_back(std::move(rhs));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      next();
      left = binary(ExprKind::kOr, "or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      next();
      left = binary(ExprKind::kAnd, "and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = make(ExprKind::kNot, cur().line);
      next();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOperator &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == "<=" ||
           cur().value == ">" || cur().value == ">=")) {
        op = cur().value;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().value == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::kCompare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().value;
      const int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, "~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().value;
      const int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, "**", std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(ExprKind::kUnary, cur().line);
      node->name = cur().value;
      next();
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr literal(Value v, int line) {
    auto e = make(ExprKind::kLiteral, line);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    switch (t.type) {
      case TokenType::kName: {
        const std::string n = t.value;
        next();
        if (n == "true" || n == "True") return literal(Value(true), line);
        if (n == "false" || n == "False") return literal(Value(false), line);
        if (n == "none" || n == "None") return literal(Value::none(), line);
        if (!macros_.empty()) {
          if (n == "varargs") macros_.back()->uses_varargs = true;
          if (n == "kwargs") macros_.back()->uses_kwargs = true;
          if (n == "caller") macros_.back()->uses_caller = true;
        }
        auto e = make(ExprKind::kName, line);
        e->name = n;
        return e;
      }
      case TokenType::kString: {
        std::string s;
        while (cur().type == TokenType::kString) {
          s += cur().value;
          next();
        }
        return literal(Value(std::move(s)), line);
      }
      case TokenType::kInt: next(); return literal(Value(t.int_value), line);
      case TokenType::kFloat: next(); return literal(Value(t.float_value), line);
      case TokenType::kOperator:
        if (t.value == "(") {
          next();
          ExprPtr e = parse_tuple(true, true);
          expect_op(")");
          return e;
        }
        if (t.value == "[") return parse_list(line);
        if (t.value == "{") return parse_dict(line);
        break;
      default: break;
    }
    fail("expected an expression" + found());
  }

  ExprPtr parse_list(int line) {
    next();
    auto e = make(ExprKind::kList, line);
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict(int line) {
    next();
    auto e = make(ExprKind::kDict, line);
    while (!is_op("}")) {
      if (!e->pairs.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      e->pairs.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return e;
  }

  bool is_tuple_end() const {
    return cur().type == TokenType::kVarEnd || cur().type == TokenType::kBlockEnd || is_op(")") ||
           cur().type == TokenType::kEof;
  }

  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parentheses) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end()) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) fail("expected an expression" + found());
    }
    auto e = make(ExprKind::kTuple, line);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      const int line = cur().line;
      if (is_op(".")) {
        next();
        if (cur().type == TokenType::kName) {
          auto e = make(ExprKind::kGetAttr, line);
          e->name = cur().value;
          next();
          e->args.push_back(std::move(node));
          node = std::move(e);
        } else if (cur().type == TokenType::kInt) {
          auto e = make(ExprKind::kGetItem, line);
          e->args.push_back(std::move(node));
          e->args.push_back(literal(Value(cur().int_value), line));
          next();
          node = std::move(e);
        } else {
          fail("expected a name after '.'" + found());
        }
      } else if (is_op("[")) {
        next();
        node = parse_subscript(std::move(node), line);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node, int line) {
    ExprPtr parts[3];
    bool is_slice = false;
    if (!is_op(":")) parts[0] = parse_expression(true);
    if (accept_op(":")) {
      is_slice = true;
      if (!is_op("]") && !is_op(":")) parts[1] = parse_expression(true);
      if (accept_op(":") && !is_op("]")) parts[2] = parse_expression(true);
    }
    expect_op("]");
    auto e = make(is_slice ? ExprKind::kSlice : ExprKind::kGetItem, line);
    e->args.push_back(std::move(node));
    for (int k = 0; k < (is_slice ? 3 : 1); ++k) e->args.push_back(std::move(parts[k]));
    return e;
  }

  // "(" args ")" into e->args (after any already there) and e->kwargs.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool seen_kwarg = false;
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().value == "=") {
        std::string key = cur().value;
        next();
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
        seen_kwarg = true;
      } else {
        if (seen_kwarg) fail("a positional argument follows a keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::kCall, cur().line);
    e->args.push_back(std::move(node));
    parse_call_args(*e);
    return e;
  }

  std::string parse_dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().type == TokenType::kName) {
      next();
      n += "." + expect_name();
    }
    return n;
  }

  ExprPtr parse_filter(ExprPtr node, bool pipe_consumed) {
    if (!pipe_consumed) expect_op("|");
    auto e = make(ExprKind::kFilter, cur().line);
    e->name = parse_dotted_name();
    e->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr node) {
    auto e = make(ExprKind::kTest, cur().line);
    next();  // "is"
    if (is_name("not")) {
      e->negated = true;
      next();
    }
    e->name = parse_dotted_name();
    e->args.push_back(std::move(node));
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInt ||
                t.type == TokenType::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) node = parse_filter(std::move(node), false);
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  const std::vector<Token>& t_;
  const std::string& name_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<MacroDef*> macros_;
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& template_name) {
  return Parser(tokens, template_name).parse_template();
}

}  // namespace spindle::jinja
