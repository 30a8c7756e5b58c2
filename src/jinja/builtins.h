// The built-ins templates call: jinja2's filters and tests, Python's str / dict / list methods,
// and the globals of transformers' environment (range, namespace, dict, joiner,
// raise_exception, strftime_now). Each follows the jinja2 / Python function of the same name.
#pragma once

#include "jinja/value.h"

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace spindle::jinja {

class Renderer;

void add_globals(std::unordered_map<std::string, Value>& vars);
Value apply_filter(Renderer& r, const std::string& name, Value value, CallArgs& args);
bool apply_test(Renderer& r, const std::string& name, const Value& value, CallArgs& args);
// Whether obj has a method `name` (unsafe ones included: calling them is an error, as in
// jinja2's ImmutableSandboxedEnvironment).
bool has_method(const Value& obj, const std::string& name);
Value call_method(Renderer& r, const Value& obj, const std::string& name, CallArgs& args);
// seq * n for a str or list.
Value repeat(Renderer& r, const Value& seq, int64_t n);
// Python's fmt % args (%s %r %d %i %f %x %% with flags, width, precision; %(name)s from a dict).
Value percent_format(Renderer& r, const std::string& fmt, const Value& args);

// A built-in's arguments by parameter position or keyword (Python's binding rules).
class ArgReader {
 public:
  ArgReader(std::string_view function, CallArgs& args, std::initializer_list<std::string_view> names);
  // nullptr when the parameter was not passed.
  const Value* get(size_t i) const { return bound_[i]; }
  Value get_or(size_t i, Value def) const { return bound_[i] ? *bound_[i] : std::move(def); }
  bool flag(size_t i, bool def) const { return bound_[i] ? bound_[i]->truthy() : def; }
  int64_t integer(size_t i, int64_t def) const;
  // A string parameter; nullopt when absent or None.
  std::optional<std::string> string(size_t i) const;

 private:
  std::string function_;
  std::vector<std::string_view> names_;
  std::vector<const Value*> bound_;
};

}  // namespace spindle::jinja
