// Python's str / dict / list methods as templates call them, and the argument reader.
#include "jinja/builtins.h"
#include "jinja/pystring.h"
#include "jinja/renderer.h"
#include "jinja/template_error.h"

#include <algorithm>
#include <unordered_set>

namespace spindle::jinja {
namespace {

const std::unordered_set<std::string> kStrMethods = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "replace",
    "upper", "lower", "title", "capitalize", "find", "rfind", "count", "join", "format", "isdigit",
    "isalpha", "isalnum", "isspace", "isupper", "islower", "removeprefix", "removesuffix", "index"};
const std::unordered_set<std::string> kDictMethods = {"items", "keys", "values", "get", "copy"};
const std::unordered_set<std::string> kDictUnsafe = {"pop", "popitem", "update", "clear", "setdefault"};
const std::unordered_set<std::string> kListMethods = {"index", "count", "copy"};
const std::unordered_set<std::string> kListUnsafe = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};

bool all_of_code_points(const std::string& s, bool (*pred)(char32_t)) {
  const std::u32string d = py::decode(s);
  return !d.empty() && std::all_of(d.begin(), d.end(), pred);
}

// startswith / endswith with a str or a tuple of str.
bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    JINJA_CHECK(a.is_string(), "{} first arg must be str or a tuple of str, not {}", prefix ? "startswith" : "endswith", type_name(a));
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) return std::any_of(affix.items().begin(), affix.items().end(), one);
  return one(affix);
}

// Python's str.format with {} / {0} / {name} fields and no format specs.
Value str_format(Renderer& r, const std::string& fmt_text, CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt_text.size(); ++i) {
    const char c = fmt_text[i];
    if (c == '}' ) {
      JINJA_CHECK(i + 1 < fmt_text.size() && fmt_text[i + 1] == '}', "Single '}}' encountered in format string");
      out.push_back('}');
      ++i;
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt_text.size() && fmt_text[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt_text.find('}', i);
    JINJA_CHECK(close != std::string::npos, "Single '{{' encountered in format string");
    const std::string field = fmt_text.substr(i + 1, close - i - 1);
    JINJA_CHECK(field.find_first_of(":!.[") == std::string::npos, "format specs in str.format are not supported");
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      const size_t idx = field.empty() ? auto_index++ : std::stoul(field);
      JINJA_CHECK(idx < a.args.size(), "Replacement index {} out of range for positional args tuple", idx);
      v = &a.args[idx];
    } else {
      for (const auto& [k, val] : a.kwargs)
        if (k == field) v = &val;
      JINJA_CHECK(v != nullptr, "KeyError: '{}'", field);
    }
    out += to_str(*v);
    i = close;
  }
  r.charge(out.size());
  return Value(std::move(out));
}

Value str_method(Renderer& r, const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgReader args(name, a, {"chars"});
    return Value(py::strip(s, args.string(0), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    ArgReader args(name, a, {"sep", "maxsplit"});
    const std::optional<std::string> sep = args.string(0);
    JINJA_CHECK(!sep || !sep->empty(), "empty separator");
    std::vector<Value> parts;
    for (auto& p : py::split(s, sep, args.integer(1, -1), name == "rsplit")) parts.emplace_back(std::move(p));
    r.count_iterations(parts.size() / 16);
    return Value::list(std::move(parts));
  }
  if (name == "splitlines") {
    ArgReader args(name, a, {"keepends"});
    std::vector<Value> parts;
    for (auto& p : py::splitlines(s, args.flag(0, false))) parts.emplace_back(std::move(p));
    return Value::list(std::move(parts));
  }
  if (name == "startswith" || name == "endswith") {
    ArgReader args(name, a, {"prefix"});
    JINJA_CHECK(args.get(0), "{}() takes at least 1 argument", name);
    return Value(affix_match(s, *args.get(0), name == "startswith"));
  }
  if (name == "replace") {
    ArgReader args(name, a, {"old", "new", "count"});
    JINJA_CHECK(args.get(0) && args.get(1) && args.get(0)->is_string() && args.get(1)->is_string(),
                "replace() takes two strings");
    std::string out = py::replace(s, args.get(0)->as_string(), args.get(1)->as_string(), args.integer(2, -1));
    r.charge(out.size());
    return Value(std::move(out));
  }
  if (name == "upper") return ArgReader(name, a, {}), Value(py::upper(s));
  if (name == "lower") return ArgReader(name, a, {}), Value(py::lower(s));
  if (name == "title") return ArgReader(name, a, {}), Value(py::title(s));
  if (name == "capitalize") return ArgReader(name, a, {}), Value(py::capitalize(s));
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    ArgReader args(name, a, {"sub"});
    JINJA_CHECK(args.get(0) && args.get(0)->is_string(), "{}() needs a string", name);
    if (name == "count") return Value(py::count(s, args.get(0)->as_string()));
    const int64_t pos = py::find(s, args.get(0)->as_string(), name == "rfind");
    JINJA_CHECK(name != "index" || pos >= 0, "substring not found");
    return Value(pos);
  }
  if (name == "join") {
    ArgReader args(name, a, {"iterable"});
    JINJA_CHECK(args.get(0), "join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& item : r.iterate(*args.get(0))) {
      JINJA_CHECK(item.is_string(), "sequence item: expected str instance, {} found", type_name(item));
      if (!first) out += s;
      first = false;
      out += item.as_string();
    }
    r.charge(out.size());
    return Value(std::move(out));
  }
  if (name == "format") return str_format(r, s, a);
  if (name == "removeprefix" || name == "removesuffix") {
    ArgReader args(name, a, {"affix"});
    JINJA_CHECK(args.get(0) && args.get(0)->is_string(), "{}() needs a string", name);
    const std::string& x = args.get(0)->as_string();
    if (!affix_match(s, Value(x), name == "removeprefix")) return Value(s);
    return Value(name == "removeprefix" ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
  }
  ArgReader(name, a, {});
  if (name == "isdigit") return Value(all_of_code_points(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha")
    return Value(all_of_code_points(s, [](char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0xc0; }));
  if (name == "isalnum")
    return Value(all_of_code_points(s, [](char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0xc0; }));
  if (name == "isspace") return Value(all_of_code_points(s, py::is_space));
  if (name == "isupper") return Value(py::upper(s) == s && py::lower(s) != s);
  if (name == "islower") return Value(py::lower(s) == s && py::upper(s) != s);
  JINJA_FAIL("'str' object has no attribute '{}'", name);
}

Value dict_method(const Value& obj, const std::string& name, CallArgs& a) {
  const DictData& d = obj.dict_data();
  if (name == "get") {
    ArgReader args(name, a, {"key", "default"});
    JINJA_CHECK(args.get(0), "get expected at least 1 argument, got 0");
    const Value* v = args.get(0)->is_string() ? d.find(args.get(0)->as_string()) : nullptr;
    return v ? *v : args.get_or(1, Value::none());
  }
  ArgReader(name, a, {});
  std::vector<Value> out;
  if (name == "copy") return Value::dict(d.items);
  for (const auto& [k, v] : d.items) {
    if (name == "keys") out.emplace_back(k);
    else if (name == "values") out.push_back(v);
    else out.push_back(Value::list({Value(k), v}, true));
  }
  return Value::list(std::move(out));
}

Value list_method(const Value& obj, const std::string& name, CallArgs& a) {
  if (name == "copy") return ArgReader(name, a, {}), Value::list(obj.items(), obj.list_data().is_tuple);
  ArgReader args(name, a, {"value"});
  JINJA_CHECK(args.get(0), "{}() takes exactly one argument", name);
  int64_t n = 0, first = -1;
  for (size_t i = 0; i < obj.items().size(); ++i) {
    if (!equals(obj.items()[i], *args.get(0))) continue;
    ++n;
    if (first < 0) first = static_cast<int64_t>(i);
  }
  if (name == "count") return Value(n);
  JINJA_CHECK(first >= 0, "{} is not in list", to_repr(*args.get(0)));
  return Value(first);
}

}  // namespace

ArgReader::ArgReader(std::string_view function, CallArgs& args, std::initializer_list<std::string_view> names)
    : function_(function), names_(names), bound_(names.size(), nullptr) {
  JINJA_CHECK(args.args.size() <= names_.size(), "{}() takes at most {} argument(s) ({} given)", function_, names_.size(),
              args.args.size());
  for (size_t i = 0; i < args.args.size(); ++i) bound_[i] = &args.args[i];
  for (const auto& [key, value] : args.kwargs) {
    auto it = std::find(names_.begin(), names_.end(), key);
    JINJA_CHECK(it != names_.end(), "{}() got an unexpected keyword argument '{}'", function_, key);
    const size_t i = static_cast<size_t>(it - names_.begin());
    JINJA_CHECK(bound_[i] == nullptr, "{}() got multiple values for argument '{}'", function_, key);
    bound_[i] = &value;
  }
}

int64_t ArgReader::integer(size_t i, int64_t def) const {
  if (!bound_[i] || bound_[i]->is_none()) return def;
  JINJA_CHECK(bound_[i]->is_int() || bound_[i]->is_bool(), "{}() argument '{}' must be an integer, not {}", function_,
              names_[i], type_name(*bound_[i]));
  return bound_[i]->int_value();
}

std::optional<std::string> ArgReader::string(size_t i) const {
  if (!bound_[i] || bound_[i]->is_none()) return std::nullopt;
  JINJA_CHECK(bound_[i]->is_string(), "{}() argument '{}' must be a string, not {}", function_, names_[i],
              type_name(*bound_[i]));
  return bound_[i]->as_string();
}

bool has_method(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::kString: return kStrMethods.count(name) > 0;
    case Kind::kDict: return !obj.is_namespace() && (kDictMethods.count(name) > 0 || kDictUnsafe.count(name) > 0);
    case Kind::kList: return kListMethods.count(name) > 0 || kListUnsafe.count(name) > 0;
    default: return false;
  }
}

Value call_method(Renderer& r, const Value& obj, const std::string& name, CallArgs& args) {
  if (obj.is_string()) return str_method(r, obj.as_string(), name, args);
  if (obj.is_dict()) {
    JINJA_CHECK(!kDictUnsafe.count(name), "access to attribute '{}' of 'dict' object is unsafe", name);
    return dict_method(obj, name, args);
  }
  if (obj.is_list()) {
    JINJA_CHECK(!kListUnsafe.count(name), "access to attribute '{}' of '{}' object is unsafe", name, type_name(obj));
    return list_method(obj, name, args);
  }
  JINJA_FAIL("'{}' object has no attribute '{}'", type_name(obj), name);
}

Value repeat(Renderer& r, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value("") : Value::list({}, seq.list_data().is_tuple);
  if (seq.is_string()) {
    const size_t each = seq.as_string().size();
    r.charge(each > 0 && static_cast<uint64_t>(n) > (1ull << 40) / each ? (1ull << 40) : each * static_cast<size_t>(n));
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  const size_t each = seq.items().size();
  r.count_iterations(each > 0 && static_cast<uint64_t>(n) > (1ull << 40) / each ? (1ull << 40) : each * static_cast<size_t>(n));
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.list_data().is_tuple);
}

}  // namespace spindle::jinja
