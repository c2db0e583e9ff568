#include "template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "template/error.h"

namespace pagoda::tmpl {

namespace {

[[noreturn]] void type_error(const std::string& message) { throw TemplateError(message, 0); }

void check_depth(int depth) {
  if (depth > kMaxValueDepth) {
    type_error("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
}

void append_repr(std::string& out, const Value& v, int depth);

void append_str_repr(std::string& out, const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out += quote;
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == quote) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
}

void append_repr(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::kString:
      append_str_repr(out, v.str());
      return;
    case Value::Kind::kList: {
      const List& l = v.list();
      if (l.is_generator) {
        out += "<generator object>";
        return;
      }
      out += l.is_tuple ? '(' : '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i > 0) out += ", ";
        append_repr(out, l.items[i], depth + 1);
      }
      if (l.is_tuple && l.items.size() == 1) out += ',';
      out += l.is_tuple ? ')' : ']';
      return;
    }
    case Value::Kind::kDict: {
      const Dict& d = v.dict();
      if (d.is_namespace) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const auto& [key, item] : d.items()) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, key, depth + 1);
        out += ": ";
        append_repr(out, item, depth + 1);
      }
      out += '}';
      if (d.is_namespace) out += '>';
      return;
    }
    case Value::Kind::kUndefined:
      out += "Undefined";
      return;
    default:
      out += to_str(v);
  }
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = s[i];
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    char buf[16];
    if (c < 0x20) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else if (c >= 0x80 && ensure_ascii) {
      // Decode one UTF-8 sequence and write it as \uXXXX (a surrogate pair above the BMP).
      uint32_t cp = 0;
      int extra = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
      cp = c & (0x3f >> extra);
      for (int k = 0; k < extra && i + 1 < s.size(); ++k) cp = (cp << 6) | (s[++i] & 0x3f);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xd800 + (cp >> 10),
                      0xdc00 + (cp & 0x3ff));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

// json.dumps turns int, float, bool and None keys into strings and refuses the rest.
std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key.str();
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kBool:
      return key.as_bool() ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(key.as_int());
    case Value::Kind::kFloat: {
      const double d = key.as_double();
      if (std::isnan(d)) return "NaN";
      if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
      return float_repr(d);
    }
    default:
      type_error("keys must be str, int, float, bool or None, not " + key.type_name());
  }
}

// The identity of a dict key, equal for keys Python considers equal (1, 1.0 and True).
bool hash_key(const Value& key, std::string& out, int depth = 0) {
  switch (key.kind()) {
    case Value::Kind::kString:
      out += 's';
      out += key.str();
      return true;
    case Value::Kind::kNone:
      out += 'N';
      return true;
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      out += 'i' + std::to_string(key.as_int());
      return true;
    case Value::Kind::kFloat: {
      const double d = key.as_double();
      if (std::floor(d) == d && std::fabs(d) < 9e18) {
        out += 'i' + std::to_string(static_cast<int64_t>(d));
      } else {
        out += 'f' + float_repr(d);
      }
      return true;
    }
    case Value::Kind::kList:
      if (!key.list().is_tuple || depth > kMaxValueDepth) return false;
      out += "t" + std::to_string(key.items().size()) + "(";
      for (const auto& item : key.items()) {
        std::string part;
        if (!hash_key(item, part, depth + 1)) return false;
        out += std::to_string(part.size()) + ":" + part;
      }
      out += ')';
      return true;
    default:
      return false;
  }
}

void append_json(std::string& out, const Value& v, const JsonDumpOptions& o, int depth) {
  check_depth(depth);
  const bool indented = o.indent >= 0 || !o.indent_str.empty();
  const std::string item_sep = !o.item_separator.empty() ? o.item_separator : indented ? "," : ", ";
  const std::string key_sep = !o.key_separator.empty() ? o.key_separator : ": ";
  auto newline = [&](int level) {
    if (!indented) return;
    out += '\n';
    for (int i = 0; i < level; ++i) {
      if (!o.indent_str.empty()) {
        out += o.indent_str;
      } else {
        out.append(static_cast<size_t>(o.indent), ' ');
      }
    }
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      const double d = v.as_double();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        out += float_repr(d);
      }
      return;
    }
    case Value::Kind::kString:
      append_json_string(out, v.str(), o.ensure_ascii);
      return;
    case Value::Kind::kList: {
      if (v.list().is_generator) type_error("Object of type generator is not JSON serializable");
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        append_json(out, items[i], o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      const Dict& d = v.dict();
      if (d.is_namespace) type_error("Object of type Namespace is not JSON serializable");
      if (d.size() == 0) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& entry : d.items()) entries.push_back(&entry);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return compare_values(a->first, b->first) < 0; });
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        append_json_string(out, json_key(entries[i]->first), o.ensure_ascii);
        out += key_sep;
        append_json(out, entries[i]->second, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::kUndefined:
      type_error("Object of type Undefined is not JSON serializable");
    case Value::Kind::kFunction:
      type_error("Object of type function is not JSON serializable");
  }
}

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  check_depth(depth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_at(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (const auto& [key, item] : j.items()) d->set(key, from_json_at(item, depth + 1));
      return Value(std::move(d));
    }
    default:
      type_error("unsupported JSON value (binary)");
  }
}

}  // namespace

const Value* Dict::find(std::string_view key) const {
  std::string h = "s";
  h += key;
  auto it = index_.find(h);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Value* Dict::find(const Value& key) const {
  std::string h;
  if (!hash_key(key, h)) return nullptr;
  auto it = index_.find(h);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void Dict::set(const std::string& key, Value value) { set(Value(key), std::move(value)); }

void Dict::set(const char* key, Value value) { set(Value(key), std::move(value)); }

void Dict::set(const Value& key, Value value) {
  std::string h;
  if (!hash_key(key, h)) type_error("unhashable type: '" + key.type_name() + "'");
  auto [it, inserted] = index_.try_emplace(std::move(h), items_.size());
  if (inserted) {
    items_.emplace_back(key, std::move(value));
  } else {
    items_[it->second].second = std::move(value);
  }
}

void Dict::clear() {
  items_.clear();
  index_.clear();
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.data_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(std::string s)
    : kind_(Kind::kString), data_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::safe_string(std::string s) {
  Value v(std::move(s));
  v.safe_ = true;
  return v;
}

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value Value::generator(std::vector<Value> items) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->is_generator = true;
  return Value(std::move(l));
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->is_tuple = is_tuple;
  return Value(std::move(l));
}

Value Value::function(std::string name, std::function<Value(Evaluator&, CallArgs&)> fn) {
  auto f = std::make_shared<Function>();
  f->name = std::move(name);
  f->call = std::move(fn);
  return Value(std::move(f));
}

int64_t Value::as_int() const {
  if (kind_ == Kind::kBool) return std::get<bool>(data_) ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_double() const {
  if (kind_ == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

std::string Value::undefined_hint() const {
  if (const auto* p = std::get_if<StrPtr>(&data_)) return **p;
  return "value is undefined";
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_double() != 0.0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
      return list().is_generator || !items().empty();
    case Kind::kDict:
      return dict().is_namespace || dict().size() > 0;
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return list().is_generator ? "generator" : list().is_tuple ? "tuple" : "list";
    case Kind::kDict:
      return dict().is_namespace ? "Namespace" : "dict";
    case Kind::kFunction:
      return "function";
  }
  return "object";
}

void fail_undefined(const Value& v) { throw TemplateError(v.undefined_hint(), 0); }

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |d| < 1e16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + ebuf;
  }
  std::string out;
  if (exponent < 0) {
    out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else if (static_cast<int>(digits.size()) <= exponent + 1) {
    out = digits + std::string(static_cast<size_t>(exponent + 1) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
  }
  return sign + out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return float_repr(v.as_double());
    case Value::Kind::kString:
      return v.str();
    case Value::Kind::kFunction:
      return "<function " + v.fn().name + ">";
    default: {
      std::string out;
      append_repr(out, v, 0);
      return out;
    }
  }
}

std::string to_repr(const Value& v) {
  std::string out;
  append_repr(out, v, 0);
  return out;
}

std::string to_json(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  append_json(out, v, options, 0);
  return out;
}

namespace {

bool equal_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.list().is_tuple != b.list().is_tuple) return false;
      if (a.list().is_generator || b.list().is_generator) return &a.list() == &b.list();
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equal_at(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict_ptr() == b.dict_ptr()) return true;
      if (a.dict().is_namespace || b.dict().is_namespace) return false;
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [key, item] : a.dict().items()) {
        const Value* other = b.dict().find(key);
        if (other == nullptr || !equal_at(item, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction:
      return &a.fn() == &b.fn();
    default:
      return false;
  }
}

int compare_at(const Value& a, const Value& b, const char* op, int depth) {
  check_depth(depth);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple &&
      !a.list().is_generator && !b.list().is_generator) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal_at(x[i], y[i], depth + 1)) return compare_at(x[i], y[i], op, depth + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  type_error(std::string("'") + op + "' not supported between instances of '" + a.type_name() +
             "' and '" + b.type_name() + "'");
}

}  // namespace

bool values_equal(const Value& a, const Value& b) { return equal_at(a, b, 0); }

int compare_values(const Value& a, const Value& b, const char* op) {
  return compare_at(a, b, op, 0);
}

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xc0) != 0x80) ++n;
  }
  return n;
}

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t j = i + 1;
    while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xc0) == 0x80) ++j;
    out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace pagoda::tmpl
