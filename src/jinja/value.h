// Values of Spindle's Jinja engine, with Python's semantics as jinja2 gives them to templates.
//
// A Value is one of: undefined (jinja2's default Undefined: prints empty, iterates empty, fails
// when used as an object), none, bool, int (int64; overflow is an error), float (double),
// string (UTF-8; length, indexing and slicing count code points as Python's str does), list
// (also a tuple, which prints and compares as a tuple), dict (insertion-ordered string keys;
// also a namespace(), the only object a template may assign attributes to) and callable
// (built-in functions, bound methods, macros).
// Lists and dicts are shared by reference as in Python; a template cannot mutate a list or a
// dict (transformers renders in jinja2's ImmutableSandboxedEnvironment), only a namespace.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace spindle::jinja {

class Value;
class Renderer;

enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;  // nesting (set when it becomes a Value): 1 + the deepest item's
};

struct DictData {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  int depth = 1;  // as ListData's; a namespace counts 1 (its attributes change)
  // nullptr when absent.
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

// Positional and keyword arguments of one call.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

struct CallableData {
  std::string name;
  std::function<Value(Renderer&, CallArgs&)> fn;
};

struct UndefinedData {
  std::string hint;  // what was undefined, for the error message when it is used
};

class Value {
 public:
  Value() : data_(UndefinedData{}) {}
  static Value undefined(std::string hint) { return Value(UndefinedData{std::move(hint)}); }
  static Value none() { return Value(nullptr); }
  Value(bool b) : data_(b) {}
  Value(int64_t i) : data_(i) {}
  Value(int i) : data_(static_cast<int64_t>(i)) {}
  Value(double f) : data_(f) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  // A list or dict becomes a Value once filled: its depth is computed here, and nesting deeper
  // than kMaxValueDepth is an error (so no recursive operation, destruction included, runs deep).
  Value(std::shared_ptr<ListData> l);
  Value(std::shared_ptr<DictData> d);
  Value(std::shared_ptr<CallableData> c) : data_(std::move(c)) {}
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(std::vector<std::pair<std::string, Value>> items = {});
  static Value function(std::string name, std::function<Value(Renderer&, CallArgs&)> fn);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // int, float or bool (Python's bool is an int).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return is_dict() && dict_data().is_namespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const std::vector<Value>& items() const { return std::get<std::shared_ptr<ListData>>(data_)->items; }
  const ListData& list_data() const { return *std::get<std::shared_ptr<ListData>>(data_); }
  const DictData& dict_data() const { return *std::get<std::shared_ptr<DictData>>(data_); }
  DictData& mutable_dict() const { return *std::get<std::shared_ptr<DictData>>(data_); }
  const std::shared_ptr<DictData>& dict_ptr() const { return std::get<std::shared_ptr<DictData>>(data_); }
  const CallableData& callable() const { return *std::get<std::shared_ptr<CallableData>>(data_); }
  const std::string& undefined_hint() const { return std::get<UndefinedData>(data_).hint; }

  // int or bool as an int64 (callers check is_int() || is_bool()).
  int64_t int_value() const { return is_bool() ? (as_bool() ? 1 : 0) : as_int(); }
  // Any number as a double.
  double number_value() const { return is_float() ? as_float() : static_cast<double>(int_value()); }

  // Python's truth value; undefined is false.
  bool truthy() const;

 private:
  explicit Value(std::nullptr_t) : data_(nullptr) {}
  explicit Value(UndefinedData u) : data_(std::move(u)) {}
  std::variant<UndefinedData, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<ListData>,
               std::shared_ptr<DictData>, std::shared_ptr<CallableData>>
      data_;
};

// Values nested deeper than this (lists in lists...) are an error in every recursive operation.
inline constexpr int kMaxValueDepth = 256;

// Python's str(value): undefined -> "", None -> "None", floats as repr(), containers as repr().
std::string to_str(const Value& value);
// Python's repr(value).
std::string to_repr(const Value& value);
// Python's repr() of a float ("1.0", "1e-05", "inf").
std::string float_repr(double f);
// Python's ==.
bool equals(const Value& a, const Value& b);
// Python's <, as -1 / 0 / 1; types that Python cannot order are an error naming them.
int compare(const Value& a, const Value& b);
// Python's type name of the value ("str", "dict", "NoneType"...), for error messages.
std::string type_name(const Value& value);

// JSON -> Value (objects keep their key order). Nesting deeper than kMaxValueDepth is an error.
Value from_json(const nlohmann::ordered_json& json);

// Python's json.dumps(value, ensure_ascii=False, indent, separators, sort_keys) as transformers'
// tojson calls it. indent: nullopt for none, else the indent text (an int n means n spaces).
struct JsonDumpOptions {
  bool has_indent = false;
  std::string indent;
  bool has_separators = false;
  std::string item_separator;
  std::string key_separator;
  bool sort_keys = false;
};
std::string to_json(const Value& value, const JsonDumpOptions& options);

}  // namespace spindle::jinja
