// jinja2's filters (jinja2/filters.py) with transformers' tojson.
#include "jinja/builtins.h"
#include "jinja/pystring.h"
#include "jinja/renderer.h"
#include "jinja/template_error.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace spindle::jinja {
namespace {

using Filter = Value (*)(Renderer&, Value&, CallArgs&);

// jinja2's make_attrgetter: "a.b.0" looked up part by part with subscript semantics.
Value get_path(Renderer& r, const Value& item, const std::string& path) {
  Value v = item;
  for (const std::string& part : py::split(path, std::string("."), -1, false)) {
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = r.get_item(v, numeric ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
  }
  return v;
}

// Sort / unique key: strings lower-cased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(py::lower(v.as_string())) : v;
}

std::string soft_str(const Value& v) { return to_str(v); }

Value f_trim(Renderer&, Value& v, CallArgs& a) {
  ArgReader args("trim", a, {"chars"});
  return Value(py::strip(soft_str(v), args.string(0), true, true));
}
Value f_upper(Renderer&, Value& v, CallArgs& a) {
  ArgReader("upper", a, {});
  return Value(py::upper(soft_str(v)));
}
Value f_lower(Renderer&, Value& v, CallArgs& a) {
  ArgReader("lower", a, {});
  return Value(py::lower(soft_str(v)));
}
Value f_capitalize(Renderer&, Value& v, CallArgs& a) {
  ArgReader("capitalize", a, {});
  return Value(py::capitalize(soft_str(v)));
}
// Words start after "-", whitespace, "(", "{", "[" or "<"; each is capitalised.
Value f_title(Renderer&, Value& v, CallArgs& a) {
  ArgReader("title", a, {});
  const std::u32string s = py::decode(soft_str(v));
  std::string out;
  bool word_start = true;
  for (char32_t c : s) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py::is_space(c);
    if (sep) {
      py::append_code_point(out, c);
      word_start = true;
      continue;
    }
    const char32_t mapped = word_start ? py::upper_char(c) : py::lower_char(c);
    py::append_code_point(out, mapped);
    word_start = false;
  }
  return Value(std::move(out));
}

Value f_length(Renderer&, Value& v, CallArgs& a) {
  ArgReader("length", a, {});
  switch (v.kind()) {
    case Kind::kUndefined: return Value(0);
    case Kind::kString: return Value(static_cast<int64_t>(py::length(v.as_string())));
    case Kind::kList: return Value(static_cast<int64_t>(v.items().size()));
    case Kind::kDict:
      JINJA_CHECK(!v.is_namespace(), "object of type 'Namespace' has no len()");
      return Value(static_cast<int64_t>(v.dict_data().items.size()));
    default: JINJA_FAIL("object of type '{}' has no len()", type_name(v));
  }
}

Value f_first(Renderer& r, Value& v, CallArgs& a) {
  ArgReader("first", a, {});
  std::vector<Value> items = r.iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}
Value f_last(Renderer& r, Value& v, CallArgs& a) {
  ArgReader("last", a, {});
  std::vector<Value> items = r.iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_join(Renderer& r, Value& v, CallArgs& a) {
  ArgReader args("join", a, {"d", "attribute"});
  const std::string sep = args.get(0) ? to_str(*args.get(0)) : "";
  const std::optional<std::string> attribute = args.get(1) && !args.get(1)->is_none() ? std::optional(to_str(*args.get(1))) : std::nullopt;
  std::string out;
  bool first = true;
  for (const Value& item : r.iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute ? get_path(r, item, *attribute) : item);
    r.charge(0);
  }
  r.charge(out.size());
  return Value(std::move(out));
}

Value f_replace(Renderer& r, Value& v, CallArgs& a) {
  ArgReader args("replace", a, {"old", "new", "count"});
  JINJA_CHECK(args.get(0) && args.get(1), "replace() needs the old and new strings");
  std::string out = py::replace(soft_str(v), to_str(*args.get(0)), to_str(*args.get(1)), args.integer(2, -1));
  r.charge(out.size());
  return Value(std::move(out));
}

Value f_default(Renderer&, Value& v, CallArgs& a) {
  ArgReader args("default", a, {"default_value", "boolean"});
  const bool use_default = v.is_undefined() || (args.flag(1, false) && !v.truthy());
  return use_default ? args.get_or(0, Value("")) : v;
}

Value f_list(Renderer& r, Value& v, CallArgs& a) {
  ArgReader("list", a, {});
  return Value::list(r.iterate(v));
}

Value f_map(Renderer& r, Value& v, CallArgs& a) {
  std::vector<Value> out;
  const Value* attribute = nullptr;
  for (const auto& [k, val] : a.kwargs)
    if (k == "attribute") attribute = &val;
  if (attribute) {
    Value def;
    bool has_default = false;
    for (const auto& [k, val] : a.kwargs) {
      if (k == "default") def = val, has_default = true;
      else JINJA_CHECK(k == "attribute", "map() got an unexpected keyword argument '{}'", k);
    }
    for (const Value& item : r.iterate(v)) {
      Value x = get_path(r, item, to_str(*attribute));
      out.push_back(has_default && x.is_undefined() ? def : x);
    }
    return Value::list(std::move(out));
  }
  JINJA_CHECK(!a.args.empty() && a.args[0].is_string(), "map() needs a filter name or attribute=");
  const std::string filter = a.args[0].as_string();
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const Value& item : r.iterate(v)) {
    CallArgs each = rest;
    out.push_back(apply_filter(r, filter, item, each));
  }
  return Value::list(std::move(out));
}

// select / reject / selectattr / rejectattr.
Value select_or_reject(Renderer& r, Value& v, CallArgs& a, bool by_attr, bool select) {
  JINJA_CHECK(a.kwargs.empty(), "select/reject filters take positional arguments only");
  size_t i = 0;
  std::string attribute;
  if (by_attr) {
    JINJA_CHECK(!a.args.empty(), "selectattr/rejectattr need an attribute");
    attribute = to_str(a.args[i++]);
  }
  std::optional<std::string> test;
  if (i < a.args.size()) test = to_str(a.args[i++]);
  CallArgs test_args;
  test_args.args.assign(a.args.begin() + static_cast<std::ptrdiff_t>(i), a.args.end());
  std::vector<Value> out;
  for (const Value& item : r.iterate(v)) {
    r.count_iterations(1);
    const Value x = by_attr ? get_path(r, item, attribute) : item;
    CallArgs each = test_args;
    const bool pass = test ? apply_test(r, *test, x, each) : x.truthy();
    if (pass == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(Renderer& r, Value& v, CallArgs& a) { return select_or_reject(r, v, a, false, true); }
Value f_reject(Renderer& r, Value& v, CallArgs& a) { return select_or_reject(r, v, a, false, false); }
Value f_selectattr(Renderer& r, Value& v, CallArgs& a) { return select_or_reject(r, v, a, true, true); }
Value f_rejectattr(Renderer& r, Value& v, CallArgs& a) { return select_or_reject(r, v, a, true, false); }

Value f_items(Renderer&, Value& v, CallArgs& a) {
  ArgReader("items", a, {});
  if (v.is_undefined()) return Value::list({});
  JINJA_CHECK(v.is_dict() && !v.is_namespace(), "Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict_data().items) out.push_back(Value::list({Value(k), val}, true));
  return Value::list(std::move(out));
}

Value f_dictsort(Renderer&, Value& v, CallArgs& a) {
  ArgReader args("dictsort", a, {"case_sensitive", "by", "reverse"});
  JINJA_CHECK(v.is_dict() && !v.is_namespace(), "dictsort needs a mapping, not {}", type_name(v));
  const bool case_sensitive = args.flag(0, false);
  const std::string by = args.string(1).value_or("key");
  JINJA_CHECK(by == "key" || by == "value", "You can only sort by either 'key' or 'value'");
  const size_t pos = by == "key" ? 0 : 1;
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict_data().items) out.push_back(Value::list({Value(k), val}, true));
  std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
    return compare(sort_key(x.items()[pos], case_sensitive), sort_key(y.items()[pos], case_sensitive)) < 0;
  });
  if (args.flag(2, false)) std::reverse(out.begin(), out.end());
  return Value::list(std::move(out));
}

Value f_sort(Renderer& r, Value& v, CallArgs& a) {
  ArgReader args("sort", a, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = args.flag(0, false), case_sensitive = args.flag(1, false);
  const std::optional<std::string> attribute = args.string(2);
  std::vector<Value> items = r.iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) keyed.emplace_back(sort_key(attribute ? get_path(r, item, *attribute) : item, case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_unique(Renderer& r, Value& v, CallArgs& a) {
  ArgReader args("unique", a, {"case_sensitive", "attribute"});
  const bool case_sensitive = args.flag(0, false);
  const std::optional<std::string> attribute = args.string(1);
  std::vector<Value> seen, out;
  for (const Value& item : r.iterate(v)) {
    Value key = sort_key(attribute ? get_path(r, item, *attribute) : item, case_sensitive);
    r.count_iterations(seen.size() / 64 + 1);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_reverse(Renderer& r, Value& v, CallArgs& a) {
  ArgReader("reverse", a, {});
  if (v.is_string()) {
    std::u32string s = py::decode(v.as_string());
    std::reverse(s.begin(), s.end());
    return Value(py::encode(s));
  }
  std::vector<Value> items = r.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_string(Renderer&, Value& v, CallArgs& a) {
  ArgReader("string", a, {});
  return Value(to_str(v));
}

std::optional<double> parse_float(const std::string& text) {
  const std::string s = py::strip(text, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

Value f_int(Renderer&, Value& v, CallArgs& a) {
  ArgReader args("int", a, {"default", "base"});
  const Value def = args.get_or(0, Value(0));
  if (v.is_int() || v.is_bool()) return Value(v.int_value());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float()) || std::fabs(v.as_float()) >= 9.2e18) return def;
    return Value(static_cast<int64_t>(std::trunc(v.as_float())));
  }
  if (v.is_string()) {
    const std::string s = py::strip(v.as_string(), std::nullopt, true, true);
    const int base = static_cast<int>(args.integer(1, 10));
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(s.c_str(), &end, base);
    if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value(static_cast<int64_t>(n));
    if (auto d = parse_float(s); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
      return Value(static_cast<int64_t>(std::trunc(*d)));
  }
  return def;
}

Value f_float(Renderer&, Value& v, CallArgs& a) {
  ArgReader args("float", a, {"default"});
  if (v.is_number()) return Value(v.number_value());
  if (v.is_string())
    if (auto d = parse_float(v.as_string())) return Value(*d);
  return args.get_or(0, Value(0.0));
}

Value f_abs(Renderer&, Value& v, CallArgs& a) {
  ArgReader("abs", a, {});
  JINJA_CHECK(v.is_number(), "bad operand type for abs(): '{}'", type_name(v));
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  JINJA_CHECK(v.int_value() != INT64_MIN, "integer overflow in abs");
  return Value(static_cast<int64_t>(std::llabs(v.int_value())));
}

Value f_round(Renderer&, Value& v, CallArgs& a) {
  ArgReader args("round", a, {"precision", "method"});
  const int64_t precision = args.integer(0, 0);
  const std::string method = args.string(1).value_or("common");
  JINJA_CHECK(v.is_number(), "round() needs a number, not {}", type_name(v));
  JINJA_CHECK(precision >= 0 && precision <= 30, "round() precision must be 0-30");
  if (method == "common") {
    if (!v.is_float()) return Value(v.int_value());
    // Python's round(): the exact binary value rounded half-to-even, as printf rounds it.
    return Value(std::strtod(fmt::format("{:.{}f}", v.as_float(), precision).c_str(), nullptr));
  }
  JINJA_CHECK(method == "ceil" || method == "floor", "method must be common, ceil or floor");
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.number_value() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_indent(Renderer& r, Value& v, CallArgs& a) {
  ArgReader args("indent", a, {"width", "first", "blank"});
  std::string indention;
  if (args.get(0) && args.get(0)->is_string()) indention = args.get(0)->as_string();
  else indention = std::string(static_cast<size_t>(std::clamp<int64_t>(args.integer(0, 4), 0, 1024)), ' ');
  const std::vector<std::string> lines = py::splitlines(soft_str(v) + "\n", false);
  std::string out;
  if (args.flag(2, false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out.append(1, '\n').append(indention);
      out.append(lines[i]);
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out.append(1, '\n');
      if (!lines[i].empty()) out.append(indention).append(lines[i]);
    }
  }
  if (args.flag(1, false)) out = indention + out;
  r.charge(out.size());
  return Value(std::move(out));
}

Value f_wordcount(Renderer&, Value& v, CallArgs& a) {
  ArgReader("wordcount", a, {});
  int64_t n = 0;
  bool in_word = false;
  for (char ch : soft_str(v)) {
    const auto c = static_cast<unsigned char>(ch);
    const bool word = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

Value f_safe(Renderer&, Value& v, CallArgs& a) {
  ArgReader("safe", a, {});
  return v.is_string() ? v : Value(to_str(v));
}

Value f_escape(Renderer& r, Value& v, CallArgs& a) {
  ArgReader("escape", a, {});
  std::string out;
  for (char c : soft_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  r.charge(out.size());
  return Value(std::move(out));
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys).
Value f_tojson(Renderer& r, Value& v, CallArgs& a) {
  ArgReader args("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JINJA_CHECK(!args.flag(0, false), "tojson(ensure_ascii=true) is not supported");
  JsonDumpOptions o;
  if (const Value* indent = args.get(1); indent && !indent->is_none()) {
    o.has_indent = true;
    if (indent->is_string()) o.indent = indent->as_string();
    else if (indent->is_int() || indent->is_bool()) o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(indent->int_value(), 0, 1024)), ' ');
    else JINJA_FAIL("tojson indent must be an int or a string, not {}", type_name(*indent));
  }
  if (const Value* sep = args.get(2); sep && !sep->is_none()) {
    JINJA_CHECK(sep->is_list() && sep->items().size() == 2 && sep->items()[0].is_string() && sep->items()[1].is_string(),
                "tojson separators must be a pair of strings");
    o.has_separators = true;
    o.item_separator = sep->items()[0].as_string();
    o.key_separator = sep->items()[1].as_string();
  }
  o.sort_keys = args.flag(3, false);
  std::string out = to_json(v, o);
  r.charge(out.size());
  return Value(std::move(out));
}

Value f_sum(Renderer& r, Value& v, CallArgs& a) {
  ArgReader args("sum", a, {"attribute", "start"});
  const std::optional<std::string> attribute = args.string(0);
  Value total = args.get_or(1, Value(0));
  for (const Value& item : r.iterate(v)) {
    const Value x = attribute ? get_path(r, item, *attribute) : item;
    JINJA_CHECK(total.is_number() && x.is_number(), "sum() needs numbers, not {}", type_name(x));
    if (total.is_float() || x.is_float()) total = Value(total.number_value() + x.number_value());
    else {
      int64_t s;
      JINJA_CHECK(!__builtin_add_overflow(total.int_value(), x.int_value(), &s), "integer overflow in sum");
      total = Value(s);
    }
  }
  return total;
}

Value min_max(Renderer& r, Value& v, CallArgs& a, bool want_max) {
  ArgReader args(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  const bool case_sensitive = args.flag(0, false);
  const std::optional<std::string> attribute = args.string(1);
  std::optional<Value> best, best_key;
  for (const Value& item : r.iterate(v)) {
    Value key = sort_key(attribute ? get_path(r, item, *attribute) : item, case_sensitive);
    if (!best || (want_max ? compare(key, *best_key) > 0 : compare(key, *best_key) < 0)) best = item, best_key = key;
  }
  return best ? *best : Value::undefined(fmt::format("No aggregated item, sequence was empty."));
}
Value f_min(Renderer& r, Value& v, CallArgs& a) { return min_max(r, v, a, false); }
Value f_max(Renderer& r, Value& v, CallArgs& a) { return min_max(r, v, a, true); }

Value f_format(Renderer& r, Value& v, CallArgs& a) {
  JINJA_CHECK(a.kwargs.empty() || a.args.empty(), "format() takes positional or keyword arguments, not both");
  if (!a.kwargs.empty()) return percent_format(r, soft_str(v), Value::dict(a.kwargs));
  return percent_format(r, soft_str(v), a.args.size() == 1 ? a.args[0] : Value::list(a.args, true));
}

// Python's getattr only: a dict's keys are not its attributes.
Value f_attr(Renderer& r, Value& v, CallArgs& a) {
  ArgReader args("attr", a, {"name"});
  JINJA_CHECK(args.get(0) && args.get(0)->is_string(), "attr() needs a name");
  const std::string& name = args.get(0)->as_string();
  if (v.is_namespace() || has_method(v, name)) return r.get_attr(v, name);
  return Value::undefined(fmt::format("'{}' object has no attribute '{}'", type_name(v), name));
}

Value f_center(Renderer& r, Value& v, CallArgs& a) {
  ArgReader args("center", a, {"width"});
  const std::string s = soft_str(v);
  const int64_t width = std::min<int64_t>(args.integer(0, 80), 1 << 20);
  const int64_t len = static_cast<int64_t>(py::length(s));
  if (width <= len) return Value(s);
  const int64_t pad = width - len;
  const int64_t left = pad / 2 + (pad & width & 1);
  std::string out = std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(pad - left), ' ');
  r.charge(out.size());
  return Value(std::move(out));
}

const std::unordered_map<std::string, Filter>& filters() {
  static const std::unordered_map<std::string, Filter> table = {
      {"trim", f_trim}, {"upper", f_upper}, {"lower", f_lower}, {"title", f_title},
      {"capitalize", f_capitalize}, {"length", f_length}, {"count", f_length}, {"first", f_first},
      {"last", f_last}, {"join", f_join}, {"replace", f_replace}, {"default", f_default},
      {"d", f_default}, {"list", f_list}, {"map", f_map}, {"select", f_select},
      {"reject", f_reject}, {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"items", f_items},
      {"dictsort", f_dictsort}, {"sort", f_sort}, {"unique", f_unique}, {"reverse", f_reverse},
      {"string", f_string}, {"int", f_int}, {"float", f_float}, {"abs", f_abs},
      {"round", f_round}, {"indent", f_indent}, {"wordcount", f_wordcount}, {"safe", f_safe},
      {"escape", f_escape}, {"e", f_escape}, {"forceescape", f_escape}, {"tojson", f_tojson},
      {"sum", f_sum}, {"min", f_min}, {"max", f_max}, {"format", f_format},
      {"attr", f_attr}, {"center", f_center},
  };
  return table;
}

}  // namespace

Value apply_filter(Renderer& r, const std::string& name, Value value, CallArgs& args) {
  const auto& table = filters();
  auto it = table.find(name);
  JINJA_CHECK(it != table.end(), "no filter named '{}'", name);
  // jinja2's filters receive Undefined as a value; most then fail on it, as str() does not.
  return it->second(r, value, args);
}

}  // namespace spindle::jinja
