#pragma once
// Renders a parsed template: walks statements, evaluates expressions with Jinja2's semantics,
// and enforces the limits that keep a hostile template or input from hanging or crashing us.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "template/ast.h"
#include "template/value.h"

namespace pagoda::tmpl {

/// Bounds on one render; exceeding any of them is a TemplateError, never a crash.
struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // also bounds every string the template builds
  int64_t max_loop_iterations = 1'000'000;     // total over all loops (and range() sizes)
  int max_call_depth = 64;                     // nested macro calls
  /// Statements executed plus expressions evaluated, over the whole render: bounds the work of
  /// a template whose loops stay under max_loop_iterations but do much in each.
  int64_t max_steps = 10'000'000;
};

/// Per-render settings.
struct RenderOptions {
  RenderLimits limits;
  /// The time strftime_now() formats (local time); the wall clock when unset.
  std::optional<std::chrono::system_clock::time_point> now;
};

/// A variable scope: template globals, the render's context, a loop iteration or a macro call.
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  [[nodiscard]] const Value* find(const std::string& name) const;
  void set(const std::string& name, Value value) { vars_[name] = std::move(value); }

 private:
  std::shared_ptr<Scope> parent_;
  std::unordered_map<std::string, Value> vars_;
};

/// The state of one render; not shared between threads (the syntax tree is).
class Evaluator {
 public:
  Evaluator(const RenderOptions& options, std::shared_ptr<Scope> root);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  /// Renders body into out.
  void render(const Body& body, std::string& out);

  /// Evaluates one expression in the current scope.
  [[nodiscard]] Value eval(const Expr& expr);
  /// Calls a callable value (macro, builtin, bound method).
  [[nodiscard]] Value call(const Value& callee, CallArgs& args);

  /// Throws when a string of this many bytes would exceed the output limit.
  void check_size(size_t bytes) const;
  /// Counts loop iterations (or list elements being produced) against the limit.
  void count_iterations(int64_t n);
  /// Counts one statement or expression against max_steps.
  void count_step();
  [[nodiscard]] const RenderOptions& options() const { return options_; }
  /// Registers a namespace() so that reference cycles through it are broken after the render.
  void track_namespace(const std::shared_ptr<Dict>& ns) { namespaces_.push_back(ns); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& stmt);
  Flow exec_for(const Stmt& stmt);
  Flow run_loop(const Stmt& stmt, const Value& iterable, int depth0);
  void exec_set(const Stmt& stmt);
  void set_namespace_attr(const Stmt& stmt, Value value);
  Value eval_impl(const Expr& expr);
  Value eval_call(const Expr& expr, const Value* caller);
  Value apply_filter_chain(const Expr& filter, Value input);
  Value call_macro(const Stmt& macro, const std::weak_ptr<Scope>& closure, CallArgs& args);
  void emit(const std::string& text);
  std::string render_to_string(const Body& body);

  RenderOptions options_;
  std::shared_ptr<Scope> scope_;
  std::string* out_ = nullptr;
  int64_t iterations_ = 0;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  std::vector<std::shared_ptr<Dict>> namespaces_;
};

/// Iterates a value the way a for loop does (list items, dict keys, string characters).
[[nodiscard]] std::vector<Value> iterate(const Value& v);

/// Builds the global functions of Hugging Face's environment (range, namespace, dict,
/// raise_exception, strftime_now) into a scope.
void add_globals(Scope& scope);

}  // namespace pagoda::tmpl
