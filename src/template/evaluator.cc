#include "template/evaluator.h"

#include <ctime>

#include "template/builtins.h"
#include "template/error.h"

namespace pagoda::tmpl {

namespace {

[[noreturn]] void fail(const std::string& message) { throw TemplateError(message, 0); }

// Errors thrown below the statement or expression that caused them carry no line; the first
// node that sees one stamps its own line on it.
[[noreturn]] void rethrow_with_line(const TemplateError& e, int line) {
  if (dynamic_cast<const TemplateRaised*>(&e) != nullptr) throw TemplateRaised(e.message(), line);
  throw TemplateError(e.message(), line);
}

// Restores the evaluator's current scope when a loop iteration or macro call ends.
class ScopeSwap {
 public:
  ScopeSwap(std::shared_ptr<Scope>& slot, std::shared_ptr<Scope> next)
      : slot_(slot), saved_(std::move(slot)) {
    slot_ = std::move(next);
  }
  ~ScopeSwap() { slot_ = std::move(saved_); }

 private:
  std::shared_ptr<Scope>& slot_;
  std::shared_ptr<Scope> saved_;
};

}  // namespace

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_.get()) {
    auto it = s->vars_.find(name);
    if (it != s->vars_.end()) return &it->second;
  }
  return nullptr;
}

Evaluator::Evaluator(const RenderOptions& options, std::shared_ptr<Scope> root)
    : options_(options), scope_(std::move(root)) {}

Evaluator::~Evaluator() {
  for (auto& ns : namespaces_) ns->clear();
}

void Evaluator::render(const Body& body, std::string& out) {
  std::string* saved = out_;
  out_ = &out;
  exec_body(body);
  out_ = saved;
}

void Evaluator::check_size(size_t bytes) const {
  if (bytes > options_.limits.max_output_bytes) {
    fail("template output exceeds the limit of " +
         std::to_string(options_.limits.max_output_bytes) + " bytes");
  }
}

void Evaluator::count_iterations(int64_t n) {
  iterations_ += n;
  if (iterations_ > options_.limits.max_loop_iterations) {
    fail("template exceeds the limit of " + std::to_string(options_.limits.max_loop_iterations) +
         " loop iterations");
  }
}

void Evaluator::count_step() {
  if (++steps_ > options_.limits.max_steps) {
    fail("template exceeds the limit of " + std::to_string(options_.limits.max_steps) +
         " evaluation steps");
  }
}

void Evaluator::emit(const std::string& text) {
  check_size(out_->size() + text.size());
  out_->append(text);
}

std::string Evaluator::render_to_string(const Body& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec_body(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Evaluator::Flow Evaluator::exec_body(const Body& body) {
  for (const auto& stmt : body) {
    const Flow flow = exec(*stmt);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec(const Stmt& stmt) {
  try {
    count_step();
    switch (stmt.kind) {
      case StmtKind::kText:
        emit(stmt.text);
        return Flow::kNormal;
      case StmtKind::kPrint:
        emit(to_str(eval(*stmt.expr)));
        return Flow::kNormal;
      case StmtKind::kIf:
        for (size_t i = 0; i < stmt.conditions.size(); ++i) {
          if (eval(*stmt.conditions[i]).truthy()) return exec_body(stmt.bodies[i]);
        }
        return exec_body(stmt.else_body);
      case StmtKind::kFor:
        return exec_for(stmt);
      case StmtKind::kSet:
        exec_set(stmt);
        return Flow::kNormal;
      case StmtKind::kSetBlock: {
        // Block bodies ({% set %}, {% filter %}, {% generation %}) are scopes of their own in
        // Jinja2: a {% set %} inside does not leak out.
        Value v;
        {
          ScopeSwap swap(scope_, std::make_shared<Scope>(scope_));
          v = Value(render_to_string(stmt.body));
        }
        if (stmt.filter) v = apply_filter_chain(*stmt.filter, std::move(v));
        if (!stmt.attr.empty()) {
          set_namespace_attr(stmt, std::move(v));
        } else {
          scope_->set(stmt.targets[0], std::move(v));
        }
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        auto frame = std::make_shared<Scope>(scope_);
        for (size_t i = 0; i < stmt.params.size(); ++i) {
          frame->set(stmt.params[i], eval(*stmt.defaults[i]));
        }
        ScopeSwap swap(scope_, frame);
        return exec_body(stmt.body);
      }
      case StmtKind::kMacro: {
        std::weak_ptr<Scope> closure = scope_;
        const Stmt* macro = &stmt;
        auto fn = std::make_shared<Function>();
        fn->name = stmt.name;
        fn->call = [macro, closure](Evaluator& ev, CallArgs& args) {
          return ev.call_macro(*macro, closure, args);
        };
        fn->attrs = std::make_shared<Dict>();  // m.name, m.arguments, as Jinja2's Macro
        fn->attrs->set("name", Value(stmt.name));
        std::vector<Value> params(stmt.params.begin(), stmt.params.end());
        fn->attrs->set("arguments", Value::list(std::move(params), true));
        scope_->set(stmt.name, Value(std::move(fn)));
        return Flow::kNormal;
      }
      case StmtKind::kCallBlock: {
        std::weak_ptr<Scope> closure = scope_;
        const Stmt* block = &stmt;
        Value caller = Value::function("caller", [block, closure](Evaluator& ev, CallArgs& args) {
          return ev.call_macro(*block, closure, args);
        });
        emit(to_str(eval_call(*stmt.expr, &caller)));
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        Value body;
        {
          ScopeSwap swap(scope_, std::make_shared<Scope>(scope_));
          body = Value(render_to_string(stmt.body));
        }
        emit(to_str(apply_filter_chain(*stmt.filter, std::move(body))));
        return Flow::kNormal;
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope: {
        ScopeSwap swap(scope_, std::make_shared<Scope>(scope_));
        return exec_body(stmt.body);
      }
    }
  } catch (const TemplateError& e) {
    if (e.line() == 0) rethrow_with_line(e, stmt.line);
    throw;
  }
  return Flow::kNormal;
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [key, item] : v.dict().items()) keys.emplace_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (auto& c : utf8_chars(v.str())) chars.emplace_back(std::move(c));
      return chars;
    }
    default:
      fail("'" + v.type_name() + "' object is not iterable");
  }
}

namespace {

void bind_targets(Scope& scope, const std::vector<std::string>& targets, const Value& value) {
  if (targets.size() == 1) {
    scope.set(targets[0], value);
    return;
  }
  std::vector<Value> parts = iterate(value);
  if (parts.size() != targets.size()) {
    fail(parts.size() < targets.size()
             ? "not enough values to unpack (expected " + std::to_string(targets.size()) +
                   ", got " + std::to_string(parts.size()) + ")"
             : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], parts[i]);
}

}  // namespace

// A for loop: filter first (loop.length counts only the kept items, as in Jinja2), then run each
// iteration in a fresh scope, so that {% set %} inside the body does not leak out of the loop.
Evaluator::Flow Evaluator::exec_for(const Stmt& stmt) {
  return run_loop(stmt, eval(*stmt.expr), 0);
}

// One pass of a loop over iterable; a recursive loop's body calls loop(children), which renders
// the same loop one level deeper (depth0 + 1) into a string, bounded like a macro call.
Evaluator::Flow Evaluator::run_loop(const Stmt& stmt, const Value& iterable, int depth0) {
  std::vector<Value> items = iterate(iterable);
  if (stmt.condition) {
    std::vector<Value> kept;
    for (auto& item : items) {
      auto probe = std::make_shared<Scope>(scope_);
      bind_targets(*probe, stmt.targets, item);
      ScopeSwap swap(scope_, probe);
      if (eval(*stmt.condition).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec_body(stmt.else_body);
  const int64_t n = static_cast<int64_t>(items.size());
  // loop.changed(...) remembers its last arguments across the iterations of this pass.
  auto last_changed = std::make_shared<std::optional<Value>>();
  // The remembered value may hold this loop object itself (loop.changed(loop)): forget it when
  // the pass ends so that the reference cycle does not outlive the loop.
  struct ForgetChanged {
    std::shared_ptr<std::optional<Value>> state;
    ~ForgetChanged() { state->reset(); }
  } forget{last_changed};
  const Stmt* loop_stmt = &stmt;
  auto recurse = [loop_stmt, depth0](Evaluator& ev, CallArgs& args) {
    if (!loop_stmt->recursive) {
      fail("The loop must have the 'recursive' marker to be called recursively.");
    }
    ArgReader a(args, "loop", {"iterable"});
    if (ev.call_depth_ >= ev.options_.limits.max_call_depth) {
      fail("maximum recursive loop depth (" + std::to_string(ev.options_.limits.max_call_depth) +
           ") exceeded");
    }
    ++ev.call_depth_;
    std::string buffer;
    std::string* saved = ev.out_;
    ev.out_ = &buffer;
    try {
      (void)ev.run_loop(*loop_stmt, a.get(0), depth0 + 1);
    } catch (...) {
      ev.out_ = saved;
      --ev.call_depth_;
      throw;
    }
    ev.out_ = saved;
    --ev.call_depth_;
    return Value(std::move(buffer));
  };
  for (int64_t i = 0; i < n; ++i) {
    count_iterations(1);
    auto iteration = std::make_shared<Scope>(scope_);
    bind_targets(*iteration, stmt.targets, items[i]);
    auto loop = std::make_shared<Dict>();
    loop->set("index", Value(i + 1));
    loop->set("index0", Value(i));
    loop->set("revindex", Value(n - i));
    loop->set("revindex0", Value(n - i - 1));
    loop->set("first", Value(i == 0));
    loop->set("last", Value(i == n - 1));
    loop->set("length", Value(n));
    loop->set("depth", Value(int64_t{depth0} + 1));
    loop->set("depth0", Value(int64_t{depth0}));
    loop->set("previtem", i > 0 ? items[i - 1] : Value::undefined("'previtem' is undefined"));
    loop->set("nextitem", i + 1 < n ? items[i + 1] : Value::undefined("'nextitem' is undefined"));
    loop->set("cycle", Value::function("cycle", [i](Evaluator&, CallArgs& args) {
                if (args.args.empty()) fail("no items for cycling given");
                return args.args[static_cast<size_t>(i) % args.args.size()];
              }));
    loop->set("changed", Value::function("changed", [last_changed](Evaluator&, CallArgs& args) {
                Value current = Value::list(args.args, true);
                if (*last_changed && values_equal(**last_changed, current)) return Value(false);
                *last_changed = std::move(current);
                return Value(true);
              }));
    auto loop_fn = std::make_shared<Function>();
    loop_fn->name = "loop";
    loop_fn->call = recurse;
    loop_fn->attrs = std::move(loop);
    iteration->set("loop", Value(std::move(loop_fn)));
    ScopeSwap swap(scope_, iteration);
    if (exec_body(stmt.body) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Evaluator::set_namespace_attr(const Stmt& stmt, Value value) {
  const Value* target = scope_->find(stmt.targets[0]);
  if (target == nullptr || !target->is_dict() || !target->dict().is_namespace) {
    fail("cannot assign attribute on non-namespace object");
  }
  target->mutable_dict().set(stmt.attr, std::move(value));
}

void Evaluator::exec_set(const Stmt& stmt) {
  Value v = eval(*stmt.expr);
  if (!stmt.attr.empty()) {
    set_namespace_attr(stmt, std::move(v));
    return;
  }
  bind_targets(*scope_, stmt.targets, v);
}

Value Evaluator::call_macro(const Stmt& macro, const std::weak_ptr<Scope>& closure,
                            CallArgs& args) {
  std::shared_ptr<Scope> parent = closure.lock();
  if (!parent) fail("macro '" + macro.name + "' called after its scope ended");
  if (call_depth_ >= options_.limits.max_call_depth) {
    fail("maximum macro call depth (" + std::to_string(options_.limits.max_call_depth) +
         ") exceeded");
  }
  auto frame = std::make_shared<Scope>(parent);
  const size_t num_params = macro.params.size();
  std::vector<bool> bound(num_params, false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < num_params) {
      frame->set(macro.params[i], args.args[i]);
      bound[i] = true;
    } else {
      varargs.push_back(args.args[i]);
    }
  }
  auto kwargs = std::make_shared<Dict>();
  for (auto& [key, value] : args.kwargs) {
    if (key == "caller") {
      frame->set("caller", value);
      continue;
    }
    bool matched = false;
    for (size_t i = 0; i < num_params; ++i) {
      if (macro.params[i] == key) {
        frame->set(key, value);
        bound[i] = true;
        matched = true;
      }
    }
    if (!matched) kwargs->set(key, value);
  }
  frame->set("varargs", Value::list(std::move(varargs), true));
  frame->set("kwargs", Value(std::move(kwargs)));
  ScopeSwap swap(scope_, frame);
  for (size_t i = 0; i < num_params; ++i) {
    if (bound[i]) continue;
    frame->set(macro.params[i], macro.defaults[i]
                                    ? eval(*macro.defaults[i])
                                    : Value::undefined("'" + macro.params[i] + "' is undefined"));
  }
  ++call_depth_;
  struct DepthRestore {
    int& depth;
    ~DepthRestore() { --depth; }
  } restore{call_depth_};
  return Value(render_to_string(macro.body));
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_function()) fail("'" + callee.type_name() + "' object is not callable");
  return callee.fn().call(*this, args);
}

Value Evaluator::eval(const Expr& expr) {
  try {
    count_step();
    return eval_impl(expr);
  } catch (const TemplateError& e) {
    if (e.line() == 0) rethrow_with_line(e, expr.line);
    throw;
  }
}

Value Evaluator::eval_call(const Expr& expr, const Value* caller) {
  Value callee = eval(*expr.object);
  CallArgs args;
  args.line = expr.line;
  for (const auto& a : expr.items) args.args.push_back(eval(*a));
  for (const auto& [key, value] : expr.keywords) args.kwargs.emplace_back(key, eval(*value));
  if (caller != nullptr) args.kwargs.emplace_back("caller", *caller);
  return call(callee, args);
}

Value Evaluator::apply_filter_chain(const Expr& filter, Value input) {
  if (filter.object) input = apply_filter_chain(*filter.object, std::move(input));
  CallArgs args;
  for (const auto& a : filter.items) args.args.push_back(eval(*a));
  for (const auto& [key, value] : filter.keywords) args.kwargs.emplace_back(key, eval(*value));
  return apply_filter(*this, filter.name, input, args);
}

Value Evaluator::eval_impl(const Expr& expr) {
  switch (expr.kind) {
    case ExprKind::kLiteral:
      return expr.literal;
    case ExprKind::kName: {
      const Value* v = scope_->find(expr.name);
      return v != nullptr ? *v : Value::undefined("'" + expr.name + "' is undefined");
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(expr.items.size());
      for (const auto& item : expr.items) items.push_back(eval(*item));
      return Value::list(std::move(items), expr.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<Dict>();
      for (size_t i = 0; i < expr.keys.size(); ++i) {
        Value key = eval(*expr.keys[i]);
        d->set(key, eval(*expr.items[i]));
      }
      return Value(std::move(d));
    }
    case ExprKind::kGetAttr: {
      Value obj = eval(*expr.object);
      if (obj.is_undefined()) fail_undefined(obj);
      return get_attr(obj, expr.name);
    }
    case ExprKind::kGetItem: {
      Value obj = eval(*expr.object);
      if (obj.is_undefined()) fail_undefined(obj);
      return get_item(obj, eval(*expr.items[0]));
    }
    case ExprKind::kSlice: {
      Value obj = eval(*expr.object);
      if (obj.is_undefined()) fail_undefined(obj);
      Value parts[3];
      for (int i = 0; i < 3; ++i) {
        parts[i] = expr.items[i] ? eval(*expr.items[i]) : Value::none();
      }
      return slice_value(obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kCall:
      return eval_call(expr, nullptr);
    case ExprKind::kFilter: {
      Value input = eval(*expr.object);
      CallArgs args;
      args.line = expr.line;
      for (const auto& a : expr.items) args.args.push_back(eval(*a));
      for (const auto& [key, value] : expr.keywords) args.kwargs.emplace_back(key, eval(*value));
      return apply_filter(*this, expr.name, input, args);
    }
    case ExprKind::kTest: {
      Value input = eval(*expr.object);
      CallArgs args;
      for (const auto& a : expr.items) args.args.push_back(eval(*a));
      for (const auto& [key, value] : expr.keywords) args.kwargs.emplace_back(key, eval(*value));
      return Value(apply_test(*this, expr.name, input, args) != expr.negated);
    }
    case ExprKind::kUnary: {
      Value v = eval(*expr.object);
      if (expr.name == "not") return Value(!v.truthy());
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number()) {
        fail("bad operand type for unary " + expr.name + ": '" + v.type_name() + "'");
      }
      if (expr.name == "+") return v.is_float() ? v : Value(v.as_int());
      return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
    }
    case ExprKind::kBinary: {
      if (expr.name == "and") {
        Value left = eval(*expr.items[0]);
        return left.truthy() ? eval(*expr.items[1]) : left;
      }
      if (expr.name == "or") {
        Value left = eval(*expr.items[0]);
        return left.truthy() ? left : eval(*expr.items[1]);
      }
      Value left = eval(*expr.items[0]);
      return binary_op(*this, expr.name, left, eval(*expr.items[1]));
    }
    case ExprKind::kCompare: {
      Value left = eval(*expr.object);
      for (size_t i = 0; i < expr.ops.size(); ++i) {
        Value right = eval(*expr.items[i]);
        const std::string& op = expr.ops[i];
        bool ok;
        if (op == "==") {
          ok = values_equal(left, right);
        } else if (op == "!=") {
          ok = !values_equal(left, right);
        } else if (op == "in") {
          ok = contains(right, left);
        } else if (op == "notin") {
          ok = !contains(right, left);
        } else {
          const int c = compare_values(left, right, op.c_str());
          ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
        }
        if (!ok) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::kCondExpr:
      if (eval(*expr.items[1]).truthy()) return eval(*expr.items[0]);
      return expr.items[2] ? eval(*expr.items[2]) : Value::undefined("conditional has no else");
  }
  fail("unknown expression");
}

void add_globals(Scope& scope) {
  scope.set("range", Value::function("range", [](Evaluator& ev, CallArgs& args) {
              if (args.args.empty() || args.args.size() > 3 || !args.kwargs.empty()) {
                fail("range expected 1 to 3 integer arguments");
              }
              int64_t bounds[3] = {0, 0, 1};
              for (size_t i = 0; i < args.args.size(); ++i) {
                const Value& a = args.args[i];
                if (a.is_undefined()) fail_undefined(a);
                if (!a.is_int() && !a.is_bool()) {
                  fail("'" + a.type_name() + "' object cannot be interpreted as an integer");
                }
              }
              if (args.args.size() == 1) {
                bounds[1] = args.args[0].as_int();
              } else {
                bounds[0] = args.args[0].as_int();
                bounds[1] = args.args[1].as_int();
                if (args.args.size() == 3) bounds[2] = args.args[2].as_int();
              }
              if (bounds[2] == 0) fail("range() arg 3 must not be zero");
              std::vector<Value> out;
              for (int64_t i = bounds[0]; bounds[2] > 0 ? i < bounds[1] : i > bounds[1];
                   i += bounds[2]) {
                ev.count_iterations(1);
                out.emplace_back(i);
              }
              return Value::list(std::move(out));
            }));
  auto make_dict = [](bool is_namespace) {
    return [is_namespace](Evaluator& ev, CallArgs& args) {
      auto d = std::make_shared<Dict>();
      d->is_namespace = is_namespace;
      if (args.args.size() > 1) fail("dict expected at most 1 argument");
      for (const auto& a : args.args) {
        if (a.is_dict()) {
          for (const auto& [key, value] : a.dict().items()) d->set(key, value);
          continue;
        }
        if (!a.is_list()) fail("'" + a.type_name() + "' object is not iterable");
        for (const Value& pair : a.items()) {  // dict([('k', 'v'), ...])
          std::vector<Value> kv = iterate(pair);
          if (kv.size() != 2) fail("dictionary update sequence element has wrong length");
          d->set(kv[0], kv[1]);
        }
      }
      for (const auto& [key, value] : args.kwargs) d->set(key, value);
      if (is_namespace) ev.track_namespace(d);
      return Value(std::move(d));
    };
  };
  scope.set("namespace", Value::function("namespace", make_dict(true)));
  scope.set("dict", Value::function("dict", make_dict(false)));
  // cycler(a, b): an object with next(), reset() and current, as Jinja2's Cycler.
  scope.set("cycler", Value::function("cycler", [](Evaluator&, CallArgs& args) {
              if (args.args.empty()) fail("at least one item has to be provided");
              auto items = std::make_shared<std::vector<Value>>(args.args);
              auto pos = std::make_shared<size_t>(0);
              auto obj = std::make_shared<Dict>();
              std::weak_ptr<Dict> self = obj;  // weak: the dict holds these functions
              obj->set("current", items->front());
              obj->set("next", Value::function("next", [items, pos, self](Evaluator&, CallArgs&) {
                         Value v = (*items)[*pos];
                         *pos = (*pos + 1) % items->size();
                         if (auto d = self.lock()) d->set("current", (*items)[*pos]);
                         return v;
                       }));
              obj->set("reset", Value::function("reset", [items, pos, self](Evaluator&, CallArgs&) {
                         *pos = 0;
                         if (auto d = self.lock()) d->set("current", items->front());
                         return Value::none();
                       }));
              return Value(std::move(obj));
            }));
  // joiner(sep): "" on the first call, sep afterwards.
  scope.set("joiner", Value::function("joiner", [](Evaluator&, CallArgs& args) {
              ArgReader a(args, "joiner", {"sep"});
              const std::string sep = a.has(0) ? to_str(a.get(0)) : ", ";
              auto used = std::make_shared<bool>(false);
              return Value::function("joiner", [sep, used](Evaluator&, CallArgs&) {
                return Value(std::exchange(*used, true) ? sep : std::string());
              });
            }));
  scope.set("raise_exception", Value::function("raise_exception", [](Evaluator&, CallArgs& args) {
              std::string message = args.args.empty() ? "" : to_str(args.args[0]);
              throw TemplateRaised(message, args.line);
              return Value();
            }));
  scope.set("strftime_now", Value::function("strftime_now", [](Evaluator& ev, CallArgs& args) {
              ArgReader a(args, "strftime_now", {"format"});
              if (!a.get(0).is_string()) fail("strftime_now() expects a format string");
              const auto now = ev.options().now.value_or(std::chrono::system_clock::now());
              const std::time_t t = std::chrono::system_clock::to_time_t(now);
              std::tm tm{};
              localtime_r(&t, &tm);
              char buf[512];
              const size_t n = std::strftime(buf, sizeof(buf), a.get(0).str().c_str(), &tm);
              return Value(std::string(buf, n));
            }));
}

}  // namespace pagoda::tmpl
