// Attribute and item access, and the Python methods of str, list and dict that templates call
// (message.content.strip(), tool.get('name'), text.split('\n') ...). Methods that would mutate a
// list or dict are refused, as Hugging Face's immutable sandbox refuses them.
#include <algorithm>
#include <cctype>
#include <set>

#include "template/builtins.h"
#include "template/error.h"
#include "template/evaluator.h"
#include "template/unicode.h"

namespace pagoda::tmpl {

namespace {

[[noreturn]] void fail(const std::string& message) { throw TemplateError(message, 0); }

bool is_py_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
         (c >= 0x1c && c <= 0x1f);
}

const std::string& arg_str(const Value& v, const char* method) {
  if (!v.is_string()) {
    fail(std::string(method) + "() argument must be str, not " + v.type_name());
  }
  return v.str();
}

// strip/lstrip/rstrip with Python's optional character set (None: Unicode whitespace), by code
// point.
std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right) {
  const std::vector<uint32_t> cps = utf8_decode(s);
  std::vector<uint32_t> set;
  const bool whitespace = chars.is_none() || chars.is_undefined();
  if (!whitespace) set = utf8_decode(arg_str(chars, "strip"));
  auto strip_this = [&](uint32_t c) {
    if (whitespace) return is_unicode_space(c);
    return std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_this(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_this(cps[e - 1])) --e;
  }
  std::string out;
  for (size_t i = b; i < e; ++i) utf8_append(out, cps[i]);
  return out;
}

// Byte length of the Unicode whitespace code point at s[i], or 0.
size_t space_at(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return is_py_space(s[i]) ? 1 : 0;
  const size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
  if (i + len > s.size()) return 0;
  const std::vector<uint32_t> cp = utf8_decode(std::string_view(s).substr(i, len));
  return cp.size() == 1 && is_unicode_space(cp[0]) ? len : 0;
}

std::vector<Value> split_string(const std::string& s, const Value& sep_v, int64_t maxsplit,
                                bool from_right) {
  std::vector<std::string> parts;
  if (sep_v.is_none() || sep_v.is_undefined()) {
    // Runs of whitespace separate; leading and trailing whitespace is dropped.
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t i = 0; i < s.size();) {
      for (size_t n; i < s.size() && (n = space_at(s, i)) > 0;) i += n;
      if (i >= s.size()) break;
      size_t j = i;
      while (j < s.size() && space_at(s, j) == 0) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto [b, e] : words) parts.push_back(s.substr(b, e - b));
    } else if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k)
        parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
      std::string rest = s.substr(words[maxsplit].first);
      parts.push_back(strip_chars(rest, Value::none(), false, true));
    } else {
      const size_t keep = words.size() - static_cast<size_t>(maxsplit);
      parts.push_back(strip_chars(s.substr(0, words[keep - 1].second), Value::none(), true, false));
      for (size_t k = keep; k < words.size(); ++k)
        parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
    }
  } else {
    const std::string& sep = arg_str(sep_v, "split");
    if (sep.empty()) fail("empty separator");
    if (!from_right) {
      size_t start = 0;
      int64_t splits = 0;
      while (maxsplit < 0 || splits < maxsplit) {
        const size_t at = s.find(sep, start);
        if (at == std::string::npos) break;
        parts.push_back(s.substr(start, at - start));
        start = at + sep.size();
        ++splits;
      }
      parts.push_back(s.substr(start));
    } else {
      size_t end = s.size();
      int64_t splits = 0;
      std::vector<std::string> reversed;
      while (maxsplit < 0 || splits < maxsplit) {
        if (end < sep.size()) break;
        const size_t at = s.rfind(sep, end - sep.size());
        if (at == std::string::npos) break;
        reversed.push_back(s.substr(at + sep.size(), end - at - sep.size()));
        end = at;
        ++splits;
      }
      reversed.push_back(s.substr(0, end));
      parts.assign(reversed.rbegin(), reversed.rend());
    }
  }
  std::vector<Value> out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

// s[start:end] by code points, Python's slice rules; offset receives the start in code points.
std::string code_point_range(const std::string& s, const ArgReader& a, size_t first,
                             int64_t& offset) {
  offset = 0;
  const bool has_start = a.has(first) && !a.get(first).is_none();
  const bool has_end = a.has(first + 1) && !a.get(first + 1).is_none();
  if (!has_start && !has_end) return s;
  const Value sliced = slice_value(Value(s), has_start ? a.get(first) : Value::none(),
                                   has_end ? a.get(first + 1) : Value::none(), Value::none());
  if (has_start) {
    const int64_t len = static_cast<int64_t>(utf8_length(s));
    int64_t start = a.get(first).as_int();
    if (start < 0) start += len;
    offset = std::clamp<int64_t>(start, 0, len);
  }
  return sliced.str();
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& v) {
    const std::string& a = arg_str(v, prefix ? "startswith" : "endswith");
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0
                  : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    return std::any_of(affix.items().begin(), affix.items().end(), one);
  }
  return one(affix);
}

int64_t find_in(const std::string& s, const std::string& sub, bool reverse) {
  const size_t at = reverse ? s.rfind(sub) : s.find(sub);
  if (at == std::string::npos) return -1;
  return static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, at)));
}

Value string_method(const Value& self, const std::string& name, CallArgs& args) {
  const std::string& s = self.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgReader a(args, name, {"chars"});
    return Value(strip_chars(s, a.get(0), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    ArgReader a(args, name, {"sep", "maxsplit"});
    const int64_t maxsplit = a.has(1) ? a.get(1).as_int() : -1;
    return Value::list(split_string(s, a.get(0), maxsplit, name == "rsplit"));
  }
  if (name == "splitlines") {
    std::vector<Value> lines;
    for (std::string& line : py_splitlines(s)) lines.emplace_back(std::move(line));
    return Value::list(std::move(lines));
  }
  if (name == "startswith" || name == "endswith") {
    ArgReader a(args, name, {"affix", "start", "end"});
    int64_t offset;
    return Value(affix_match(code_point_range(s, a, 1, offset), a.get(0), name == "startswith"));
  }
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower" || name == "casefold") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "swapcase") return Value(py_swapcase(s));
  if (name == "partition" || name == "rpartition") {
    ArgReader a(args, name, {"sep"});
    const std::string& sep = arg_str(a.get(0), name.c_str());
    if (sep.empty()) fail("empty separator");
    const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos) {
      return name == "partition" ? Value::list({self, Value(""), Value("")}, true)
                                 : Value::list({Value(""), Value(""), self}, true);
    }
    return Value::list({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))},
                       true);
  }
  if (name == "expandtabs") {
    ArgReader a(args, name, {"tabsize"});
    const int64_t tab = std::clamp<int64_t>(a.has(0) ? a.get(0).as_int() : 8, 0, 1024);
    std::string out;
    int64_t column = 0;
    for (const std::string& ch : utf8_chars(s)) {
      if (ch == "\t") {
        const int64_t pad = tab > 0 ? tab - column % tab : 0;
        out.append(static_cast<size_t>(pad), ' ');
        column += pad;
      } else {
        out += ch;
        column = ch == "\n" || ch == "\r" ? 0 : column + 1;
      }
    }
    return Value(std::move(out));
  }
  if (name == "replace") {
    ArgReader a(args, name, {"old", "new", "count"});
    const std::string& from = arg_str(a.get(0), "replace");
    const std::string& to = arg_str(a.get(1), "replace");
    int64_t count = a.has(2) ? a.get(2).as_int() : -1;
    std::string out;
    if (from.empty()) {
      // Python inserts `to` between every character (and at both ends).
      auto chars = utf8_chars(s);
      for (size_t i = 0; i <= chars.size(); ++i) {
        if (count < 0 || static_cast<int64_t>(i) < count) out += to;
        if (i < chars.size()) out += chars[i];
      }
      return Value(std::move(out));
    }
    size_t start = 0;
    while (count != 0) {
      const size_t at = s.find(from, start);
      if (at == std::string::npos) break;
      out.append(s, start, at - start);
      out += to;
      start = at + from.size();
      if (count > 0) --count;
    }
    out.append(s, start);
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    ArgReader a(args, name, {"sub", "start", "end"});
    int64_t offset;
    const std::string range = code_point_range(s, a, 1, offset);
    const int64_t at = find_in(range, arg_str(a.get(0), name.c_str()), name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) fail("substring not found");
    return Value(at < 0 ? at : at + offset);
  }
  if (name == "count") {
    ArgReader a(args, name, {"sub", "start", "end"});
    int64_t offset;
    const std::string range = code_point_range(s, a, 1, offset);
    const std::string& sub = arg_str(a.get(0), "count");
    if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(range) + 1));
    int64_t n = 0;
    for (size_t at = range.find(sub); at != std::string::npos;
         at = range.find(sub, at + sub.size())) {
      ++n;
    }
    return Value(n);
  }
  if (name == "join") {
    ArgReader a(args, name, {"iterable"});
    std::string out;
    bool first = true;
    for (const Value& v : iterate(a.get(0))) {
      if (!first) out += s;
      first = false;
      out += arg_str(v, "join");
    }
    return Value(std::move(out));
  }
  if (name == "format") return Value(brace_format(s, args));
  if (name == "removeprefix" || name == "removesuffix") {
    ArgReader a(args, name, {"affix"});
    const std::string& affix = arg_str(a.get(0), name.c_str());
    if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0)
      return Value(s.substr(affix.size()));
    if (name == "removesuffix" && affix.size() <= s.size() &&
        s.compare(s.size() - affix.size(), affix.size(), affix) == 0) {
      return Value(s.substr(0, s.size() - affix.size()));
    }
    return self;
  }
  auto all_of = [&](int (*pred)(int)) {
    return Value(!s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
      return pred(static_cast<unsigned char>(c)) != 0;
    }));
  };
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return all_of(::isdigit);
  if (name == "isalpha") return all_of(::isalpha);
  if (name == "isalnum") return all_of(::isalnum);
  if (name == "isspace") {
    const std::vector<uint32_t> cps = utf8_decode(s);
    return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), is_unicode_space));
  }
  if (name == "isidentifier") {
    return Value(!s.empty() && !std::isdigit(static_cast<unsigned char>(s[0])) &&
                 std::all_of(s.begin(), s.end(), [](char c) {
                   return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                          static_cast<unsigned char>(c) >= 0x80;
                 }));
  }
  if (name == "islower" || name == "isupper" || name == "istitle") {
    bool cased = false, ok = true, prev_cased = false;
    for (uint32_t cp : utf8_decode(s)) {
      const bool is_upper = unicode_lower(cp) != cp;
      const bool is_lower = is_unicode_cased(cp) && !is_upper;
      if (name == "istitle") {
        if ((is_upper && prev_cased) || (is_lower && !prev_cased)) ok = false;
        if (is_upper) cased = true;
        prev_cased = is_upper || is_lower;
        continue;
      }
      if (is_upper || is_lower) cased = true;
      if (name == "islower" ? is_upper : is_lower) ok = false;
    }
    return Value(cased && ok);
  }
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    ArgReader a(args, name, {"width", "fillchar"});
    const int64_t width = a.get(0).as_int();
    check_pad_width(width);
    const int64_t len = static_cast<int64_t>(utf8_length(s));
    if (width <= len) return self;
    const std::string fill = name == "zfill" ? "0"
                             : a.has(1)      ? arg_str(a.get(1), name.c_str())
                                             : " ";
    const int64_t pad = width - len;
    int64_t left = name == "center" ? pad / 2 + (pad & width & 1) : name == "ljust" ? 0 : pad;
    std::string out;
    for (int64_t i = 0; i < left; ++i) out += fill;
    out += s;
    for (int64_t i = left; i < pad; ++i) out += fill;
    if (name == "zfill" && !s.empty() && (s[0] == '-' || s[0] == '+')) {
      out.erase(out.find(s[0]), 1);  // the sign goes before the zeros
      out.insert(out.begin(), s[0]);
    }
    return Value(std::move(out));
  }
  fail("'str object' has no attribute '" + name + "'");
}

Value list_method(const Value& self, const std::string& name, CallArgs& args) {
  const auto& items = self.items();
  if (name == "index" || name == "count") {
    ArgReader a(args, name, {"value"});
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!values_equal(items[i], a.get(0))) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") fail(to_repr(a.get(0)) + " is not in list");
    return Value(n);
  }
  if (name == "copy") return Value::list(items, self.list().is_tuple);
  fail("'list object' has no attribute '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name, CallArgs& args) {
  const Dict& d = self.dict();
  if (name == "items" || name == "keys" || name == "values") {
    ArgReader a(args, name, {});
    std::vector<Value> out;
    for (const auto& [key, value] : d.items()) {
      if (name == "items") {
        out.push_back(Value::list({key, value}, true));
      } else {
        out.push_back(name == "keys" ? key : value);
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    ArgReader a(args, name, {"key", "default"});
    if (const Value* v = d.find(a.get(0))) return *v;
    return a.has(1) ? a.get(1) : Value::none();
  }
  if (name == "copy") {
    auto copy = std::make_shared<Dict>();
    for (const auto& [key, value] : d.items()) copy->set(key, value);
    return Value(std::move(copy));
  }
  fail("'dict object' has no attribute '" + name + "'");
}

const std::set<std::string>& string_methods() {
  static const std::set<std::string> names = {
      "strip",      "lstrip",     "rstrip",     "split",   "rsplit",       "splitlines",
      "startswith", "endswith",   "upper",      "lower",   "casefold",     "title",
      "capitalize", "swapcase",   "replace",    "find",    "rfind",        "index",
      "rindex",     "count",      "join",       "format",  "removeprefix", "removesuffix",
      "isdigit",    "isnumeric",  "isdecimal",  "isalpha", "isalnum",      "isspace",
      "islower",    "isupper",    "center",     "ljust",   "rjust",        "zfill",
      "partition",  "rpartition", "expandtabs", "istitle", "isidentifier"};
  return names;
}

Value bind_method(const Value& self, const std::string& name,
                  Value (*method)(const Value&, const std::string&, CallArgs&)) {
  return Value::function(name, [self, name, method](Evaluator&, CallArgs& args) {
    Value result = method(self, name, args);
    // Markup's text-to-text methods return Markup.
    if (self.is_safe() && result.is_string() && !result.is_safe() && name != "format" &&
        name != "join" && name != "replace") {
      return Value::safe_string(result.str());
    }
    return result;
  });
}

std::string object_type(const Value& v) { return v.is_none() ? "None" : v.type_name() + " object"; }

// Jinja2's wording: "'dict object' has no attribute 'x'" for string keys, "list object has no
// element 0" for the others.
Value missing_item(const Value& obj, const Value& key) {
  if (key.is_string()) {
    return Value::undefined(std::string("'") + object_type(obj) + "' has no attribute " +
                            to_repr(key));
  }
  return Value::undefined(object_type(obj) + " has no element " + to_repr(key));
}

}  // namespace

ArgReader::ArgReader(const CallArgs& args, const std::string& function,
                     std::vector<std::string> names)
    : values_(names.size()), given_(names.size(), false) {
  if (args.args.size() > names.size()) {
    fail(function + "() takes at most " + std::to_string(names.size()) + " argument(s) (" +
         std::to_string(args.args.size()) + " given)");
  }
  for (size_t i = 0; i < args.args.size(); ++i) {
    values_[i] = args.args[i];
    given_[i] = true;
  }
  for (const auto& [key, value] : args.kwargs) {
    auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) fail(function + "() got an unexpected keyword argument '" + key + "'");
    const size_t i = static_cast<size_t>(it - names.begin());
    if (given_[i]) fail(function + "() got multiple values for argument '" + key + "'");
    values_[i] = value;
    given_[i] = true;
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  static const std::set<std::string> kUnsafeList = {"append", "pop",   "extend", "insert",
                                                    "remove", "clear", "sort",   "reverse"};
  static const std::set<std::string> kUnsafeDict = {"update", "pop", "popitem", "setdefault",
                                                    "clear"};
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      fail_undefined(obj);
    case Value::Kind::kDict: {
      const Dict& d = obj.dict();
      if (!d.is_namespace) {
        if (name == "items" || name == "keys" || name == "values" || name == "get" ||
            name == "copy") {
          return bind_method(obj, name, dict_method);
        }
        if (kUnsafeDict.count(name) != 0) {
          fail("access to attribute '" + name + "' of 'dict' object is unsafe.");
        }
      }
      if (const Value* v = d.find(name)) return *v;
      break;
    }
    case Value::Kind::kString:
      if (string_methods().count(name) != 0) return bind_method(obj, name, string_method);
      break;
    case Value::Kind::kList:
      for (size_t i = 0; i < obj.list().fields.size() && i < obj.items().size(); ++i) {
        if (obj.list().fields[i] == name) return obj.items()[i];
      }
      if (name == "index" || name == "count" || name == "copy") {
        return bind_method(obj, name, list_method);
      }
      if (!obj.list().is_tuple && kUnsafeList.count(name) != 0) {
        fail("access to attribute '" + name + "' of 'list' object is unsafe.");
      }
      break;
    case Value::Kind::kFunction:
      if (obj.fn().attrs) {
        if (const Value* v = obj.fn().attrs->find(name)) return *v;
      }
      break;
    default:
      break;
  }
  return Value::undefined(std::string("'") + object_type(obj) + "' has no attribute '" + name +
                          "'");
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      fail_undefined(obj);
    case Value::Kind::kDict:
      if (const Value* v = obj.dict().find(key)) return *v;
      if (key.is_string() && !obj.dict().is_namespace) return get_attr(obj, key.str());
      break;
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (obj.is_list() && obj.list().is_generator) break;
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        if (obj.is_string()) {
          auto chars = utf8_chars(obj.str());
          const int64_t n = static_cast<int64_t>(chars.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return Value(chars[static_cast<size_t>(i)]);
        } else {
          const int64_t n = static_cast<int64_t>(obj.items().size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
        }
        return missing_item(obj, key);
      }
      if (key.is_string()) return get_attr(obj, key.str());
      break;
    default:
      break;
  }
  return missing_item(obj, key);
}

}  // namespace pagoda::tmpl
