#include "jinja/expression_parser.h"

#include <algorithm>

namespace spindle::jinja {

ExprPtr ExpressionParser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr ExpressionParser::parse_condexpr() {
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

ExprPtr ExpressionParser::binary(ExprKind kind, const std::string& op, ExprPtr lhs, ExprPtr rhs, int line) {
  auto e = make(kind, line);
  e->name = op;
  e->args.push_back(std::move(lhs));
  e->args.push_back(std::move(rhs));
  return e;
}

template <typename Operand>
ExprPtr ExpressionParser::binary_level(ExprKind kind, std::initializer_list<const char*> ops, Operand operand) {
  ExprPtr left = operand();
  while (true) {
    // Keywords ("or", "and") are name tokens, the others operator tokens: no token is both.
    const auto op = std::find_if(ops.begin(), ops.end(), [this](const char* o) { return is_name(o) || is_op(o); });
    if (op == ops.end()) return left;
    const int line = cur().line;
    next();
    left = binary(kind, *op, std::move(left), operand(), line);
  }
}

ExprPtr ExpressionParser::parse_or() {
  return binary_level(ExprKind::kOr, {"or"}, [this] { return parse_and(); });
}

ExprPtr ExpressionParser::parse_and() {
  return binary_level(ExprKind::kAnd, {"and"}, [this] { return parse_not(); });
}

ExprPtr ExpressionParser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this);
    auto e = make(ExprKind::kNot, cur().line);
    next();
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr ExpressionParser::parse_compare() {
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

ExprPtr ExpressionParser::parse_math1() {
  return binary_level(ExprKind::kBinary, {"+", "-"}, [this] { return parse_concat(); });
}

ExprPtr ExpressionParser::parse_concat() {
  return binary_level(ExprKind::kBinary, {"~"}, [this] { return parse_math2(); });
}

ExprPtr ExpressionParser::parse_math2() {
  return binary_level(ExprKind::kBinary, {"*", "/", "//", "%"}, [this] { return parse_pow(); });
}

ExprPtr ExpressionParser::parse_pow() {
  return binary_level(ExprKind::kBinary, {"**"}, [this] { return parse_unary(true); });
}

ExprPtr ExpressionParser::parse_unary(bool with_filter) {
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

ExprPtr ExpressionParser::literal(Value v, int line) {
  auto e = make(ExprKind::kLiteral, line);
  e->literal = std::move(v);
  return e;
}

ExprPtr ExpressionParser::parse_primary() {
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

ExprPtr ExpressionParser::parse_list(int line) {
  next();
  auto e = make(ExprKind::kList, line);
  comma_separated("]", [&] { e->args.push_back(parse_expression(true)); });
  return e;
}

ExprPtr ExpressionParser::parse_dict(int line) {
  next();
  auto e = make(ExprKind::kDict, line);
  comma_separated("}", [&] {
    ExprPtr key = parse_expression(true);
    expect_op(":");
    e->pairs.emplace_back(std::move(key), parse_expression(true));
  });
  return e;
}

bool ExpressionParser::is_tuple_end() const {
  return cur().type == TokenType::kVarEnd || cur().type == TokenType::kBlockEnd || is_op(")") ||
         cur().type == TokenType::kEof;
}

ExprPtr ExpressionParser::parse_tuple(bool with_condexpr, bool explicit_parentheses) {
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

ExprPtr ExpressionParser::parse_postfix(ExprPtr node) {
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

ExprPtr ExpressionParser::parse_subscript(ExprPtr node, int line) {
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
void ExpressionParser::parse_call_args(Expr& e) {
  expect_op("(");
  bool seen_kwarg = false;
  comma_separated(")", [&] {
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
  });
}

ExprPtr ExpressionParser::parse_call(ExprPtr node) {
  auto e = make(ExprKind::kCall, cur().line);
  e->args.push_back(std::move(node));
  parse_call_args(*e);
  return e;
}

std::string ExpressionParser::parse_dotted_name() {
  std::string n = expect_name();
  while (is_op(".") && peek().type == TokenType::kName) {
    next();
    n.append(1, '.').append(expect_name());
  }
  return n;
}

ExprPtr ExpressionParser::parse_filter(ExprPtr node, bool pipe_consumed) {
  if (!pipe_consumed) expect_op("|");
  auto e = make(ExprKind::kFilter, cur().line);
  e->name = parse_dotted_name();
  e->args.push_back(std::move(node));
  if (is_op("(")) parse_call_args(*e);
  return e;
}

ExprPtr ExpressionParser::parse_test(ExprPtr node) {
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

ExprPtr ExpressionParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) node = parse_filter(std::move(node), false);
    else if (is_name("is")) node = parse_test(std::move(node));
    else if (is_op("(")) node = parse_call(std::move(node));
    else return node;
  }
}

}  // namespace spindle::jinja
