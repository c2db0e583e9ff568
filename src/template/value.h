#pragma once
// The values a template computes with, modelled on the Python objects Jinja2 sees: undefined,
// None, bool, int, float, str, list/tuple, dict (insertion-ordered, string keys), namespace and
// callables. Containers are shared by pointer, as Python shares objects; only namespaces are
// mutated after construction (Hugging Face renders in an immutable sandbox).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagoda::tmpl {

class Value;
class Evaluator;
struct CallArgs;

/// A list, a tuple, or the generator that filters such as map and select return in Jinja2
/// (iterable, but with no len(), no indexing and no JSON form).
struct List {
  std::vector<Value> items;
  bool is_tuple = false;
  bool is_generator = false;
  /// Field names of a named tuple (groupby's (grouper, list)): attribute i is items[i].
  std::vector<std::string> fields;
};

/// An insertion-ordered dict with hashable keys (str, int, float, bool, None, tuple), as
/// Python's; also the storage of namespace() objects.
class Dict {
 public:
  [[nodiscard]] const Value* find(std::string_view key) const;
  [[nodiscard]] const Value* find(const std::string& key) const {
    return find(std::string_view(key));
  }
  [[nodiscard]] const Value* find(const char* key) const { return find(std::string_view(key)); }
  /// nullptr when absent or when the key is unhashable.
  [[nodiscard]] const Value* find(const Value& key) const;
  void set(const std::string& key, Value value);
  void set(const char* key, Value value);
  /// Throws TemplateError for unhashable keys (lists, dicts).
  void set(const Value& key, Value value);
  [[nodiscard]] const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  [[nodiscard]] size_t size() const;  // defined after Value is complete (clang requires it)
  void clear();

  bool is_namespace = false;

 private:
  std::vector<std::pair<Value, Value>> items_;
  std::unordered_map<std::string, size_t> index_;
};

/// A callable: a builtin global, a bound method, a macro or a loop helper.
struct Function {
  std::string name;
  std::function<Value(Evaluator&, CallArgs&)> call;
  /// Attributes of callable objects (a for loop's `loop`: loop.index and loop(children)).
  std::shared_ptr<Dict> attrs;
};

/// One template value: cheap to copy (strings and containers are shared).
class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() : kind_(Kind::kUndefined) {}
  static Value undefined(std::string hint = {});
  static Value none();
  Value(bool b) : kind_(Kind::kBool), data_(b) {}     // NOLINT
  Value(int v) : Value(static_cast<int64_t>(v)) {}    // NOLINT
  Value(int64_t v) : kind_(Kind::kInt), data_(v) {}   // NOLINT
  Value(double v) : kind_(Kind::kFloat), data_(v) {}  // NOLINT
  Value(std::string s);                               // NOLINT
  Value(const char* s) : Value(std::string(s)) {}     // NOLINT
  Value(std::shared_ptr<const std::string> s)
      : kind_(Kind::kString), data_(std::move(s)) {}                                   // NOLINT
  Value(std::shared_ptr<List> l) : kind_(Kind::kList), data_(std::move(l)) {}          // NOLINT
  Value(std::shared_ptr<Dict> d) : kind_(Kind::kDict), data_(std::move(d)) {}          // NOLINT
  Value(std::shared_ptr<Function> f) : kind_(Kind::kFunction), data_(std::move(f)) {}  // NOLINT
  /// A markupsafe Markup string (from |safe or |escape): `+` with a plain string HTML-escapes
  /// the plain one, as Jinja2 does even with autoescaping off.
  static Value safe_string(std::string s);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value generator(std::vector<Value> items);
  static Value function(std::string name, std::function<Value(Evaluator&, CallArgs&)> fn);

  [[nodiscard]] Kind kind() const { return kind_; }
  [[nodiscard]] bool is_undefined() const { return kind_ == Kind::kUndefined; }
  [[nodiscard]] bool is_none() const { return kind_ == Kind::kNone; }
  [[nodiscard]] bool is_bool() const { return kind_ == Kind::kBool; }
  [[nodiscard]] bool is_int() const { return kind_ == Kind::kInt; }
  [[nodiscard]] bool is_float() const { return kind_ == Kind::kFloat; }
  /// int, float or bool: Python's numbers (bool is an int subclass).
  [[nodiscard]] bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  [[nodiscard]] bool is_string() const { return kind_ == Kind::kString; }
  [[nodiscard]] bool is_safe() const { return safe_; }
  [[nodiscard]] bool is_list() const { return kind_ == Kind::kList; }
  [[nodiscard]] bool is_dict() const { return kind_ == Kind::kDict; }
  [[nodiscard]] bool is_function() const { return kind_ == Kind::kFunction; }

  [[nodiscard]] bool as_bool() const { return std::get<bool>(data_); }
  [[nodiscard]] int64_t as_int() const;    // int or bool
  [[nodiscard]] double as_double() const;  // any number
  [[nodiscard]] const std::string& str() const { return *std::get<StrPtr>(data_); }
  [[nodiscard]] const std::shared_ptr<const std::string>& str_ptr() const {
    return std::get<StrPtr>(data_);
  }
  [[nodiscard]] const List& list() const { return *std::get<std::shared_ptr<List>>(data_); }
  [[nodiscard]] const std::vector<Value>& items() const { return list().items; }
  [[nodiscard]] const Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  [[nodiscard]] Dict& mutable_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  [[nodiscard]] const std::shared_ptr<Dict>& dict_ptr() const {
    return std::get<std::shared_ptr<Dict>>(data_);
  }
  [[nodiscard]] const Function& fn() const { return *std::get<std::shared_ptr<Function>>(data_); }
  /// For undefined values: why it is undefined ("'x' is undefined"), for error messages.
  [[nodiscard]] std::string undefined_hint() const;

  /// Python's truth value (undefined is falsy).
  [[nodiscard]] bool truthy() const;
  /// Python's type name, as used in error messages ("int", "str", "NoneType").
  [[nodiscard]] std::string type_name() const;

 private:
  using StrPtr = std::shared_ptr<const std::string>;
  Kind kind_;
  bool safe_ = false;
  std::variant<std::monostate, bool, int64_t, double, StrPtr, std::shared_ptr<List>,
               std::shared_ptr<Dict>, std::shared_ptr<Function>>
      data_;
};

/// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
  int line = 0;
};

/// Throws the UndefinedError Jinja2 raises when an undefined value is used.
[[noreturn]] void fail_undefined(const Value& v);

/// markupsafe's escape of & < > " '.
[[nodiscard]] std::string html_escape(const std::string& s);
/// Python's str(): strings as they are, containers as repr, undefined as "".
[[nodiscard]] std::string to_str(const Value& v);
/// Python's repr().
[[nodiscard]] std::string to_repr(const Value& v);
/// Python's repr() of a float ("1.0", "1e+16", "0.30000000000000004").
[[nodiscard]] std::string float_repr(double d);

/// Options of HF's tojson filter (json.dumps with ensure_ascii=False by default).
struct JsonDumpOptions {
  bool ensure_ascii = false;
  int indent = -1;             // < 0: no indentation
  std::string indent_str;      // used instead of spaces when indent was a string
  std::string item_separator;  // empty: Python's default for the indent mode
  std::string key_separator;
  bool sort_keys = false;
};
/// Python's json.dumps of a value; undefined, functions and namespaces are not serialisable.
[[nodiscard]] std::string to_json(const Value& v, const JsonDumpOptions& options);

/// Python's == between two values.
[[nodiscard]] bool values_equal(const Value& a, const Value& b);
/// Python's <, raising TypeError for unorderable types; returns -1, 0 or 1.
[[nodiscard]] int compare_values(const Value& a, const Value& b, const char* op = "<");

/// Converts JSON (insertion-ordered) to a value; depth-limited against hostile inputs.
[[nodiscard]] Value from_json(const nlohmann::ordered_json& j);

/// Number of Unicode code points of UTF-8 text.
[[nodiscard]] size_t utf8_length(std::string_view s);
/// Splits UTF-8 text into code points, each as its own string.
[[nodiscard]] std::vector<std::string> utf8_chars(std::string_view s);

/// Deepest nesting allowed for values (lists in lists ...) when printing, serialising, comparing.
inline constexpr int kMaxValueDepth = 256;

inline size_t Dict::size() const { return items_.size(); }

}  // namespace pagoda::tmpl
