// Jinja2's tests ("x is defined", "n is divisibleby 3"), with Python's type semantics.
#include <cctype>
#include <set>

#include "template/builtins.h"
#include "template/error.h"
#include "template/evaluator.h"

namespace pagoda::tmpl {

namespace {

[[noreturn]] void fail(const std::string& message) { throw TemplateError(message, 0); }

bool is_lower_text(const std::string& s, bool upper) {
  bool cased = false;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      cased = true;
      if (upper ? std::islower(u) : std::isupper(u)) return false;
    }
  }
  return cased;
}

}  // namespace

bool apply_test(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args) {
  auto arg = [&](const char* param) {
    ArgReader a(args, name, {param});
    return a.get(0);
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.dict().is_namespace;
  if (name == "iterable") {
    return v.is_undefined() || v.is_string() || v.is_list() ||
           (v.is_dict() && !v.dict().is_namespace);
  }
  if (name == "sequence") {
    return v.is_undefined() || v.is_string() || (v.is_list() && !v.list().is_generator) ||
           (v.is_dict() && !v.dict().is_namespace);
  }
  if (name == "callable") return v.is_function();
  if (name == "lower") return v.is_string() && is_lower_text(v.str(), false);
  if (name == "upper") return v.is_string() && is_lower_text(v.str(), true);
  if (name == "escaped") return false;
  if (name == "even" || name == "odd") {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_int() && !v.is_bool()) fail("even/odd test needs an integer");
    return (v.as_int() % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    const Value d = arg("num");
    if (v.is_undefined()) fail_undefined(v);
    Value m = binary_op(ev, "%", v, d);
    return !m.truthy();
  }
  if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, arg("other"));
  if (name == "ne" || name == "!=") return !values_equal(v, arg("other"));
  if (name == "lt" || name == "lessthan" || name == "<")
    return compare_values(v, arg("other"), "<") < 0;
  if (name == "le" || name == "<=") return compare_values(v, arg("other"), "<=") <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">")
    return compare_values(v, arg("other"), ">") > 0;
  if (name == "ge" || name == ">=") return compare_values(v, arg("other"), ">=") >= 0;
  if (name == "in") return contains(arg("seq"), v);
  if (name == "sameas") {
    const Value other = arg("other");
    if (v.kind() != other.kind()) return false;
    if (v.is_list()) return &v.list() == &other.list();
    if (v.is_dict()) return v.dict_ptr() == other.dict_ptr();
    if (v.is_string()) return v.str_ptr() == other.str_ptr() || v.str() == other.str();
    return values_equal(v, other);
  }
  if (name == "filter") return v.is_string() && has_filter(v.str());
  if (name == "test") return v.is_string() && has_test(v.str());
  fail("No test named '" + name + "' found.");
}

bool has_test(const std::string& name) {
  static const std::set<std::string> kNames = {
      "boolean", "callable", "defined",  "divisibleby", "eq",       "equalto",     "escaped",
      "even",    "false",    "filter",   "float",       "ge",       "greaterthan", "gt",
      "in",      "integer",  "iterable", "le",          "lessthan", "lower",       "lt",
      "mapping", "ne",       "none",     "number",      "odd",      "sameas",      "sequence",
      "string",  "test",     "true",     "undefined",   "upper",    "==",          "!=",
      "<",       "<=",       ">",        ">="};
  return kNames.count(name) != 0;
}

}  // namespace pagoda::tmpl
