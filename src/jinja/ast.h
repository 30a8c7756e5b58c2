// The syntax tree of a parsed template: expressions and statements, each with its source line.
#pragma once

#include "jinja/value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace spindle::jinja {

enum class ExprKind {
  kLiteral,      // literal
  kName,         // name
  kList,         // args: items
  kTuple,        // args: items
  kDict,         // kwargs-like pairs in `pairs` (key expression, value expression)
  kGetAttr,      // args[0].name
  kGetItem,      // args[0][args[1]]
  kSlice,        // args[0][args[1]:args[2]:args[3]], absent parts null
  kCall,         // args[0](args[1..], kwargs)
  kFilter,       // args[0] | name(args[1..], kwargs)
  kTest,         // args[0] is [not] name(args[1..]); negated
  kUnary,        // name ("-", "+") args[0]
  kBinary,       // args[0] name args[1]: + - * / // % ** ~
  kCompare,      // args[0] ops[0] args[1] ops[1] args[2] ... (==, !=, <, <=, >, >=, in, notin)
  kAnd,          // args[0] and args[1]
  kOr,           // args[0] or args[1]
  kNot,          // not args[0]
  kCondition,    // args[1] if args[0] else args[2] (args[2] null: undefined)
  kPlaceholder,  // the body of a filter / set block, given by the statement
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;
  std::vector<std::string> ops;
  bool negated = false;
};

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (condition, body)...; else_body
  kFor,          // targets in expr [if condition]: body, else_body
  kSet,          // targets = expr, or (attr nonempty) targets[0].attr = expr
  kSetBlock,     // targets[0] = body rendered, through filter (a chain over a placeholder) if any
  kMacro,        // name(params with defaults): body
  kCallBlock,    // expr (a call) with caller(params) = body
  kFilterBlock,  // filter (a chain over a placeholder) applied to body
  kBreak,
  kContinue,
  kWith,         // targets = values (assignments), body
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null where none
  Body body;
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<ExprPtr> values;
  Body body;
  Body else_body;
  std::shared_ptr<MacroDef> macro;
};

}  // namespace spindle::jinja
