// Jinja2's built-in filters, plus Hugging Face's tojson (json.dumps with ensure_ascii=False and no
// HTML escaping). Adding a filter: one branch in apply_filter, one case in the unit tests.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>

#include "template/builtins.h"
#include "template/error.h"
#include "template/evaluator.h"
#include "template/numbers.h"

namespace pagoda::tmpl {

namespace {

[[noreturn]] void fail(const std::string& message) { throw TemplateError(message, 0); }

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Kind::kList:
      if (v.list().is_generator) fail("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().size());
    default:
      fail("object of type '" + v.type_name() + "' has no len()");
  }
}

// Jinja2's attribute paths: "a.b.0" walks items and attributes.
Value get_path(const Value& v, const Value& path) {
  if (path.is_int()) return get_item(v, path);
  Value cur = v;
  const std::string p = to_str(path);
  size_t start = 0;
  while (true) {
    const size_t dot = p.find('.', start);
    const std::string part =
        p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        })) {
      const std::optional<int64_t> index = parse_int(part);
      if (!index) fail("attribute index out of range: " + part);
      cur = get_item(cur, Value(*index));
    } else {
      if (cur.is_undefined()) return cur;
      cur = get_item(cur, Value(part));
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::string lower_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Sort key: strings lower-cased unless case-sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(lower_ascii(v.str()));
  return v;
}

// Python's round(x, ndigits): half to even on the exact binary value.
double python_round(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits == 0) return std::nearbyint(x);
  if (digits > 0) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::min<int64_t>(digits, 300)), x);
    return std::strtod(buf, nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-digits));
  return std::nearbyint(x / scale) * scale;
}

std::string jinja_title(const std::string& s) {
  // Words start after whitespace, '-', '(', '{', '[' or '<'; the rest of a word is lower-cased.
  std::string out = s;
  bool word_start = true;
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      word_start = true;
      continue;
    }
    c = static_cast<char>(word_start ? std::toupper(u) : std::tolower(u));
    word_start = false;
  }
  return out;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

JsonDumpOptions json_options(const ArgReader& a) {
  JsonDumpOptions o;
  o.ensure_ascii = a.get(0).truthy();
  const Value& indent = a.get(1);
  if (indent.is_int()) {
    o.indent = static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
  } else if (indent.is_string()) {
    o.indent_str = indent.str();
    if (o.indent_str.empty()) o.indent = 0;
  } else if (!indent.is_none() && !indent.is_undefined()) {
    fail("tojson indent must be an int or a string");
  }
  const Value& seps = a.get(2);
  if (seps.is_list() && seps.items().size() == 2) {
    o.item_separator = to_str(seps.items()[0]);
    o.key_separator = to_str(seps.items()[1]);
    if (o.item_separator.empty()) o.item_separator = "\x01";  // explicit empty separator
  }
  o.sort_keys = a.get(3).truthy();
  return o;
}

// map/select/reject/selectattr/rejectattr share their argument handling: the remaining
// positional arguments after the filter or test name go to that filter or test.
CallArgs rest_args(const CallArgs& args, size_t skip) {
  CallArgs rest;
  for (size_t i = skip; i < args.args.size(); ++i) rest.args.push_back(args.args[i]);
  return rest;
}

}  // namespace

Value apply_filter(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args) {
  if (name == "tojson") {
    ArgReader a(args, name, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonDumpOptions o = json_options(a);
    std::string out = to_json(v, o);
    if (o.item_separator == "\x01") {
      out.erase(std::remove(out.begin(), out.end(), '\x01'), out.end());
    }
    ev.check_size(out.size());
    return Value(std::move(out));
  }
  if (name == "safe") return v.is_string() && v.is_safe() ? v : Value::safe_string(to_str(v));
  if (name == "string") return v.is_string() ? v : Value(to_str(v));
  if (name == "e" || name == "escape" || name == "forceescape") {
    if (v.is_safe() && name != "forceescape") return v;
    return Value::safe_string(html_escape(to_str(v)));
  }
  if (name == "trim") {
    ArgReader a(args, name, {"chars"});
    CallArgs strip_args;
    if (a.has(0)) strip_args.args.push_back(a.get(0));
    return ev.call(get_attr(v.is_string() ? v : Value(to_str(v)), "strip"), strip_args);
  }
  if (name == "upper" || name == "lower" || name == "capitalize") {
    CallArgs none;
    return ev.call(get_attr(v.is_string() ? v : Value(to_str(v)), name), none);
  }
  if (name == "title") return Value(jinja_title(to_str(v)));
  if (name == "length" || name == "count") return Value(length_of(v));
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    ArgReader a(args, name, {"d", "attribute"});
    const std::string sep = a.has(0) ? to_str(a.get(0)) : "";
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += to_str(a.has(1) ? get_path(item, a.get(1)) : item);
      ev.check_size(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "default" || name == "d") {
    ArgReader a(args, name, {"default_value", "boolean"});
    const bool use_default = v.is_undefined() || (a.get(1).truthy() && !v.truthy());
    if (!use_default) return v;
    return a.has(0) ? a.get(0) : Value(std::string());
  }
  if (name == "replace") {
    ArgReader a(args, name, {"old", "new", "count"});
    CallArgs replace_args;
    replace_args.args = {Value(to_str(a.get(0))), Value(to_str(a.get(1)))};
    if (a.has(2) && !a.get(2).is_none()) replace_args.args.push_back(a.get(2));
    Value out = ev.call(get_attr(Value(to_str(v)), "replace"), replace_args);
    ev.check_size(out.str().size());
    return out;
  }
  if (name == "int") {
    ArgReader a(args, name, {"default", "base"});
    int64_t n;
    if (to_int(v, n)) return Value(n);
    return a.has(0) ? a.get(0) : Value(int64_t{0});
  }
  if (name == "float") {
    ArgReader a(args, name, {"default"});
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string()) {
      const std::string s = v.str();
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (end != s.c_str() &&
          std::all_of(static_cast<const char*>(end), s.c_str() + s.size(),
                      [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
        return Value(d);
      }
    }
    return a.has(0) ? a.get(0) : Value(0.0);
  }
  if (name == "list") return Value::list(iterate(v));
  if (name == "items") {
    if (v.is_undefined()) return Value::generator({});
    if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
    CallArgs none;
    return Value::generator(ev.call(get_attr(v, "items"), none).items());
  }
  if (name == "dictsort") {
    ArgReader a(args, name, {"case_sensitive", "by", "reverse"});
    if (!v.is_dict()) fail("dictsort expects a mapping");
    const bool by_value = a.has(1) && to_str(a.get(1)) == "value";
    std::vector<Value> pairs;
    for (const auto& [key, value] : v.dict().items())
      pairs.push_back(Value::list({key, value}, true));
    const bool cs = a.get(0).truthy();
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
      const size_t k = by_value ? 1 : 0;
      return compare_values(sort_key(x.items()[k], cs), sort_key(y.items()[k], cs)) < 0;
    });
    if (a.get(2).truthy()) std::reverse(pairs.begin(), pairs.end());
    return Value::list(std::move(pairs));
  }
  if (name == "sort") {
    ArgReader a(args, name, {"reverse", "case_sensitive", "attribute"});
    std::vector<Value> items = iterate(v);
    const bool cs = a.get(1).truthy();
    const bool reverse = a.get(0).truthy();
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      Value kx = sort_key(a.has(2) ? get_path(x, a.get(2)) : x, cs);
      Value ky = sort_key(a.has(2) ? get_path(y, a.get(2)) : y, cs);
      return reverse ? compare_values(ky, kx) < 0 : compare_values(kx, ky) < 0;
    });
    return Value::list(std::move(items));
  }
  if (name == "unique") {
    ArgReader a(args, name, {"case_sensitive", "attribute"});
    std::vector<Value> seen, out;
    for (const Value& item : iterate(v)) {
      Value key = sort_key(a.has(1) ? get_path(item, a.get(1)) : item, a.get(0).truthy());
      if (std::none_of(seen.begin(), seen.end(),
                       [&](const Value& s) { return values_equal(s, key); })) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value::generator(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto chars = utf8_chars(v.str());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value(std::move(out));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::generator(std::move(items));
  }
  if (name == "map") {
    std::vector<Value> out;
    if (!v.truthy()) return Value::generator({});  // Jinja2 maps over nothing for falsy input
    const bool by_attribute = args.args.empty();
    Value attribute, fallback;
    for (const auto& [key, value] : args.kwargs) {
      if (key == "attribute")
        attribute = value;
      else if (key == "default")
        fallback = value;
      else if (!by_attribute)
        continue;
      else
        fail("map() got an unexpected keyword argument '" + key + "'");
    }
    for (const Value& item : iterate(v)) {
      if (by_attribute) {
        Value got = get_path(item, attribute);
        out.push_back(got.is_undefined() && !fallback.is_undefined() ? fallback : got);
      } else {
        CallArgs rest = rest_args(args, 1);
        out.push_back(apply_filter(ev, to_str(args.args[0]), item, rest));
      }
    }
    return Value::generator(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "select" || name == "selectattr";
    const size_t test_pos = by_attr ? 1 : 0;
    if (by_attr && args.args.empty()) fail(name + "() needs an attribute");
    std::vector<Value> out;
    if (!v.truthy()) return Value::generator({});  // as Jinja2: falsy input (None) selects nothing
    for (const Value& item : iterate(v)) {
      Value subject = by_attr ? get_path(item, args.args[0]) : item;
      bool ok;
      if (args.args.size() > test_pos) {
        CallArgs rest = rest_args(args, test_pos + 1);
        ok = apply_test(ev, to_str(args.args[test_pos]), subject, rest);
      } else {
        ok = subject.truthy();
      }
      if (ok == keep_if) out.push_back(item);
    }
    return Value::generator(std::move(out));
  }
  if (name == "indent") {
    ArgReader a(args, name, {"width", "first", "blank"});
    std::string pad = a.has(0) && a.get(0).is_string()
                          ? a.get(0).str()
                          : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                            a.has(0) ? a.get(0).as_int() : 4, 0, 1024)),
                                        ' ');
    std::vector<std::string> lines = split_lines(to_str(v) + "\n");
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n";
      const bool indent_line =
          i == 0 ? a.get(1).truthy() : (a.get(2).truthy() || !lines[i].empty());
      if (indent_line) out += pad;
      out += lines[i];
      ev.check_size(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "round") {
    ArgReader a(args, name, {"precision", "method"});
    if (!v.is_number()) fail("round filter expects a number");
    const int64_t precision = a.has(0) ? a.get(0).as_int() : 0;
    const std::string method = a.has(1) ? to_str(a.get(1)) : "common";
    if (method == "common") {
      if (v.is_int() || v.is_bool()) return Value(v.as_int());
      return Value(python_round(v.as_double(), precision));
    }
    const double scale = std::pow(10.0, static_cast<double>(precision));
    if (method == "ceil") return Value(std::ceil(v.as_double() * scale) / scale);
    if (method == "floor") return Value(std::floor(v.as_double() * scale) / scale);
    fail("method must be common, ceil or floor");
  }
  if (name == "abs") {
    if (v.is_float()) return Value(std::fabs(v.as_double()));
    if (v.is_int() || v.is_bool()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    fail("bad operand type for abs(): '" + v.type_name() + "'");
  }
  if (name == "sum") {
    ArgReader a(args, name, {"attribute", "start"});
    Value total = a.has(1) ? a.get(1) : Value(int64_t{0});
    for (const Value& item : iterate(v))
      total = binary_op(ev, "+", total, a.has(0) ? get_path(item, a.get(0)) : item);
    return total;
  }
  if (name == "min" || name == "max") {
    ArgReader a(args, name, {"case_sensitive", "attribute"});
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      Value ki = sort_key(a.has(1) ? get_path(items[i], a.get(1)) : items[i], a.get(0).truthy());
      Value kb =
          sort_key(a.has(1) ? get_path(items[best], a.get(1)) : items[best], a.get(0).truthy());
      const int c = compare_values(ki, kb);
      if (name == "min" ? c < 0 : c > 0) best = i;
    }
    return items[best];
  }
  if (name == "batch") {
    ArgReader a(args, name, {"linecount", "fill_with"});
    const int64_t size = a.get(0).is_int() ? a.get(0).as_int() : 0;
    if (size <= 0) fail("batch size must be positive");
    std::vector<Value> out, row;
    for (const Value& item : iterate(v)) {
      row.push_back(item);
      if (static_cast<int64_t>(row.size()) == size)
        out.push_back(Value::list(std::exchange(row, {})));
    }
    if (!row.empty()) {
      if (a.has(1)) {
        while (static_cast<int64_t>(row.size()) < size) row.push_back(a.get(1));
      }
      out.push_back(Value::list(std::move(row)));
    }
    return Value::generator(std::move(out));
  }
  if (name == "wordcount") {
    CallArgs none;
    return Value(
        static_cast<int64_t>(ev.call(get_attr(Value(to_str(v)), "split"), none).items().size()));
  }
  if (name == "center") {
    ArgReader a(args, name, {"width"});
    CallArgs center_args;
    center_args.args.push_back(a.has(0) ? a.get(0) : Value(int64_t{80}));
    return ev.call(get_attr(Value(to_str(v)), "center"), center_args);
  }
  if (name == "attr") {
    ArgReader a(args, name, {"name"});
    return get_attr(v, to_str(a.get(0)));
  }
  if (name == "format") {
    if (!args.kwargs.empty()) {
      auto d = std::make_shared<Dict>();
      for (const auto& [key, value] : args.kwargs) d->set(key, value);
      return Value(percent_format(to_str(v), Value(std::move(d))));
    }
    return Value(percent_format(to_str(v), Value::list(args.args, true)));
  }
  if (name == "pprint") return Value(to_repr(v));
  fail("No filter named '" + name + "' found.");
}

bool to_int(const Value& v, int64_t& out) {
  if (v.is_int() || v.is_bool()) {
    out = v.as_int();
    return true;
  }
  if (v.is_float()) {
    const double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return false;
    out = static_cast<int64_t>(d);
    return true;
  }
  if (v.is_string()) {
    std::string s = v.str();
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    const size_t b = s.find_first_not_of(" \t\n\r\f\v");
    if (b == std::string::npos) return false;
    const size_t e = s.find_last_not_of(" \t\n\r\f\v");
    s = s.substr(b, e - b + 1);
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(s.c_str(), &end, 10);
    if (errno == 0 && end == s.c_str() + s.size()) {
      out = n;
      return true;
    }
    const double d = std::strtod(s.c_str(), &end);
    if (end == s.c_str() + s.size()) return to_int(Value(d), out);
  }
  return false;
}

}  // namespace pagoda::tmpl
