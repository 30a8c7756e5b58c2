// Executes a parsed template: statements write to an output string, expressions evaluate to
// Values, with jinja2's scoping (a for-loop iteration, a macro call and a with/generation block
// open a scope; set writes to the innermost scope; if does not open one) and its Undefined.
// Bounds on untrusted templates, all TemplateErrors of kind kLimit: loop iterations over the whole
// render, macro call depth, output size, and the bytes of strings built (work).
#pragma once

#include "jinja/ast.h"
#include "jinja/value.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace spindle::jinja {

struct RenderLimits {
  int64_t max_loop_iterations = 1'000'000;   // all loops of one render together
  int max_call_depth = 48;                   // nested macro calls
  size_t max_output_bytes = 16u << 20;       // any one output or string value
  size_t max_work_bytes = 256u << 20;        // bytes of all strings built during one render
};

struct RenderOptions {
  RenderLimits limits;
  // strftime_now's clock; formatted in UTC. Unset: the system clock.
  std::function<std::chrono::system_clock::time_point()> now;
};

struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;
  const Value* find(const std::string& name) const;
};

class Renderer {
 public:
  Renderer(const RenderOptions& options, const std::string& template_name);
  ~Renderer();

  // Renders `body` with `context` (names -> values) over the built-in globals.
  std::string render(const Body& body, const std::vector<std::pair<std::string, Value>>& context);

  // ---- for the built-ins ----
  const RenderOptions& options() const { return options_; }
  Value call(const Value& callee, CallArgs& args);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  // Python's iter(): list items, dict keys, string code points, nothing for undefined.
  std::vector<Value> iterate(const Value& value);
  // Counts loop iterations (and filter passes) against the limit.
  void count_iterations(size_t n);
  // Counts bytes of a string built; a string past max_output_bytes is an error too.
  void charge(size_t bytes);
  // A namespace() created during this render: its attributes are cleared when the render ends,
  // so that a namespace holding itself does not outlive it.
  void track_namespace(const std::shared_ptr<DictData>& ns) { namespaces_.push_back(ns); }
  int line() const { return line_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out);
  Flow exec(const Stmt& stmt, const std::shared_ptr<Frame>& frame, std::string& out);
  void exec_if(const Stmt& stmt, const std::shared_ptr<Frame>& frame, std::string& out, Flow& flow);
  Flow exec_for(const Stmt& stmt, const std::shared_ptr<Frame>& frame, std::string& out);
  void exec_set(const Stmt& stmt, const std::shared_ptr<Frame>& frame);
  void exec_call_block(const Stmt& stmt, const std::shared_ptr<Frame>& frame, std::string& out);
  void assign(Frame& frame, const std::vector<std::string>& targets, const Value& value);
  void write(std::string& out, std::string_view text);

  Value eval(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value eval_call(const Expr& e, const std::shared_ptr<Frame>& frame);
  CallArgs eval_args(const Expr& e, size_t first, const std::shared_ptr<Frame>& frame);
  Value eval_compare(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value binary(const std::string& op, const Value& a, const Value& b);
  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
  Value make_macro(const std::shared_ptr<MacroDef>& def, const std::shared_ptr<Frame>& frame);
  Value call_macro(const MacroDef& def, const std::weak_ptr<Frame>& closure, CallArgs& args);

  const RenderOptions& options_;
  const std::string& template_name_;
  std::shared_ptr<Frame> root_;
  std::vector<std::shared_ptr<DictData>> namespaces_;
  std::vector<Value> placeholders_;
  int64_t iterations_ = 0;
  size_t work_bytes_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
};

// Python's `a in b`.
bool contains(const Value& container, const Value& item);

}  // namespace spindle::jinja
