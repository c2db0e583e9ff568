#pragma once
// Filters, tests, Python methods and operators: the built-in vocabulary templates use. Each
// lives in its own file (filters.cc, tests.cc, methods.cc, operators.cc); this header is the
// evaluator's view of them.
#include <cstdint>
#include <string>
#include <vector>

#include "template/value.h"

namespace pagoda::tmpl {

class Evaluator;

/// Widest padding a format spec or str.center/ljust/rjust/zfill may ask for: a hostile template
/// must not make us allocate gigabytes before the output limit is checked.
inline constexpr int64_t kMaxPadWidth = int64_t{64} << 20;
/// Throws TemplateError when width exceeds kMaxPadWidth.
void check_pad_width(int64_t width);

/// Binds positional-or-keyword arguments to parameter names, Python style.
class ArgReader {
 public:
  ArgReader(const CallArgs& args, const std::string& function, std::vector<std::string> names);
  /// The argument for parameter i, or undefined when it was not given.
  [[nodiscard]] const Value& get(size_t i) const { return values_[i]; }
  [[nodiscard]] bool has(size_t i) const { return given_[i]; }
  [[nodiscard]] const Value& get_or(size_t i, const Value& fallback) const {
    return given_[i] ? values_[i] : fallback;
  }

 private:
  std::vector<Value> values_;
  std::vector<bool> given_;
};

/// Applies filter `name` to value; throws for unknown filters.
[[nodiscard]] Value apply_filter(Evaluator& ev, const std::string& name, const Value& value,
                                 CallArgs& args);
/// Whether a filter / test of that name exists (the `filter` and `test` tests).
[[nodiscard]] bool has_filter(const std::string& name);
[[nodiscard]] bool has_test(const std::string& name);
/// Applies test `name` to value; throws for unknown tests.
[[nodiscard]] bool apply_test(Evaluator& ev, const std::string& name, const Value& value,
                              CallArgs& args);
/// Jinja2's getattr (obj.name): Python attribute (methods) first, then item.
[[nodiscard]] Value get_attr(const Value& obj, const std::string& name);
/// Jinja2's getitem (obj[key]): item first, then attribute.
[[nodiscard]] Value get_item(const Value& obj, const Value& key);
/// obj[start:stop:step] on lists, tuples and strings (by code point).
[[nodiscard]] Value slice_value(const Value& obj, const Value& start, const Value& stop,
                                const Value& step);
/// A binary operator: + - * / // % ** ~ .
[[nodiscard]] Value binary_op(Evaluator& ev, const std::string& op, const Value& a, const Value& b);
/// `a in b`.
[[nodiscard]] bool contains(const Value& container, const Value& item);
/// Python's printf-style formatting: fmt % args.
[[nodiscard]] std::string percent_format(const std::string& fmt, const Value& args);
/// Python's str.format.
[[nodiscard]] std::string brace_format(const std::string& fmt, const CallArgs& args);
/// Converts to int like Jinja2's int filter; returns false if impossible.
bool to_int(const Value& v, int64_t& out);

}  // namespace pagoda::tmpl
