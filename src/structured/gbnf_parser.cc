#include "structured/gbnf_parser.h"

#include <map>
#include <optional>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda::structured {
namespace {

// A recursive-descent parser over the text with a cursor; every error names the line and the
// column of the character it stopped at.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Grammar parse() {
    skip_space();
    while (pos_ < text_.size()) {
      const size_t name_pos = pos_;
      std::string name = parse_name();
      if (name.empty()) fail("expected a rule name");
      skip_space();
      if (!consume("::=")) fail("expected '::=' after the rule name");
      int32_t id = rule_id(name, name_pos);
      if (defined_.count(id)) fail_at(name_pos, fmt::format("rule '{}' is defined twice", name));
      defined_[id] = name_pos;
      g_.rules[static_cast<size_t>(id)].body = parse_alternatives(false);
      skip_space();
    }
    for (const auto& [id, at] : referenced_) {
      if (!defined_.count(id)) {
        fail_at(at, fmt::format("undefined rule '{}'", g_.rules[static_cast<size_t>(id)].name));
      }
    }
    g_.root = g_.find_rule("root");
    if (g_.root < 0) fail_at(0, "the grammar has no 'root' rule");
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw InvalidArgument(fmt::format("grammar: line {}, column {}: {}", line, column, what));
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  [[nodiscard]] bool at_end() const { return pos_ >= text_.size(); }
  [[nodiscard]] char peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool consume(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }

  void skip_space() {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // Whether the cursor is at `name ::=`: the start of the next rule, which ends the current body.
  [[nodiscard]] bool at_rule_start() const {
    size_t p = pos_;
    while (p < text_.size() && is_name_char(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() &&
           (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\n' || text_[p] == '\r')) {
      ++p;
    }
    return text_.substr(p, 3) == "::=";
  }

  int32_t rule_id(const std::string& name, size_t at) {
    int32_t id = g_.find_rule(name);
    if (id < 0) id = g_.add_rule(name);
    if (!referenced_.count(id)) referenced_[id] = at;
    return id;
  }

  Expr parse_alternatives(bool nested) {
    std::vector<Expr> options;
    options.push_back(parse_sequence(nested));
    while (true) {
      skip_space();
      if (peek() != '|') break;
      ++pos_;
      options.push_back(parse_sequence(nested));
    }
    return Expr::alt(std::move(options));
  }

  Expr parse_sequence(bool nested) {
    std::vector<Expr> items;
    while (true) {
      skip_space();
      if (at_end() || peek() == '|' || (nested && peek() == ')')) break;
      if (!nested && peek() == ')') fail("unbalanced ')'");
      if (at_rule_start()) break;
      Expr item = parse_primary();
      items.push_back(parse_postfix(std::move(item)));
    }
    return Expr::seq(std::move(items));
  }

  Expr parse_postfix(Expr item) {
    while (true) {
      const char c = peek();
      if (c == '*') {
        ++pos_;
        item = Expr::star(std::move(item));
      } else if (c == '+') {
        ++pos_;
        item = Expr::plus(std::move(item));
      } else if (c == '?') {
        ++pos_;
        item = Expr::optional(std::move(item));
      } else if (c == '{') {
        const size_t at = pos_;
        ++pos_;
        skip_space();
        const std::optional<int64_t> lo = parse_count();
        skip_space();
        std::optional<int64_t> hi = lo;
        if (consume(",")) {
          skip_space();
          hi = parse_count();
          skip_space();
        } else if (!lo) {
          fail("expected a repetition count");
        }
        if (!consume("}")) fail("expected '}' closing the repetition");
        const int64_t min = lo.value_or(0);
        if (hi && *hi < min) fail_at(at, fmt::format("repetition {{{},{}}}: max < min", min, *hi));
        constexpr int64_t kMaxCount = 100000;
        if (min > kMaxCount || hi.value_or(0) > kMaxCount) {
          fail_at(at, fmt::format("repetition counts above {} are not supported", kMaxCount));
        }
        item = Expr::repeat(std::move(item), static_cast<int32_t>(min),
                            hi ? static_cast<int32_t>(*hi) : -1);
      } else {
        return item;
      }
    }
  }

  std::optional<int64_t> parse_count() {
    if (!(peek() >= '0' && peek() <= '9')) return std::nullopt;
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = std::min<int64_t>(v * 10 + (peek() - '0'), int64_t{1} << 40);
      ++pos_;
    }
    return v;
  }

  Expr parse_primary() {
    const char c = peek();
    if (c == '"' || c == '\'') return parse_literal(c);
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return Expr::codepoints({{0, kMaxCodepoint}});
    }
    if (c == '(') {
      const size_t at = pos_;
      if (++depth_ > 200) fail_at(at, "groups nest too deeply");
      ++pos_;
      skip_space();
      if (peek() == '=' || (peek() == '!' && peek(1) != '=')) {
        fail_at(at, "lookahead assertions '(= ...)' are not supported");
      }
      Expr inner = parse_alternatives(true);
      skip_space();
      if (!consume(")")) fail("expected ')'");
      --depth_;
      return inner;
    }
    if (is_name_char(c)) {
      const size_t at = pos_;
      const std::string name = parse_name();
      return Expr::ref(rule_id(name, at));
    }
    fail(fmt::format("unexpected character '{}'", c));
  }

  int hex_value(char c) const {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const int h = hex_value(peek());
      if (h < 0) fail(fmt::format("expected {} hex digits", digits));
      v = v * 16 + static_cast<uint32_t>(h);
      ++pos_;
    }
    return v;
  }

  // One character of a literal or class (after the opening quote or bracket), as a codepoint.
  uint32_t parse_char() {
    if (at_end()) fail("unterminated literal or class");
    const size_t at = pos_;
    const auto lead = static_cast<uint8_t>(peek());
    if (lead == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '0':
          return 0;
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          return static_cast<uint8_t>(e);
        case 'x':
          return parse_hex(2);
        case 'u':
          return check_scalar(parse_hex(4), at);
        case 'U':
          return check_scalar(parse_hex(8), at);
        default:
          fail_at(at, fmt::format("unknown escape '\\{}'", e));
      }
    }
    // A UTF-8 character of the grammar text itself.
    int len = lead < 0x80         ? 1
              : (lead >> 5) == 6  ? 2
              : (lead >> 4) == 14 ? 3
              : (lead >> 3) == 30 ? 4
                                  : 0;
    if (len == 0 || pos_ + static_cast<size_t>(len) > text_.size()) fail("invalid UTF-8");
    uint32_t cp = len == 1 ? lead : lead & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<uint8_t>(text_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  uint32_t check_scalar(uint32_t cp, size_t at) const {
    if (cp > kMaxCodepoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
      fail_at(at, fmt::format("U+{:04X} is not a Unicode scalar value", cp));
    }
    return cp;
  }

  Expr parse_literal(char quote) {
    ++pos_;
    std::string bytes;
    while (true) {
      if (at_end()) fail("unterminated string literal");
      if (peek() == quote) {
        ++pos_;
        break;
      }
      if (peek() == '\n') fail("newline in a string literal");
      append_utf8(bytes, parse_char());
    }
    return Expr::literal(bytes);
  }

  Expr parse_class() {
    const size_t at = pos_;
    ++pos_;
    const bool negate = peek() == '^';
    if (negate) ++pos_;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (true) {
      if (at_end()) fail_at(at, "unterminated character class");
      if (peek() == ']') {
        ++pos_;
        break;
      }
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) fail_at(at, "a character class range goes backwards");
      }
      ranges.emplace_back(lo, hi);
    }
    const auto normalized = normalize_ranges(ranges, negate);
    if (normalized.empty()) fail_at(at, "the character class matches no character");
    return Expr::codepoints(normalized);
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
  Grammar g_;
  std::map<int32_t, size_t> defined_;     // rule -> where it was defined
  std::map<int32_t, size_t> referenced_;  // rule -> where it was first named
};

}  // namespace

Grammar parse_gbnf(std::string_view text) { return Parser(text).parse(); }

}  // namespace pagoda::structured
