#include "jinja/renderer.h"

#include "jinja/builtins.h"
#include "jinja/operators.h"
#include "jinja/pystring.h"
#include "jinja/template_error.h"

#include <cmath>

namespace spindle::jinja {
namespace {

[[noreturn]] void fail_undefined(const Value& v) {
  JINJA_FAIL("{}", v.undefined_hint().empty() ? std::string("value is undefined") : v.undefined_hint());
}

std::string undefined_name_hint(const std::string& name) { return fmt::format("'{}' is undefined", name); }

Value loop_object(Renderer& r, const std::vector<Value>& items, size_t i) {
  const auto n = static_cast<int64_t>(items.size());
  const auto k = static_cast<int64_t>(i);
  auto loop = std::make_shared<DictData>();
  loop->items = {
      {"index", Value(k + 1)},
      {"index0", Value(k)},
      {"revindex", Value(n - k)},
      {"revindex0", Value(n - k - 1)},
      {"first", Value(k == 0)},
      {"last", Value(k == n - 1)},
      {"length", Value(n)},
      {"depth", Value(1)},
      {"depth0", Value(0)},
      {"previtem", k > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
      {"nextitem", k + 1 < n ? items[i + 1] : Value::undefined("there is no next item")},
  };
  loop->set("cycle", Value::function("loop.cycle", [k](Renderer&, CallArgs& args) -> Value {
              JINJA_CHECK(!args.args.empty(), "no items for cycling given");
              return args.args[static_cast<size_t>(k) % args.args.size()];
            }));
  return Value(loop);
}

}  // namespace

const Value* Frame::find(const std::string& name) const {
  for (const Frame* f = this; f != nullptr; f = f->parent.get()) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return &it->second;
  }
  return nullptr;
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined: return false;
    case Kind::kString:
      JINJA_CHECK(item.is_string(), "'in <string>' requires string as left operand, not {}", type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::kList:
      for (const auto& v : container.items())
        if (equals(v, item)) return true;
      return false;
    case Kind::kDict:
      JINJA_CHECK(!container.is_namespace(), "argument of type 'Namespace' is not iterable");
      return item.is_string() && container.dict_data().find(item.as_string()) != nullptr;
    default: JINJA_FAIL("argument of type '{}' is not iterable", type_name(container));
  }
}

Renderer::Renderer(const RenderOptions& options, const std::string& template_name)
    : options_(options), template_name_(template_name) {}

Renderer::~Renderer() {
  for (auto& ns : namespaces_) ns->items.clear();
}

std::string Renderer::render(const Body& body, const std::vector<std::pair<std::string, Value>>& context) {
  auto globals = std::make_shared<Frame>();
  add_globals(globals->vars);
  root_ = std::make_shared<Frame>();
  root_->parent = globals;
  for (const auto& [k, v] : context) root_->vars[k] = v;
  std::string out;
  try {
    exec_body(body, root_, out);
  } catch (const TemplateError& e) {
    if (e.kind() == ErrorKind::kRaised || e.kind() == ErrorKind::kSyntax) throw;
    throw TemplateError(e.kind(), fmt::format("template {} line {}: {}", template_name_, line_, e.message()),
                        e.where());
  }
  root_.reset();
  return out;
}

void Renderer::count_iterations(size_t n) {
  iterations_ += static_cast<int64_t>(n);
  if (iterations_ > options_.limits.max_loop_iterations)
    JINJA_FAIL_KIND(ErrorKind::kLimit, "more than {} loop iterations", options_.limits.max_loop_iterations);
}

void Renderer::charge(size_t bytes) {
  if (bytes > options_.limits.max_output_bytes)
    JINJA_FAIL_KIND(ErrorKind::kLimit, "a string longer than {} bytes", options_.limits.max_output_bytes);
  work_bytes_ += bytes;
  if (work_bytes_ > options_.limits.max_work_bytes)
    JINJA_FAIL_KIND(ErrorKind::kLimit, "more than {} bytes of strings built", options_.limits.max_work_bytes);
}

void Renderer::write(std::string& out, std::string_view text) {
  if (out.size() + text.size() > options_.limits.max_output_bytes)
    JINJA_FAIL_KIND(ErrorKind::kLimit, "output longer than {} bytes", options_.limits.max_output_bytes);
  charge(text.size());
  out.append(text);
}

// ---- statements ----

Renderer::Flow Renderer::exec_body(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out) {
  for (const auto& stmt : body) {
    const Flow flow = exec(*stmt, frame, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out) {
  line_ = s.line;
  Flow flow = Flow::kNormal;
  switch (s.kind) {
    case StmtKind::kText: write(out, s.text); break;
    case StmtKind::kOutput: write(out, to_str(eval(*s.expr, frame))); break;
    case StmtKind::kIf: exec_if(s, frame, out, flow); break;
    case StmtKind::kFor: return exec_for(s, frame, out);
    case StmtKind::kSet: exec_set(s, frame); break;
    case StmtKind::kSetBlock: {
      std::string body;
      auto scope = std::make_shared<Frame>();
      scope->parent = frame;
      exec_body(s.body, scope, body);
      Value v(std::move(body));
      if (s.filter) {
        placeholders_.push_back(std::move(v));
        v = eval(*s.filter, frame);
        placeholders_.pop_back();
      }
      frame->vars[s.targets[0]] = std::move(v);
      break;
    }
    case StmtKind::kMacro: frame->vars[s.macro->name] = make_macro(s.macro, frame); break;
    case StmtKind::kCallBlock: exec_call_block(s, frame, out); break;
    case StmtKind::kFilterBlock: {
      std::string body;
      exec_body(s.body, frame, body);
      placeholders_.push_back(Value(std::move(body)));
      Value v = eval(*s.filter, frame);
      placeholders_.pop_back();
      write(out, to_str(v));
      break;
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kWith: {
      auto scope = std::make_shared<Frame>();
      scope->parent = frame;
      for (size_t i = 0; i < s.targets.size(); ++i) scope->vars[s.targets[i]] = eval(*s.values[i], frame);
      return exec_body(s.body, scope, out);
    }
  }
  return flow;
}

void Renderer::exec_if(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out, Flow& flow) {
  for (const auto& [cond, body] : s.branches) {
    line_ = cond->line;
    if (eval(*cond, frame).truthy()) {
      flow = exec_body(body, frame, out);
      return;
    }
  }
  flow = exec_body(s.else_body, frame, out);
}

Renderer::Flow Renderer::exec_for(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out) {
  std::vector<Value> items = iterate(eval(*s.expr, frame));
  if (s.condition) {
    std::vector<Value> kept;
    for (auto& item : items) {
      count_iterations(1);
      auto scope = std::make_shared<Frame>();
      scope->parent = frame;
      assign(*scope, s.targets, item);
      if (eval(*s.condition, scope).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    count_iterations(1);
    auto scope = std::make_shared<Frame>();
    scope->parent = frame;
    scope->vars["loop"] = loop_object(*this, items, i);
    assign(*scope, s.targets, items[i]);
    if (exec_body(s.body, scope, out) == Flow::kBreak) break;
  }
  if (items.empty()) exec_body(s.else_body, frame, out);
  return Flow::kNormal;
}

void Renderer::assign(Frame& frame, const std::vector<std::string>& targets, const Value& value) {
  if (targets.size() == 1) {
    frame.vars[targets[0]] = value;
    return;
  }
  std::vector<Value> parts = iterate(value);
  JINJA_CHECK(parts.size() == targets.size(), "cannot unpack {} values into {} names", parts.size(), targets.size());
  for (size_t i = 0; i < targets.size(); ++i) frame.vars[targets[i]] = parts[i];
}

void Renderer::exec_set(const Stmt& s, const std::shared_ptr<Frame>& frame) {
  Value v = eval(*s.expr, frame);
  if (s.attr.empty()) {
    assign(*frame, s.targets, v);
    return;
  }
  const Value* target = frame->find(s.targets[0]);
  JINJA_CHECK(target != nullptr && target->is_namespace(), "cannot assign attribute on non-namespace object '{}'",
              s.targets[0]);
  target->mutable_dict().set(s.attr, std::move(v));
}

Value Renderer::make_macro(const std::shared_ptr<MacroDef>& def, const std::shared_ptr<Frame>& frame) {
  std::weak_ptr<Frame> closure = frame;
  return Value::function(def->name, [def, closure](Renderer& r, CallArgs& args) {
    return r.call_macro(*def, closure, args);
  });
}

Value Renderer::call_macro(const MacroDef& def, const std::weak_ptr<Frame>& closure, CallArgs& args) {
  if (call_depth_ >= options_.limits.max_call_depth)
    JINJA_FAIL_KIND(ErrorKind::kLimit, "macro calls nested more than {} deep", options_.limits.max_call_depth);
  auto scope = std::make_shared<Frame>();
  scope->parent = closure.lock();
  if (!scope->parent) scope->parent = root_;
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < def.params.size()) scope->vars[def.params[i]] = args.args[i];
    else varargs.push_back(args.args[i]);
  }
  JINJA_CHECK(varargs.empty() || def.uses_varargs, "macro '{}' takes not more than {} argument(s)", def.name,
              def.params.size());
  auto kwargs = std::make_shared<DictData>();
  for (auto& [key, value] : args.kwargs) {
    const bool is_param = std::find(def.params.begin(), def.params.end(), key) != def.params.end();
    if (is_param) {
      JINJA_CHECK(!scope->vars.count(key), "macro '{}' got multiple values for argument '{}'", def.name, key);
      scope->vars[key] = value;
    } else if (key == "caller" && def.uses_caller) {
      scope->vars["caller"] = value;
    } else {
      JINJA_CHECK(def.uses_kwargs, "macro '{}' takes no keyword argument '{}'", def.name, key);
      kwargs->set(key, value);
    }
  }
  ++call_depth_;
  struct DepthRestore {
    int& d;
    ~DepthRestore() { --d; }
  } restore{call_depth_};
  for (size_t i = 0; i < def.params.size(); ++i) {
    if (scope->vars.count(def.params[i])) continue;
    scope->vars[def.params[i]] = def.defaults[i] ? eval(*def.defaults[i], scope)
                                                 : Value::undefined(fmt::format("parameter '{}' was not provided", def.params[i]));
  }
  if (def.uses_varargs) scope->vars["varargs"] = Value::list(std::move(varargs), true);
  if (def.uses_kwargs) scope->vars["kwargs"] = Value(kwargs);
  if (def.uses_caller && !scope->vars.count("caller")) scope->vars["caller"] = Value::undefined("'caller' is undefined");
  const int saved_line = line_;
  std::string out;
  exec_body(def.body, scope, out);
  line_ = saved_line;
  return Value(std::move(out));
}

void Renderer::exec_call_block(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out) {
  const Expr& call = *s.expr;
  Value callee = eval(*call.args[0], frame);
  CallArgs args = eval_args(call, 1, frame);
  args.kwargs.emplace_back("caller", make_macro(s.macro, frame));
  write(out, to_str(this->call(callee, args)));
}

// ---- expressions ----

Value Renderer::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  JINJA_CHECK(callee.is_callable(), "'{}' object is not callable", type_name(callee));
  return callee.callable().fn(*this, args);
}

std::vector<Value> Renderer::iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return {};
    case Kind::kList: return v.items();
    case Kind::kDict: {
      JINJA_CHECK(!v.is_namespace(), "'Namespace' object is not iterable");
      std::vector<Value> keys;
      for (const auto& kv : v.dict_data().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : py::decode(v.as_string())) {
        std::string s;
        py::append_code_point(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default: JINJA_FAIL("'{}' object is not iterable", type_name(v));
  }
}

Value Renderer::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict() && !obj.is_namespace() && !has_method(obj, name)) {
    const Value* v = obj.dict_data().find(name);
    return v ? *v : Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
  }
  if (obj.is_namespace()) {
    const Value* v = obj.dict_data().find(name);
    return v ? *v : Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
  }
  if (has_method(obj, name)) {
    return Value::function(name, [obj, name](Renderer& r, CallArgs& args) { return call_method(r, obj, name, args); });
  }
  return Value::undefined(fmt::format("'{}' object has no attribute '{}'", type_name(obj), name));
}

Value Renderer::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict() && !obj.is_namespace() && key.is_string()) {
    const Value* v = obj.dict_data().find(key.as_string());
    if (v) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.items().size())
                                    : static_cast<int64_t>(py::length(obj.as_string()));
    int64_t i = key.int_value();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.items()[static_cast<size_t>(i)];
      std::string s;
      py::append_code_point(s, py::decode(obj.as_string())[static_cast<size_t>(i)]);
      return Value(std::move(s));
    }
    return Value::undefined(fmt::format("{} index out of range", type_name(obj)));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(fmt::format("'{}' object has no item {}", type_name(obj), to_repr(key)));
}

Value Renderer::slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_list()) {
    std::vector<Value> out;
    for (int64_t i : slice_indices(static_cast<int64_t>(obj.items().size()), start, stop, step))
      out.push_back(obj.items()[static_cast<size_t>(i)]);
    return Value::list(std::move(out), obj.list_data().is_tuple);
  }
  if (obj.is_string()) {
    const std::u32string s = py::decode(obj.as_string());
    std::string out;
    for (int64_t i : slice_indices(static_cast<int64_t>(s.size()), start, stop, step))
      py::append_code_point(out, s[static_cast<size_t>(i)]);
    return Value(std::move(out));
  }
  return Value::undefined(fmt::format("'{}' object is not subscriptable", type_name(obj)));
}

CallArgs Renderer::eval_args(const Expr& e, size_t first, const std::shared_ptr<Frame>& frame) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) args.args.push_back(eval(*e.args[i], frame));
  for (const auto& [k, v] : e.kwargs) args.kwargs.emplace_back(k, eval(*v, frame));
  return args;
}

Value Renderer::eval_call(const Expr& e, const std::shared_ptr<Frame>& frame) {
  const Expr& callee = *e.args[0];
  if (callee.kind == ExprKind::kGetAttr) {
    Value obj = eval(*callee.args[0], frame);
    if (!obj.is_undefined() && !obj.is_namespace() && has_method(obj, callee.name)) {
      CallArgs args = eval_args(e, 1, frame);
      return call_method(*this, obj, callee.name, args);
    }
    Value fn = get_attr(obj, callee.name);
    CallArgs args = eval_args(e, 1, frame);
    return call(fn, args);
  }
  Value fn = eval(callee, frame);
  CallArgs args = eval_args(e, 1, frame);
  return call(fn, args);
}

Value Renderer::eval_compare(const Expr& e, const std::shared_ptr<Frame>& frame) {
  Value left = eval(*e.args[0], frame);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1], frame);
    const std::string& op = e.ops[i];
    bool result;
    if (op == "==") result = equals(left, right);
    else if (op == "!=") result = !equals(left, right);
    else if (op == "in") result = contains(right, left);
    else if (op == "notin") result = !contains(right, left);
    else {
      if (left.is_undefined()) fail_undefined(left);
      if (right.is_undefined()) fail_undefined(right);
      const int c = compare(left, right);
      result = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!result) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Renderer::eval(const Expr& e, const std::shared_ptr<Frame>& frame) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: {
      const Value* v = frame->find(e.name);
      return v ? *v : Value::undefined(undefined_name_hint(e.name));
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a, frame));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<DictData>();
      for (const auto& [k, v] : e.pairs) {
        Value key = eval(*k, frame);
        JINJA_CHECK(key.is_string(), "dict keys must be strings in Spindle's templates, not {}", type_name(key));
        d->set(key.as_string(), eval(*v, frame));
      }
      return Value(d);
    }
    case ExprKind::kGetAttr: return get_attr(eval(*e.args[0], frame), e.name);
    case ExprKind::kGetItem: return get_item(eval(*e.args[0], frame), eval(*e.args[1], frame));
    case ExprKind::kSlice: {
      auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i], frame) : Value::none(); };
      return slice(eval(*e.args[0], frame), part(1), part(2), part(3));
    }
    case ExprKind::kCall: return eval_call(e, frame);
    case ExprKind::kFilter: {
      Value v = eval(*e.args[0], frame);
      CallArgs args = eval_args(e, 1, frame);
      return apply_filter(*this, e.name, std::move(v), args);
    }
    case ExprKind::kTest: {
      Value v = eval(*e.args[0], frame);
      CallArgs args = eval_args(e, 1, frame);
      return Value(apply_test(*this, e.name, v, args) != e.negated);
    }
    case ExprKind::kUnary: {
      Value v = eval(*e.args[0], frame);
      if (v.is_undefined()) fail_undefined(v);
      JINJA_CHECK(v.is_number(), "bad operand type for unary {}: '{}'", e.name, type_name(v));
      if (e.name == "+") return v.is_bool() ? Value(v.int_value()) : v;
      if (v.is_float()) return Value(-v.as_float());
      return arithmetic("-", Value(0), v);
    }
    case ExprKind::kBinary: return binary(e.name, eval(*e.args[0], frame), eval(*e.args[1], frame));
    case ExprKind::kCompare: return eval_compare(e, frame);
    case ExprKind::kAnd: {
      Value a = eval(*e.args[0], frame);
      return a.truthy() ? eval(*e.args[1], frame) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.args[0], frame);
      return a.truthy() ? a : eval(*e.args[1], frame);
    }
    case ExprKind::kNot: return Value(!eval(*e.args[0], frame).truthy());
    case ExprKind::kCondition:
      if (eval(*e.args[0], frame).truthy()) return eval(*e.args[1], frame);
      return e.args[2] ? eval(*e.args[2], frame) : Value::undefined("the inline if's condition was false");
    case ExprKind::kPlaceholder: return placeholders_.back();
  }
  return Value();
}

Value Renderer::binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_str(a) + to_str(b);
    charge(s.size());
    return Value(std::move(s));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+" && a.is_string() && b.is_string()) {
    charge(a.as_string().size() + b.as_string().size());
    return Value(a.as_string() + b.as_string());
  }
  if (op == "+" && a.is_list() && b.is_list() && a.list_data().is_tuple == b.list_data().is_tuple) {
    count_iterations(a.items().size() + b.items().size());
    std::vector<Value> items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    return Value::list(std::move(items), a.list_data().is_tuple);
  }
  if (op == "*" && ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))) return repeat(*this, a, b.int_value());
  if (op == "*" && ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool()))) return repeat(*this, b, a.int_value());
  if (op == "%" && a.is_string()) return percent_format(*this, a.as_string(), b);
  JINJA_FAIL("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

}  // namespace spindle::jinja
