// jinja2's tests (jinja2/tests.py), the globals of transformers' environment, and Python's
// %-formatting.
#include "jinja/builtins.h"
#include "jinja/pystring.h"
#include "jinja/renderer.h"
#include "jinja/template_error.h"

#include <chrono>
#include <cmath>
#include <ctime>

namespace spindle::jinja {
namespace {

const Value& test_arg(const CallArgs& a, const std::string& test) {
  JINJA_CHECK(a.args.size() == 1 && a.kwargs.empty(), "test '{}' takes one argument", test);
  return a.args[0];
}

int compare_defined(const Value& a, const Value& b) {
  JINJA_CHECK(!a.is_undefined() && !b.is_undefined(), "an undefined value cannot be ordered");
  return compare(a, b);
}

Value g_range(Renderer& r, CallArgs& a) {
  JINJA_CHECK(a.kwargs.empty() && !a.args.empty() && a.args.size() <= 3, "range expected 1 to 3 integer arguments");
  for (const auto& v : a.args) JINJA_CHECK(v.is_int() || v.is_bool(), "range() needs integers, not {}", type_name(v));
  int64_t start = 0, stop, step = 1;
  if (a.args.size() == 1) {
    stop = a.args[0].int_value();
  } else {
    start = a.args[0].int_value();
    stop = a.args[1].int_value();
    if (a.args.size() == 3) step = a.args[2].int_value();
  }
  JINJA_CHECK(step != 0, "range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    r.count_iterations(1);
    out.emplace_back(i);
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  return Value::list(std::move(out));
}

Value g_namespace(Renderer& r, CallArgs& a) {
  auto ns = std::make_shared<DictData>();
  ns->is_namespace = true;
  JINJA_CHECK(a.args.size() <= 1, "namespace() takes at most one positional argument");
  if (!a.args.empty()) {
    JINJA_CHECK(a.args[0].is_dict(), "namespace() positional argument must be a mapping");
    for (const auto& [k, v] : a.args[0].dict_data().items) ns->set(k, v);
  }
  for (const auto& [k, v] : a.kwargs) ns->set(k, v);
  r.track_namespace(ns);
  return Value(ns);
}

Value g_dict(Renderer&, CallArgs& a) {
  auto d = std::make_shared<DictData>();
  JINJA_CHECK(a.args.size() <= 1, "dict() takes at most one positional argument");
  if (!a.args.empty()) {
    JINJA_CHECK(a.args[0].is_dict() && !a.args[0].is_namespace(), "dict() positional argument must be a mapping");
    d->items = a.args[0].dict_data().items;
  }
  for (const auto& [k, v] : a.kwargs) d->set(k, v);
  return Value(d);
}

Value g_raise_exception(Renderer&, CallArgs& a) {
  JINJA_CHECK(a.args.size() == 1 && a.kwargs.empty(), "raise_exception takes one message");
  JINJA_FAIL_KIND(ErrorKind::kRaised, "{}", to_str(a.args[0]));
}

Value g_strftime_now(Renderer& r, CallArgs& a) {
  ArgReader args("strftime_now", a, {"format"});
  const std::optional<std::string> format = args.string(0);
  JINJA_CHECK(format.has_value(), "strftime_now needs a format string");
  JINJA_CHECK(format->size() <= 256, "strftime_now format longer than 256 bytes");
  const auto now = r.options().now ? r.options().now() : std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  if (format->empty()) return Value("");
  std::string buf(format->size() * 16 + 64, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), format->c_str(), &tm);
  JINJA_CHECK(n > 0, "strftime_now could not format '{}'", *format);
  buf.resize(n);
  return Value(std::move(buf));
}

Value g_joiner(Renderer&, CallArgs& a) {
  ArgReader args("joiner", a, {"sep"});
  const std::string sep = args.string(0).value_or(", ");
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [sep, used](Renderer&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value("");
    }
    return Value(sep);
  });
}

// One %-conversion: flags, width, precision, type.
std::string format_one(char type, const std::string& flags, int width, int precision, const Value& v) {
  std::string body;
  switch (type) {
    case 's': body = to_str(v); break;
    case 'r': body = to_repr(v); break;
    case 'd':
    case 'i':
    case 'x':
    case 'X':
    case 'o': {
      JINJA_CHECK(v.is_number(), "%{} format: a real number is required, not {}", type, type_name(v));
      const int64_t n = v.is_float() ? static_cast<int64_t>(std::trunc(v.as_float())) : v.int_value();
      const char* spec = type == 'x' ? "{:x}" : type == 'X' ? "{:X}" : type == 'o' ? "{:o}" : "{}";
      body = fmt::format(fmt::runtime(spec), n < 0 ? -static_cast<uint64_t>(n) : static_cast<uint64_t>(n));
      if (n < 0) body = "-" + body;
      else if (flags.find('+') != std::string::npos) body = "+" + body;
      break;
    }
    case 'f':
    case 'F':
    case 'e':
    case 'g': {
      JINJA_CHECK(v.is_number(), "must be real number, not {}", type_name(v));
      const std::string spec = fmt::format("{{:{}.{}{}}}", flags.find('+') != std::string::npos ? "+" : "",
                                           precision < 0 ? 6 : precision, type == 'F' ? 'f' : type);
      body = fmt::format(fmt::runtime(spec), v.number_value());
      break;
    }
    default: JINJA_FAIL("unsupported format character '{}'", type);
  }
  if (type == 's' || type == 'r')
    if (precision >= 0) body = py::encode(py::decode(body).substr(0, static_cast<size_t>(precision)));
  const int len = static_cast<int>(py::length(body));
  if (width > len) {
    const std::string pad(static_cast<size_t>(width - len), flags.find('0') != std::string::npos && type != 's' ? '0' : ' ');
    body = flags.find('-') != std::string::npos ? body + std::string(pad.size(), ' ') : pad + body;
  }
  return body;
}

}  // namespace

bool apply_test(Renderer& r, const std::string& name, const Value& v, CallArgs& a) {
  auto no_args = [&] { JINJA_CHECK(a.args.empty() && a.kwargs.empty(), "test '{}' takes no arguments", name); };
  if (name == "defined") return no_args(), !v.is_undefined();
  if (name == "undefined") return no_args(), v.is_undefined();
  if (name == "none") return no_args(), v.is_none();
  if (name == "boolean") return no_args(), v.is_bool();
  if (name == "true") return no_args(), v.is_bool() && v.as_bool();
  if (name == "false") return no_args(), v.is_bool() && !v.as_bool();
  if (name == "integer") return no_args(), v.is_int();
  if (name == "float") return no_args(), v.is_float();
  if (name == "number") return no_args(), v.is_number();
  if (name == "string") return no_args(), v.is_string();
  if (name == "mapping") return no_args(), v.is_dict() && !v.is_namespace();
  if (name == "iterable") return no_args(), v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
  if (name == "sequence") return no_args(), v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
  if (name == "callable") return no_args(), v.is_callable();
  if (name == "escaped") return no_args(), false;
  if (name == "lower") return no_args(), v.is_string() && py::lower(v.as_string()) == v.as_string();
  if (name == "upper") return no_args(), v.is_string() && py::upper(v.as_string()) == v.as_string();
  if (name == "odd" || name == "even") {
    no_args();
    JINJA_CHECK(v.is_int() || v.is_bool(), "test '{}' needs an integer, not {}", name, type_name(v));
    return (v.int_value() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value& n = test_arg(a, name);
    JINJA_CHECK((v.is_int() || v.is_bool()) && (n.is_int() || n.is_bool()) && n.int_value() != 0,
                "divisibleby needs integers and a non-zero divisor");
    return v.int_value() % n.int_value() == 0;
  }
  if (name == "sameas") {
    const Value& o = test_arg(a, name);
    if (v.is_none() || v.is_bool() || v.is_undefined()) return equals(v, o) && v.kind() == o.kind();
    return (v.is_dict() && o.is_dict() && &v.dict_data() == &o.dict_data()) ||
           (v.is_list() && o.is_list() && &v.list_data() == &o.list_data());
  }
  if (name == "in") return contains(test_arg(a, name), v);
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, test_arg(a, name));
  if (name == "ne" || name == "!=") return !equals(v, test_arg(a, name));
  if (name == "lt" || name == "lessthan" || name == "<") return compare_defined(v, test_arg(a, name)) < 0;
  if (name == "le" || name == "<=") return compare_defined(v, test_arg(a, name)) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare_defined(v, test_arg(a, name)) > 0;
  if (name == "ge" || name == ">=") return compare_defined(v, test_arg(a, name)) >= 0;
  JINJA_FAIL("no test named '{}'", name);
}

void add_globals(std::unordered_map<std::string, Value>& vars) {
  vars["range"] = Value::function("range", g_range);
  vars["namespace"] = Value::function("namespace", g_namespace);
  vars["dict"] = Value::function("dict", g_dict);
  vars["raise_exception"] = Value::function("raise_exception", g_raise_exception);
  vars["strftime_now"] = Value::function("strftime_now", g_strftime_now);
  vars["joiner"] = Value::function("joiner", g_joiner);
}

Value percent_format(Renderer& r, const std::string& text, const Value& args) {
  std::vector<Value> positional;
  const bool mapping = args.is_dict() && !args.is_namespace();
  if (args.is_list() && args.list_data().is_tuple) positional = args.items();
  else if (!mapping) positional.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    JINJA_CHECK(i + 1 < text.size(), "incomplete format");
    size_t p = i + 1;
    const Value* v = nullptr;
    if (text[p] == '(') {
      const size_t close = text.find(')', p);
      JINJA_CHECK(mapping && close != std::string::npos, "format requires a mapping");
      v = args.dict_data().find(text.substr(p + 1, close - p - 1));
      JINJA_CHECK(v != nullptr, "KeyError: '{}'", text.substr(p + 1, close - p - 1));
      p = close + 1;
    }
    std::string flags;
    while (p < text.size() && std::string_view("-+ #0").find(text[p]) != std::string_view::npos) flags.push_back(text[p++]);
    int width = 0, precision = -1;
    while (p < text.size() && text[p] >= '0' && text[p] <= '9') width = std::min(width * 10 + (text[p++] - '0'), 100000);
    if (p < text.size() && text[p] == '.') {
      precision = 0;
      ++p;
      while (p < text.size() && text[p] >= '0' && text[p] <= '9') precision = std::min(precision * 10 + (text[p++] - '0'), 1000);
    }
    JINJA_CHECK(p < text.size(), "incomplete format");
    const char type = text[p];
    i = p;
    if (type == '%') {
      out.push_back('%');
      continue;
    }
    if (!v) {
      JINJA_CHECK(!mapping || type == '%', "format requires a mapping");
      JINJA_CHECK(next < positional.size(), "not enough arguments for format string");
      v = &positional[next++];
    }
    const std::string piece = format_one(type, flags, width, precision, *v);
    r.charge(piece.size());
    out += piece;
  }
  JINJA_CHECK(mapping || next == positional.size(), "not all arguments converted during string formatting");
  return Value(std::move(out));
}

}  // namespace spindle::jinja
