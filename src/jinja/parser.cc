#include "jinja/parser.h"

#include "jinja/expression_parser.h"
#include "jinja/template_error.h"

#include <algorithm>
#include <initializer_list>

namespace spindle::jinja {
namespace {

class Parser : public ExpressionParser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name) : ExpressionParser(tokens, name) {}

  Body parse_template() {
    Body body = parse_body({});
    if (cur().type != TokenType::kEof) fail("unexpected tag");
    return body;
  }

 private:
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
  // `{% name %}`, the cursor on its '{%'.
  void consume_whole_tag(const char* name) {
    consume_tag(name);
    expect_block_end();
  }
  // The rest of a block tag whose head is parsed: its '%}', the body, then `{% end %}`.
  Body parse_block_rest(const char* end) {
    expect_block_end();
    Body body = parse_body({end});
    consume_whole_tag(end);
    return body;
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
      s->body = parse_block_rest("endgeneration");
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
        consume_whole_tag("else");
        s->else_body = parse_body({"endif"});
      }
      consume_whole_tag("endif");
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
      consume_whole_tag("else");
      s->else_body = parse_body({"endfor"});
    }
    consume_whole_tag("endfor");
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
    s->body = parse_block_rest("endset");
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
    comma_separated(")", [&] {
      m.params.push_back(expect_name());
      m.defaults.push_back(accept_op("=") ? parse_expression(true) : nullptr);
    });
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
    macros_.push_back(s->macro.get());
    s->macro->body = parse_block_rest("endcall");
    macros_.pop_back();
    return s;
  }

  StmtPtr parse_filter_block(int line) {
    auto s = make_stmt(StmtKind::kFilterBlock, line);
    s->filter = parse_filter_chain();
    s->body = parse_block_rest("endfilter");
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
    s->body = parse_block_rest("endwith");
    return s;
  }

  int loop_depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& template_name) {
  return Parser(tokens, template_name).parse_template();
}

}  // namespace spindle::jinja
