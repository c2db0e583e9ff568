#include "structured/regex_parser.h"

#include <optional>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda::structured {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Expr encode_chars(const Ranges& ranges, RegexEncoding encoding) {
  const Ranges normalized = normalize_ranges(ranges, false);
  if (encoding == RegexEncoding::kRaw) return Expr::codepoints(normalized);
  // JSON string content: plain characters as themselves; '"', '\' and controls escaped.
  Ranges plain;
  std::vector<Expr> options;
  for (auto [a, b] : normalized) {
    for (uint32_t cp = a; cp <= b && cp < 0x20; ++cp) {
      switch (cp) {
        case '\b':
          options.push_back(Expr::literal("\\b"));
          break;
        case '\f':
          options.push_back(Expr::literal("\\f"));
          break;
        case '\n':
          options.push_back(Expr::literal("\\n"));
          break;
        case '\r':
          options.push_back(Expr::literal("\\r"));
          break;
        case '\t':
          options.push_back(Expr::literal("\\t"));
          break;
        default:
          options.push_back(Expr::literal(fmt::format("\\u{:04x}", cp)));
      }
    }
    if (b < 0x20) continue;
    a = std::max<uint32_t>(a, 0x20);
    for (uint32_t special : {uint32_t{'"'}, uint32_t{'\\'}}) {
      if (special >= a && special <= b) {
        options.push_back(Expr::literal(special == '"' ? "\\\"" : "\\\\"));
      }
    }
    plain.emplace_back(a, b);
  }
  Ranges rest = normalize_ranges(
      [&] {
        Ranges excluded = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
        return excluded;
      }(),
      true);
  // plain minus the escaped characters: intersect with rest.
  Ranges kept;
  for (auto [a, b] : plain) {
    for (auto [c, d] : rest) {
      const uint32_t lo = std::max(a, c), hi = std::min(b, d);
      if (lo <= hi) kept.emplace_back(lo, hi);
    }
  }
  if (!kept.empty()) options.insert(options.begin(), Expr::codepoints(kept));
  PAGODA_CHECK(!options.empty(), "an empty character set");
  return Expr::alt(std::move(options));
}

namespace {

// Recursive descent over the pattern's bytes; characters are codepoints, which encode_chars
// writes out, so the same parse serves raw output and JSON string content.
class RegexParser {
 public:
  RegexParser(std::string_view pattern, RegexEncoding encoding)
      : p_(pattern), encoding_(encoding) {}

  ParsedRegex parse() {
    ParsedRegex out;
    if (consume('^')) {
      out.anchored_start = true;
    } else if (p_.substr(0, 2) == "\\A") {
      pos_ = 2;
      out.anchored_start = true;
    }
    out.expr = parse_alternatives(0);
    if (pos_ < p_.size()) fail(pos_, "unbalanced ')'");
    out.anchored_end = anchored_end_;
    return out;
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw InvalidArgument(fmt::format("regex: at offset {}: {}", at, what));
  }
  [[nodiscard]] bool at_end() const { return pos_ >= p_.size(); }
  [[nodiscard]] char peek(size_t ahead = 0) const {
    return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0';
  }
  bool consume(char c) {
    if (peek() != c || at_end()) return false;
    ++pos_;
    return true;
  }

  Expr chars(const Ranges& r) const { return encode_chars(r, encoding_); }

  Expr parse_alternatives(int depth) {
    std::vector<Expr> options;
    options.push_back(parse_sequence(depth));
    while (consume('|')) options.push_back(parse_sequence(depth));
    return Expr::alt(std::move(options));
  }

  Expr parse_sequence(int depth) {
    std::vector<Expr> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$' || (peek() == '\\' && (peek(1) == 'Z' || peek(1) == 'z'))) {
        const size_t at = pos_;
        pos_ += peek() == '$' ? 1 : 2;
        if (!only_closers_follow_from(pos_)) {
          fail(at, "anchors are only supported at the ends of the pattern");
        }
        anchored_end_ = true;
        continue;
      }
      if (peek() == '^') fail(pos_, "anchors are only supported at the ends of the pattern");
      Expr atom = parse_atom(depth);
      items.push_back(parse_quantifiers(std::move(atom)));
    }
    return Expr::seq(std::move(items));
  }

  // An end anchor is only allowed where the pattern ends (possibly closing groups first).
  bool only_closers_follow_from(size_t from) const {
    for (size_t i = from; i < p_.size(); ++i) {
      if (p_[i] != ')') return false;
    }
    return true;
  }

  std::optional<int64_t> parse_number() {
    if (!(peek() >= '0' && peek() <= '9')) return std::nullopt;
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = std::min<int64_t>(v * 10 + (peek() - '0'), int64_t{1} << 40);
      ++pos_;
    }
    return v;
  }

  Expr parse_quantifiers(Expr atom) {
    while (!at_end()) {
      const size_t at = pos_;
      int64_t min = 0, max = -1;
      const char c = peek();
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        ++pos_;
        min = 1;
      } else if (c == '?') {
        ++pos_;
        max = 1;
      } else if (c == '{') {
        // {m}, {m,}, {m,n}, {,n}; a brace that is no quantifier is a literal (as Python).
        const size_t save = pos_;
        ++pos_;
        const std::optional<int64_t> lo = parse_number();
        std::optional<int64_t> hi = lo;
        bool ok = true;
        if (consume(',')) {
          hi = parse_number();
        } else if (!lo) {
          ok = false;
        }
        if (!ok || !consume('}')) {
          pos_ = save;
          return atom;
        }
        min = lo.value_or(0);
        max = hi.value_or(-1);
        if (max >= 0 && max < min) fail(at, "repetition max < min");
        constexpr int64_t kMaxCount = 100000;
        if (min > kMaxCount || max > kMaxCount) {
          fail(at, fmt::format("repetition counts above {} are not supported", kMaxCount));
        }
      } else {
        return atom;
      }
      if (peek() == '?' || peek() == '+') ++pos_;  // lazy / possessive: the same language
      atom = Expr::repeat(std::move(atom), static_cast<int32_t>(min), static_cast<int32_t>(max));
    }
    return atom;
  }

  Expr parse_atom(int depth) {
    const size_t at = pos_;
    const char c = peek();
    if (c == '(') {
      if (depth >= 200) fail(at, "groups nest too deeply");
      ++pos_;
      if (peek() == '?') {
        if (p_.substr(pos_, 2) == "?:") {
          pos_ += 2;
        } else if (p_.substr(pos_, 3) == "?P<" ||
                   (p_.substr(pos_, 2) == "?<" && peek(2) != '=' && peek(2) != '!')) {
          pos_ = p_.find('>', pos_);
          if (pos_ == std::string_view::npos) fail(at, "unterminated group name");
          ++pos_;
        } else if (p_.substr(pos_, 2) == "?=" || p_.substr(pos_, 2) == "?!" ||
                   p_.substr(pos_, 3) == "?<=" || p_.substr(pos_, 3) == "?<!") {
          fail(at, "lookaround assertions are not supported");
        } else {
          fail(at, "inline flags and other (?...) groups are not supported");
        }
      }
      Expr inner = parse_alternatives(depth + 1);
      if (!consume(')')) fail(at, "unterminated group");
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return chars({{0, '\n' - 1}, {'\n' + 1, kMaxCodepoint}});
    }
    if (c == '*' || c == '+' || c == '?') fail(at, "nothing to repeat");
    if (c == '\\') {
      Ranges r;
      parse_escape(r, false);
      return chars(r);
    }
    const uint32_t cp = next_codepoint();
    return chars({{cp, cp}});
  }

  uint32_t next_codepoint() {
    const size_t at = pos_;
    const auto lead = static_cast<uint8_t>(peek());
    const int len = lead < 0x80         ? 1
                    : (lead >> 5) == 6  ? 2
                    : (lead >> 4) == 14 ? 3
                    : (lead >> 3) == 30 ? 4
                                        : 0;
    if (len == 0 || pos_ + static_cast<size_t>(len) > p_.size()) fail(at, "invalid UTF-8");
    uint32_t cp = len == 1 ? lead : lead & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<uint8_t>(p_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) fail(at, "invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  uint32_t parse_hex(size_t digits, size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char h = peek();
      int d = h >= '0' && h <= '9'   ? h - '0'
              : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                     : -1;
      if (d < 0) fail(at, "bad hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  // An escape at the cursor (a backslash); adds its characters to r. In a class, \b is a
  // backspace; outside it is a word boundary (refused).
  void parse_escape(Ranges& r, bool in_class) {
    const size_t at = pos_;
    ++pos_;
    if (at_end()) fail(at, "a trailing backslash");
    const char e = peek();
    ++pos_;
    auto add = [&](uint32_t a, uint32_t b) { r.emplace_back(a, b); };
    switch (e) {
      case 'd':
        add('0', '9');
        return;
      case 'D':
        for (auto x : normalize_ranges({{'0', '9'}}, true)) r.push_back(x);
        return;
      case 'w':
        add('0', '9'), add('A', 'Z'), add('a', 'z'), add('_', '_');
        return;
      case 'W':
        for (auto x : normalize_ranges({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}}, true))
          r.push_back(x);
        return;
      case 's':
        add(' ', ' '), add('\t', '\r');
        return;
      case 'S':
        for (auto x : normalize_ranges({{' ', ' '}, {'\t', '\r'}}, true)) r.push_back(x);
        return;
      case 'n':
        add('\n', '\n');
        return;
      case 'r':
        add('\r', '\r');
        return;
      case 't':
        add('\t', '\t');
        return;
      case 'f':
        add('\f', '\f');
        return;
      case 'v':
        add('\v', '\v');
        return;
      case '0':
        add(0, 0);
        return;
      case 'b':
        if (in_class) {
          add('\b', '\b');
          return;
        }
        fail(at, "word boundaries (\\b) are not supported");
      case 'x': {
        const uint32_t v = parse_hex(2, at);
        add(v, v);
        return;
      }
      case 'u': {
        uint32_t v = 0;
        if (consume('{')) {
          const size_t start = pos_;
          while (!at_end() && peek() != '}') ++pos_;
          if (at_end() || pos_ == start || pos_ - start > 6) fail(at, "bad \\u{...} escape");
          pos_ = start;
          v = parse_hex(p_.find('}', start) - start, at);
          ++pos_;
        } else {
          v = parse_hex(4, at);
        }
        if (v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) {
          fail(at, "the escape is not a Unicode scalar value");
        }
        add(v, v);
        return;
      }
      default:
        break;
    }
    if (e >= '1' && e <= '9') fail(at, "backreferences are not supported");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
      fail(at, fmt::format("unsupported escape '\\{}'", e));
    }
    pos_ = at + 1;
    const uint32_t cp = next_codepoint();  // an escaped punctuation or other character
    add(cp, cp);
  }

  Expr parse_class() {
    const size_t at = pos_;
    ++pos_;
    const bool negate = consume('^');
    Ranges r;
    bool first = true;
    while (true) {
      if (at_end()) fail(at, "unterminated character class");
      if (peek() == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      if (p_.substr(pos_, 2) == "[:") fail(pos_, "POSIX classes [:...:] are not supported");
      uint32_t lo = 0;
      if (peek() == '\\') {
        Ranges one;
        parse_escape(one, true);
        if (one.size() != 1 || one[0].first != one[0].second) {
          for (auto x : one) r.push_back(x);  // \d and friends: no range may start here
          continue;
        }
        lo = one[0].first;
      } else {
        lo = next_codepoint();
      }
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < p_.size()) {
        ++pos_;
        if (peek() == '\\') {
          Ranges one;
          const size_t esc_at = pos_;
          parse_escape(one, true);
          if (one.size() != 1 || one[0].first != one[0].second) fail(esc_at, "bad class range");
          hi = one[0].first;
        } else {
          hi = next_codepoint();
        }
        if (hi < lo) fail(at, "a class range goes backwards");
      }
      r.emplace_back(lo, hi);
    }
    const Ranges normalized = normalize_ranges(r, negate);
    if (normalized.empty()) fail(at, "the class matches no character");
    return chars(normalized);
  }

  std::string_view p_;
  RegexEncoding encoding_;
  size_t pos_ = 0;
  bool anchored_end_ = false;
};

}  // namespace

ParsedRegex parse_regex(std::string_view pattern, RegexEncoding encoding) {
  return RegexParser(pattern, encoding).parse();
}

}  // namespace pagoda::structured
