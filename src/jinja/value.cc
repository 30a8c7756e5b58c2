#include "jinja/value.h"

#include "jinja/pystring.h"
#include "jinja/template_error.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace spindle::jinja {

namespace detail {
void throw_template_error(ErrorKind kind, std::string message, SourceLocation where) {
  throw TemplateError(kind, std::move(message), where);
}
}  // namespace detail

namespace {

void check_depth(int depth) {
  JINJA_CHECK(depth <= kMaxValueDepth, "value nested more than {} levels deep", kMaxValueDepth);
}

void repr_into(std::string& out, const Value& v, int depth);

void repr_sequence(std::string& out, const ListData& list, int depth) {
  out.push_back(list.is_tuple ? '(' : '[');
  for (size_t i = 0; i < list.items.size(); ++i) {
    if (i > 0) out += ", ";
    repr_into(out, list.items[i], depth + 1);
  }
  if (list.is_tuple && list.items.size() == 1) out.push_back(',');
  out.push_back(list.is_tuple ? ')' : ']');
}

void repr_dict(std::string& out, const DictData& dict, int depth) {
  out.push_back('{');
  for (size_t i = 0; i < dict.items.size(); ++i) {
    if (i > 0) out += ", ";
    out += py::repr(dict.items[i].first);
    out += ": ";
    repr_into(out, dict.items[i].second, depth + 1);
  }
  out.push_back('}');
}

void repr_into(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Kind::kString: out += py::repr(v.as_string()); return;
    case Kind::kUndefined: out += "Undefined"; return;
    case Kind::kList: repr_sequence(out, v.list_data(), depth); return;
    case Kind::kDict:
      if (v.is_namespace()) out += "<Namespace ";
      repr_dict(out, v.dict_data(), depth);
      if (v.is_namespace()) out += ">";
      return;
    default: out += to_str(v); return;
  }
}

void json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else out.push_back(ch);
    }
  }
  out.push_back('"');
}

void json_newline(std::string& out, const JsonDumpOptions& o, int level) {
  out.push_back('\n');
  for (int i = 0; i < level; ++i) out += o.indent;
}

void json_into(std::string& out, const Value& v, const JsonDumpOptions& o, int level) {
  check_depth(level);
  const std::string& item_sep = o.item_separator;
  switch (v.kind()) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: {
      const double f = v.as_float();
      if (std::isnan(f)) out += "NaN";
      else if (std::isinf(f)) out += f > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(f);
      return;
    }
    case Kind::kString: json_string(out, v.as_string()); return;
    case Kind::kList: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        if (o.has_indent) json_newline(out, o, level + 1);
        json_into(out, items[i], o, level + 1);
      }
      if (o.has_indent) json_newline(out, o, level);
      out.push_back(']');
      return;
    }
    case Kind::kDict: {
      JINJA_CHECK(!v.is_namespace(), "Object of type Namespace is not JSON serializable");
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict_data().items) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out.push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        if (o.has_indent) json_newline(out, o, level + 1);
        json_string(out, items[i]->first);
        out += o.key_separator;
        json_into(out, items[i]->second, o, level + 1);
      }
      if (o.has_indent) json_newline(out, o, level);
      out.push_back('}');
      return;
    }
    case Kind::kUndefined: JINJA_FAIL("Object of type Undefined is not JSON serializable");
    case Kind::kCallable: JINJA_FAIL("Object of type function is not JSON serializable");
  }
}

bool equals_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.number_value() == b.number_value();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.as_string() == b.as_string();
    case Kind::kList: {
      if (a.list_data().is_tuple != b.list_data().is_tuple) return false;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals_at(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case Kind::kDict: {
      if (a.is_namespace() || b.is_namespace()) return &a.dict_data() == &b.dict_data();
      const auto& x = a.dict_data();
      const auto& y = b.dict_data();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [key, value] : x.items) {
        const Value* other = y.find(key);
        if (other == nullptr || !equals_at(value, *other, depth + 1)) return false;
      }
      return true;
    }
    case Kind::kCallable: return &a.callable() == &b.callable();
    default: return false;
  }
}

int compare_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.number_value(), y = b.number_value();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.int_value(), y = b.int_value();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order.
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.list_data().is_tuple == b.list_data().is_tuple) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals_at(x[i], y[i], depth + 1)) continue;
      return compare_at(x[i], y[i], depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  JINJA_FAIL("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

int value_depth(const Value& v) {
  if (v.is_list()) return v.list_data().depth;
  if (v.is_dict()) return v.dict_data().depth;
  return 0;
}

}  // namespace

Value::Value(std::shared_ptr<ListData> l) {
  int depth = 0;
  for (const Value& item : l->items) depth = std::max(depth, value_depth(item));
  l->depth = depth + 1;
  check_depth(l->depth);
  data_ = std::move(l);
}

Value::Value(std::shared_ptr<DictData> d) {
  int depth = 0;
  if (!d->is_namespace)
    for (const auto& kv : d->items) depth = std::max(depth, value_depth(kv.second));
  d->depth = depth + 1;
  check_depth(d->depth);
  data_ = std::move(d);
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void DictData::set(std::string key, Value value) {
  for (auto& kv : items) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto data = std::make_shared<ListData>();
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  return Value(std::move(data));
}

Value Value::dict(std::vector<std::pair<std::string, Value>> items) {
  auto data = std::make_shared<DictData>();
  data->items = std::move(items);
  return Value(std::move(data));
}

Value Value::function(std::string name, std::function<Value(Renderer&, CallArgs&)> fn) {
  auto data = std::make_shared<CallableData>();
  data->name = std::move(name);
  data->fn = std::move(fn);
  return Value(std::move(data));
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !items().empty();
    case Kind::kDict: return is_namespace() || !dict_data().items.empty();
    case Kind::kCallable: return true;
  }
  return false;
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0.0) return std::signbit(f) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |f| < 1e16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits.push_back(c);
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out += digits + std::string(static_cast<size_t>(exponent + 1 - static_cast<int>(digits.size())), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exponent + 1)) + "." + digits.substr(static_cast<size_t>(exponent + 1));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.as_bool() ? "True" : "False";
    case Kind::kInt: return std::to_string(v.as_int());
    case Kind::kFloat: return float_repr(v.as_float());
    case Kind::kString: return v.as_string();
    case Kind::kCallable: return fmt::format("<function {}>", v.callable().name);
    default: {
      std::string out;
      repr_into(out, v, 0);
      return out;
    }
  }
}

std::string to_repr(const Value& v) {
  if (v.is_undefined()) return "Undefined";
  std::string out;
  repr_into(out, v, 0);
  return out;
}

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }
int compare(const Value& a, const Value& b) { return compare_at(a, b, 0); }

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return v.list_data().is_tuple ? "tuple" : "list";
    case Kind::kDict: return v.is_namespace() ? "Namespace" : "dict";
    case Kind::kCallable: return "function";
  }
  return "object";
}

namespace {
Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  check_depth(depth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      JINJA_CHECK(u <= static_cast<uint64_t>(INT64_MAX), "integer {} does not fit in 64 bits", u);
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      items.reserve(j.size());
      for (const auto& [k, e] : j.items()) items.emplace_back(k, from_json_at(e, depth + 1));
      return Value::dict(std::move(items));
    }
    default: JINJA_FAIL("JSON value of type {} cannot be a template value", j.type_name());
  }
}
}  // namespace

Value from_json(const nlohmann::ordered_json& json) { return from_json_at(json, 0); }

std::string to_json(const Value& value, const JsonDumpOptions& options) {
  JsonDumpOptions o = options;
  if (!o.has_separators) {
    o.item_separator = o.has_indent ? "," : ", ";
    o.key_separator = ": ";
  }
  std::string out;
  json_into(out, value, o, 0);
  return out;
}

}  // namespace spindle::jinja
