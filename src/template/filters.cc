// Jinja2's built-in filters, plus Hugging Face's tojson (json.dumps with ensure_ascii=False and no
// HTML escaping). Adding a filter: one branch in apply_filter, one case in the unit tests.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "template/builtins.h"
#include "template/error.h"
#include "template/evaluator.h"
#include "template/numbers.h"
#include "template/unicode.h"

namespace pagoda::tmpl {

namespace {

[[noreturn]] void fail(const std::string& message) { throw TemplateError(message, 0); }

// str.split(): runs of Unicode whitespace separate words.
std::vector<Value> split_words(const std::string& s) {
  std::vector<Value> words;
  std::string word;
  for (uint32_t cp : utf8_decode(s)) {
    if (is_unicode_space(cp)) {
      if (!word.empty()) words.emplace_back(std::exchange(word, {}));
    } else {
      utf8_append(word, cp);
    }
  }
  if (!word.empty()) words.emplace_back(std::move(word));
  return words;
}

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
  std::string out;
  bool word_start = true;
  for (uint32_t cp : utf8_decode(s)) {
    if (is_unicode_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<') {
      word_start = true;
      utf8_append(out, cp);
      continue;
    }
    if (word_start && cp == 0xDF) {
      out += "SS";
    } else {
      utf8_append(out, word_start ? unicode_upper(cp) : unicode_lower(cp));
    }
    word_start = false;
  }
  return out;
}

// Jinja2's truncate: strings longer than length + leeway are cut to length (counting the end
// marker), at a word boundary unless killwords.
std::string truncate(const std::string& s, int64_t length, bool killwords, const std::string& end,
                     int64_t leeway) {
  const std::vector<std::string> chars = utf8_chars(s);
  const int64_t end_len = static_cast<int64_t>(utf8_length(end));
  if (length < end_len) fail("expected length >= " + std::to_string(end_len));
  if (leeway < 0) fail("expected leeway >= 0");
  if (static_cast<int64_t>(chars.size()) <= length + leeway) return s;
  std::string head;
  for (int64_t i = 0; i < length - end_len; ++i) head += chars[static_cast<size_t>(i)];
  if (!killwords) {
    const size_t space = head.rfind(' ');
    if (space != std::string::npos) head.resize(space);
  }
  return head + end;
}

// markupsafe's unescape of the entities striptags leaves: named basics and numeric references.
std::string html_unescape(const std::string& s) {
  static const std::pair<const char*, const char*> kNamed[] = {
      {"&amp;", "&"},   {"&lt;", "<"},   {"&gt;", ">"},
      {"&quot;", "\""}, {"&apos;", "'"}, {"&nbsp;", "\xc2\xa0"}};
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] != '&') {
      out += s[i++];
      continue;
    }
    bool done = false;
    for (const auto& [name, text] : kNamed) {
      if (s.compare(i, std::strlen(name), name) == 0) {
        out += text;
        i += std::strlen(name);
        done = true;
        break;
      }
    }
    if (!done && i + 2 < s.size() && s[i + 1] == '#') {
      const bool hex = s[i + 2] == 'x' || s[i + 2] == 'X';
      size_t j = i + (hex ? 3 : 2);
      uint32_t cp = 0;
      const size_t digits_start = j;
      while (j < s.size() && j - digits_start < 7 &&
             (hex ? std::isxdigit(static_cast<unsigned char>(s[j]))
                  : std::isdigit(static_cast<unsigned char>(s[j])))) {
        const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[j])));
        cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(c <= '9' ? c - '0' : c - 'a' + 10);
        ++j;
      }
      if (j > digits_start && cp > 0 && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF)) {
        utf8_append(out, cp);
        i = j < s.size() && s[j] == ';' ? j + 1 : j;
        done = true;
      }
    }
    if (!done) out += s[i++];
  }
  return out;
}

std::string striptags(const std::string& s) {
  std::string text;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 4, "<!--") == 0) {
      const size_t end = s.find("-->", i + 4);
      if (end != std::string::npos) {
        i = end + 3;
        continue;
      }
    }
    if (s[i] == '<') {
      const size_t end = s.find('>', i + 1);
      if (end != std::string::npos) {
        i = end + 1;
        continue;
      }
    }
    text += s[i++];
  }
  // " ".join(text.split())
  std::string joined;
  for (const Value& word : split_words(text)) {
    if (!joined.empty()) joined += ' ';
    joined += word.str();
  }
  return html_unescape(joined);
}

// Python's textwrap.wrap as Jinja2's wordwrap calls it (no tab expansion, whitespace kept
// inside lines, dropped at line ends), without hyphen splitting.
std::vector<std::string> wrap_line(const std::string& line, int64_t width, bool break_long) {
  std::vector<std::string> chunks;  // alternating runs of spaces and non-spaces, in code points
  std::vector<std::string> chars = utf8_chars(line);
  for (size_t i = 0; i < chars.size();) {
    const bool space = chars[i] == " " || chars[i] == "\t" || chars[i] == "\n";
    std::string chunk;
    while (i < chars.size() && (chars[i] == " " || chars[i] == "\t" || chars[i] == "\n") == space) {
      chunk += chars[i++];
    }
    chunks.push_back(std::move(chunk));
  }
  auto len = [](const std::string& c) { return static_cast<int64_t>(utf8_length(c)); };
  auto blank = [](const std::string& c) {
    return c.find_first_not_of(" \t\n") == std::string::npos;
  };
  std::reverse(chunks.begin(), chunks.end());
  std::vector<std::string> lines;
  while (!chunks.empty()) {
    std::vector<std::string> cur;
    int64_t cur_len = 0;
    if (blank(chunks.back()) && !lines.empty()) chunks.pop_back();
    while (!chunks.empty() && cur_len + len(chunks.back()) <= width) {
      cur_len += len(chunks.back());
      cur.push_back(std::move(chunks.back()));
      chunks.pop_back();
    }
    if (!chunks.empty() && len(chunks.back()) > width) {
      const int64_t space_left = std::max<int64_t>(width - cur_len, 1);
      if (break_long) {
        std::vector<std::string> word = utf8_chars(chunks.back());
        std::string head, tail;
        for (size_t k = 0; k < word.size(); ++k) {
          (static_cast<int64_t>(k) < space_left ? head : tail) += word[k];
        }
        cur.push_back(std::move(head));
        chunks.back() = std::move(tail);
      } else if (cur.empty()) {
        cur.push_back(std::move(chunks.back()));
        chunks.pop_back();
      }
    }
    if (!cur.empty() && blank(cur.back())) cur.pop_back();
    if (!cur.empty()) {
      std::string joined;
      for (auto& c : cur) joined += c;
      lines.push_back(std::move(joined));
    }
  }
  return lines;
}

// Python's urllib.parse.quote (safe "/" for strings; "" and spaces as '+' in query strings).
std::string url_quote(const std::string& s, bool for_query) {
  std::string out;
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' ||
        (!for_query && c == '/')) {
      out += ch;
    } else if (for_query && c == ' ') {
      out += '+';
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
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

std::vector<Value> split_string_on(const std::string& s, char sep) {
  std::vector<Value> parts;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    parts.emplace_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

// Python's int(s, base): optional sign, underscores between digits, and a 0x/0o/0b prefix that
// matches the base (base 0 takes the base from the prefix).
bool parse_int_base(const std::string& text, int64_t base, int64_t& out) {
  if (base != 0 && (base < 2 || base > 36)) fail("int() base must be >= 2 and <= 36, or 0");
  std::string s;
  for (char c : text) {
    if (c != '_') s += c;
  }
  const size_t b = s.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return false;
  s = s.substr(b, s.find_last_not_of(" \t\n\r\f\v") - b + 1);
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.erase(0, 1);
  }
  if (s.size() > 2 && s[0] == '0') {
    const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[1])));
    const int64_t prefix_base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefix_base != 0 && (base == 0 || base == prefix_base)) {
      base = prefix_base;
      s.erase(0, 2);
    }
  }
  if (base == 0) base = 10;
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(s.c_str(), &end, static_cast<int>(base));
  if (errno != 0 || end != s.c_str() + s.size() || s[0] == '-' || s[0] == '+') return false;
  out = negative ? -n : n;
  return true;
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
    const int64_t base = a.has(1) ? a.get(1).as_int() : 10;
    int64_t n;
    if (v.is_string() && base != 10 && parse_int_base(v.str(), base, n)) return Value(n);
    if (to_int(v, n)) return Value(n);
    return a.has(0) ? a.get(0) : Value(int64_t{0});
  }
  if (name == "truncate") {
    ArgReader a(args, name, {"length", "killwords", "end", "leeway"});
    return Value(truncate(to_str(v), a.has(0) ? a.get(0).as_int() : 255, a.get(1).truthy(),
                          a.has(2) ? to_str(a.get(2)) : "...",
                          a.has(3) && !a.get(3).is_none() ? a.get(3).as_int() : 5));
  }
  if (name == "striptags") return Value(striptags(to_str(v)));
  if (name == "wordwrap") {
    ArgReader a(args, name, {"width", "break_long_words", "wrapstring", "break_on_hyphens"});
    const int64_t width = a.has(0) ? a.get(0).as_int() : 79;
    if (width <= 0) fail("invalid width " + std::to_string(width) + " (must be > 0)");
    const std::string wrap = a.has(2) && !a.get(2).is_none() ? to_str(a.get(2)) : "\n";
    const bool break_long = !a.has(1) || a.get(1).truthy();
    std::string out;
    bool first_line = true;
    for (const std::string& line : py_splitlines(to_str(v))) {
      if (!first_line) out += wrap;
      first_line = false;
      bool first = true;
      for (const std::string& piece : wrap_line(line, width, break_long)) {
        if (!first) out += wrap;
        first = false;
        out += piece;
        ev.check_size(out.size());
      }
    }
    return Value(std::move(out));
  }
  if (name == "filesizeformat") {
    ArgReader a(args, name, {"binary"});
    const bool binary = a.get(0).truthy();
    double bytes = 0;
    if (v.is_number()) {
      bytes = v.as_double();
    } else {
      CallArgs none;
      bytes = apply_filter(ev, "float", v, none).as_double();
    }
    const double base = binary ? 1024 : 1000;
    static const char* const kDecimal[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
    static const char* const kBinary[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
    if (bytes == 1) return Value("1 Byte");
    if (bytes < base) {
      return Value(std::to_string(static_cast<int64_t>(bytes)) + " Bytes");
    }
    char buf[64];
    double unit = base;
    for (int i = 0; i < 8; ++i) {
      unit *= base;
      if (bytes < unit || i == 7) {
        std::snprintf(buf, sizeof(buf), "%.1f %s", base * bytes / unit,
                      binary ? kBinary[i] : kDecimal[i]);
        break;
      }
    }
    return Value(std::string(buf));
  }
  if (name == "urlencode") {
    if (v.is_string()) return Value(url_quote(v.str(), false));
    std::vector<Value> pairs;
    if (v.is_dict()) {
      for (const auto& [key, value] : v.dict().items()) pairs.push_back(Value::list({key, value}));
    } else {
      pairs = iterate(v);
    }
    std::string out;
    for (const Value& pair : pairs) {
      std::vector<Value> kv = iterate(pair);
      if (kv.size() != 2) fail("urlencode expects (key, value) pairs");
      if (!out.empty()) out += '&';
      out += url_quote(to_str(kv[0]), true) + "=" + url_quote(to_str(kv[1]), true);
    }
    return Value(std::move(out));
  }
  if (name == "xmlattr") {
    ArgReader a(args, name, {"autospace"});
    if (!v.is_dict()) fail("xmlattr expects a mapping");
    std::string out;
    for (const auto& [key, value] : v.dict().items()) {
      if (value.is_none() || value.is_undefined()) continue;
      const std::string k = to_str(key);
      if (k.find_first_of(" /=>\t\n\f") != std::string::npos) {
        fail("Invalid character in attribute name: " + to_repr(key));
      }
      if (!out.empty()) out += ' ';
      out += html_escape(k) + "=\"" + html_escape(to_str(value)) + "\"";
    }
    if (!out.empty() && (!a.has(0) || a.get(0).truthy())) out.insert(out.begin(), ' ');
    return Value::safe_string(std::move(out));
  }
  if (name == "groupby") {
    ArgReader a(args, name, {"attribute", "default", "case_sensitive"});
    const bool cs = a.get(2).truthy();
    struct Keyed {
      Value key;
      Value item;
    };
    std::vector<Keyed> keyed;
    for (const Value& item : iterate(v)) {
      Value key = get_path(item, a.get(0));
      if (key.is_undefined() && a.has(1)) key = a.get(1);
      keyed.push_back({std::move(key), item});
    }
    std::stable_sort(keyed.begin(), keyed.end(), [&](const Keyed& x, const Keyed& y) {
      return compare_values(sort_key(x.key, cs), sort_key(y.key, cs)) < 0;
    });
    std::vector<Value> groups;
    for (size_t i = 0; i < keyed.size();) {
      std::vector<Value> members;
      size_t j = i;
      while (j < keyed.size() &&
             values_equal(sort_key(keyed[j].key, cs), sort_key(keyed[i].key, cs))) {
        members.push_back(keyed[j++].item);
      }
      auto group = std::make_shared<List>();
      group->items = {keyed[i].key, Value::list(std::move(members))};
      group->is_tuple = true;
      group->fields = {"grouper", "list"};
      groups.emplace_back(std::move(group));
      i = j;
    }
    return Value::list(std::move(groups));
  }
  if (name == "slice") {
    ArgReader a(args, name, {"slices", "fill_with"});
    const int64_t slices = a.get(0).is_int() ? a.get(0).as_int() : 0;
    if (slices <= 0) fail("slice count must be positive");
    ev.count_iterations(slices);
    const std::vector<Value> seq = iterate(v);
    const int64_t length = static_cast<int64_t>(seq.size());
    const int64_t per_slice = length / slices, with_extra = length % slices;
    const bool fill = a.has(1) && !a.get(1).is_none();
    std::vector<Value> out;
    int64_t offset = 0;
    for (int64_t k = 0; k < slices; ++k) {
      const int64_t start = offset + k * per_slice;
      if (k < with_extra) ++offset;
      const int64_t end = offset + (k + 1) * per_slice;
      std::vector<Value> part(seq.begin() + start, seq.begin() + end);
      if (fill && k >= with_extra) part.push_back(a.get(1));
      out.push_back(Value::list(std::move(part)));
    }
    return Value::generator(std::move(out));
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
    // attribute="a,b" sorts by a, then b (Jinja2's multi-attribute getter).
    std::vector<Value> paths;
    if (a.has(2) && a.get(2).is_string() && a.get(2).str().find(',') != std::string::npos) {
      for (const Value& p : split_string_on(a.get(2).str(), ',')) paths.push_back(p);
    } else if (a.has(2)) {
      paths.push_back(a.get(2));
    }
    auto key_of = [&](const Value& item) {
      if (paths.empty()) return sort_key(item, cs);
      if (paths.size() == 1) return sort_key(get_path(item, paths[0]), cs);
      std::vector<Value> keys;
      for (const Value& p : paths) keys.push_back(sort_key(get_path(item, p), cs));
      return Value::list(std::move(keys));
    };
    std::vector<std::pair<Value, Value>> keyed;
    for (Value& item : items) keyed.emplace_back(key_of(item), std::move(item));
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      return reverse ? compare_values(y.first, x.first) < 0 : compare_values(x.first, y.first) < 0;
    });
    items.clear();
    for (auto& [key, item] : keyed) items.push_back(std::move(item));
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
    std::vector<std::string> lines = py_splitlines(to_str(v) + "\n");
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

bool has_filter(const std::string& name) {
  static const std::set<std::string> kNames = {
      "abs",        "attr",      "batch",       "capitalize", "center",    "count",
      "d",          "default",   "dictsort",    "e",          "escape",    "filesizeformat",
      "first",      "float",     "forceescape", "format",     "groupby",   "indent",
      "int",        "items",     "join",        "last",       "length",    "list",
      "lower",      "map",       "max",         "min",        "pprint",    "reject",
      "rejectattr", "replace",   "reverse",     "round",      "safe",      "select",
      "selectattr", "slice",     "sort",        "string",     "striptags", "sum",
      "title",      "tojson",    "trim",        "truncate",   "unique",    "upper",
      "urlencode",  "wordcount", "wordwrap",    "xmlattr"};
  return kNames.count(name) != 0;
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
