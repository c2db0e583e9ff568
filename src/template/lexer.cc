#include "template/lexer.h"
#include "template/numbers.h"

#include <cctype>
#include <cstdint>

#include "template/error.h"
#include "template/unicode.h"

namespace pagoda::tmpl {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Scans the source once. The why of the whitespace rules: Jinja2 strips the text *before* a tag
// while it lexes that text, so every rule below looks backwards at the pending text or forwards
// past a tag end, exactly like Jinja2's regular expressions do.
class Lexer {
 public:
  Lexer(std::string_view src, const LexerOptions& options) : src_(src), options_(options) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t open = find_open(pos_);
      std::string text(src_.substr(pos_, open - pos_));
      if (open == src_.size()) {
        push_text(std::move(text), line_at_pos_);
        break;
      }
      const char kind = src_[open + 1];
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (sign == '-') {
        text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
      } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
        // Strip spaces between the start of the line and a block or comment tag.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting_) && l_pos < text.size() &&
            text.find_first_not_of(" \t\r\f\v", l_pos) == std::string::npos) {
          text.erase(l_pos);
        }
      }
      const int text_line = line_at_pos_;
      advance_to(open);
      push_text(std::move(text), text_line);
      const size_t body = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        lex_comment(body);
      } else if (kind == '%' && try_raw(body)) {
        // handled
      } else {
        lex_tag(kind == '{', body);
      }
    }
    // As in Jinja2, the end of the template reports the line of the last token.
    tokens_.push_back({TokenType::kEof, "", tokens_.empty() ? 1 : tokens_.back().line});
    return std::move(tokens_);
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  void advance_to(size_t p) {
    for (size_t i = pos_; i < p && i < src_.size(); ++i) {
      if (src_[i] == '\n') ++line_at_pos_;
    }
    pos_ = p;
  }

  void push_text(std::string text, int line) {
    if (!text.empty()) tokens_.push_back({TokenType::kText, std::move(text), line});
  }

  [[noreturn]] void fail(const std::string& message) const {
    throw TemplateError("syntax error: " + message, line_at_pos_);
  }

  // After a tag end: "-" eats all following whitespace, trim_blocks eats one newline.
  void finish_tag(size_t after_end, char sign, bool is_block) {
    size_t p = after_end;
    if (sign == '-') {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (sign != '+' && is_block && options_.trim_blocks && p < src_.size() &&
               src_[p] == '\n') {
      ++p;
    }
    line_starting_ = p > after_end ? src_[p - 1] == '\n' : false;
    advance_to(p);
  }

  void lex_comment(size_t body) {
    const size_t end = src_.find("#}", body);
    if (end == std::string_view::npos) fail("missing end of comment tag");
    const char sign = end > body ? src_[end - 1] : '\0';
    finish_tag(end + 2, sign == '-' || sign == '+' ? sign : '\0', true);
  }

  // {% raw %}...{% endraw %}: the content is literal text.
  bool try_raw(size_t body) {
    size_t p = body;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) {
      return false;
    }
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    char sign = '\0';
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
    if (src_.compare(p, 2, "%}") != 0) return false;
    p += 2;
    if (sign == '-') {
      while (p < src_.size() && is_space(src_[p])) ++p;
    }
    // Find {% endraw %} with optional markers.
    for (size_t q = src_.find("{%", p); q != std::string_view::npos; q = src_.find("{%", q + 2)) {
      size_t r = q + 2;
      char open_sign = '\0';
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) open_sign = src_[r++];
      while (r < src_.size() && is_space(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && is_space(src_[r])) ++r;
      char close_sign = '\0';
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) close_sign = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) continue;
      std::string text(src_.substr(p, q - p));
      if (open_sign == '-') {
        text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
      } else if (open_sign != '+' && options_.lstrip_blocks) {
        const size_t nl = text.rfind('\n');
        if (nl != std::string::npos &&
            text.find_first_not_of(" \t\r\f\v", nl + 1) == std::string::npos) {
          text.erase(nl + 1);
        }
      }
      const int line = line_at_pos_;
      advance_to(p);
      push_text(std::move(text), line);
      advance_to(r);
      finish_tag(r + 2, close_sign, true);
      return true;
    }
    fail("missing end of raw directive");
  }

  void lex_tag(bool is_var, size_t body) {
    tokens_.push_back({is_var ? TokenType::kVarBegin : TokenType::kBlockBegin, "", line_at_pos_});
    advance_to(body);
    int depth = 0;  // open brackets: a "}}" inside a dict literal does not end the tag
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size())
        fail(is_var ? "missing end of print tag" : "missing end of block tag");
      const char end_char = is_var ? '}' : '%';
      if (depth == 0) {
        char sign = '\0';
        size_t p = pos_;
        if (src_[p] == '-' || src_[p] == '+') sign = src_[p++];
        if (src_.compare(p, 2, std::string{end_char, '}'}) == 0 && !(is_var && sign == '+')) {
          tokens_.push_back({is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, "", line_at_pos_});
          finish_tag(p + 2, sign, !is_var);
          return;
        }
      }
      lex_expression_token(depth);
    }
  }

  void lex_expression_token(int& depth) {
    const char c = src_[pos_];
    const int line = line_at_pos_;
    if (is_name_start(c)) {
      size_t e = pos_;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      tokens_.push_back({TokenType::kName, std::string(src_.substr(pos_, e - pos_)), line});
      advance_to(e);
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number();
      return;
    }
    if (c == '\'' || c == '"') {
      lex_string(c);
      return;
    }
    static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "*",
                                       "/",  "%",  "~",  "<",  ">",  "(",  ")", "[", "]",
                                       "{",  "}",  ",",  ".",  ":",  "|",  "=", ";"};
    for (const char* op : kOps) {
      const std::string_view sv(op);
      if (src_.compare(pos_, sv.size(), sv) == 0) {
        if (sv == "(" || sv == "[" || sv == "{") ++depth;
        if ((sv == ")" || sv == "]" || sv == "}") && depth > 0) --depth;
        tokens_.push_back({TokenType::kOperator, std::string(sv), line});
        advance_to(pos_ + sv.size());
        return;
      }
    }
    fail(std::string("unexpected char '") + c + "'");
  }

  void lex_number() {
    size_t e = pos_;
    auto digits = [&](auto pred) {
      std::string out;
      while (e < src_.size() &&
             (pred(src_[e]) || (src_[e] == '_' && e + 1 < src_.size() && pred(src_[e + 1])))) {
        if (src_[e] != '_') out += src_[e];
        ++e;
      }
      return out;
    };
    auto is_digit = [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; };
    if (src_[e] == '0' && e + 1 < src_.size() &&
        std::string_view("xXoObB").find(src_[e + 1]) != std::string_view::npos) {
      const char base_char = static_cast<char>(std::tolower(src_[e + 1]));
      const int base = base_char == 'x' ? 16 : base_char == 'o' ? 8 : 2;
      e += 2;
      std::string d =
          digits([](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)) != 0; });
      const std::optional<int64_t> value = parse_int(d, base);
      if (!value) fail("invalid integer literal");
      tokens_.push_back({TokenType::kInt, std::to_string(*value), line_at_pos_});
      advance_to(e);
      return;
    }
    std::string text = digits(is_digit);
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      ++e;
      text += '.';
      text += digits(is_digit);
      is_float = true;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t f = e + 1;
      if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
      if (f < src_.size() && is_digit(src_[f])) {
        text += "e";
        if (src_[e + 1] == '-') text += "-";
        e = f;
        text += digits(is_digit);
        is_float = true;
      }
    }
    tokens_.push_back({is_float ? TokenType::kFloat : TokenType::kInt, text, line_at_pos_});
    advance_to(e);
  }

  void lex_string(char quote) {
    std::string out;
    size_t p = pos_ + 1;
    const int line = line_at_pos_;
    while (true) {
      if (p >= src_.size()) fail("unterminated string");
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) fail("unterminated string");
      const char esc = src_[p + 1];
      p += 2;
      auto hex = [&](int n) {
        if (p + n > src_.size()) fail("truncated escape in string");
        // Parsed by hand: std::stoul throws std::invalid_argument on bad digits (found by
        // fuzz_jinja), and a template error must be a TemplateError.
        uint32_t cp = 0;
        for (int i = 0; i < n; ++i) {
          const char h = src_[p + static_cast<size_t>(i)];
          const int digit = h >= '0' && h <= '9'   ? h - '0'
                            : h >= 'a' && h <= 'f' ? h - 'a' + 10
                            : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                   : -1;
          if (digit < 0) fail("invalid escape in string: bad hex digit");
          cp = cp * 16 + static_cast<uint32_t>(digit);
        }
        if (cp > 0x10FFFF) fail("invalid escape in string: code point out of range");
        p += n;
        encode_utf8(out, cp);
      };
      switch (esc) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case 'a':
          out += '\a';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        default:
          out += '\\';
          out += esc;
      }
    }
    tokens_.push_back({TokenType::kString, std::move(out), line});
    advance_to(p + 1);
  }

  std::string_view src_;
  LexerOptions options_;
  size_t pos_ = 0;
  int line_at_pos_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  // As Jinja2 does before lexing: every line break (\r\n, \r, \n) becomes \n, and one trailing
  // line break is dropped (keep_trailing_newline=False).
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(normalized, options).run();
}

std::string describe_token(const Token& token) {
  switch (token.type) {
    case TokenType::kText:
      return "template data";
    case TokenType::kVarBegin:
      return "begin of print statement";
    case TokenType::kVarEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kEof:
      return "end of template";
    case TokenType::kString:
      return "string";
    default:
      return "'" + token.value + "'";
  }
}

}  // namespace pagoda::tmpl
