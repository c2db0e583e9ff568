#include "structured/json_primitives.h"

#include <fmt/format.h>

#include "core/status.h"
#include "structured/regex_parser.h"

namespace pagoda::structured::json {
namespace {

Expr digit() { return Expr::codepoints({{'0', '9'}}); }
Expr digit_range(char lo, char hi) { return Expr::codepoints({{uint32_t(lo), uint32_t(hi)}}); }
Expr hex_digit() { return Expr::codepoints({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}); }

// Fixed-length digit strings between lo and hi (same length, lo <= hi), digit by digit: equal
// leading digits are literal; otherwise the lower bound's tail, the digits strictly between, and
// the upper bound's tail.
Expr same_length_range(std::string_view lo, std::string_view hi) {
  if (lo.empty()) return Expr::empty();
  if (lo[0] == hi[0]) {
    return Expr::seq(
        {Expr::byte(static_cast<uint8_t>(lo[0])), same_length_range(lo.substr(1), hi.substr(1))});
  }
  const std::string nines(lo.size() - 1, '9'), zeros(lo.size() - 1, '0');
  std::vector<Expr> options;
  options.push_back(
      Expr::seq({Expr::byte(static_cast<uint8_t>(lo[0])), same_length_range(lo.substr(1), nines)}));
  if (hi[0] - lo[0] > 1) {
    options.push_back(
        Expr::seq({digit_range(static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1)),
                   Expr::repeat(digit(), static_cast<int32_t>(lo.size() - 1),
                                static_cast<int32_t>(lo.size() - 1))}));
  }
  options.push_back(
      Expr::seq({Expr::byte(static_cast<uint8_t>(hi[0])), same_length_range(zeros, hi.substr(1))}));
  return Expr::alt(std::move(options));
}

uint64_t pow10(size_t n) {
  uint64_t v = 1;
  for (size_t i = 0; i < n; ++i) v *= 10;
  return v;
}

// Decimal strings without leading zeros of the integers in [a, b] (b absent: unbounded).
Expr unsigned_range(uint64_t a, std::optional<uint64_t> b) {
  std::vector<Expr> options;
  const size_t la = std::to_string(a).size();
  const size_t lb = b ? std::to_string(*b).size() : 19;
  for (size_t len = la; len <= lb; ++len) {
    const uint64_t lo = std::max<uint64_t>(a, len == 1 ? 0 : pow10(len - 1));
    uint64_t hi = len >= 20 ? UINT64_MAX : pow10(len) - 1;
    if (b) hi = std::min(hi, *b);
    if (lo > hi) continue;
    options.push_back(same_length_range(std::to_string(lo), std::to_string(hi)));
  }
  if (!b) {  // 20 digits and more: any
    options.push_back(Expr::seq({digit_range('1', '9'), Expr::repeat(digit(), 19, -1)}));
  }
  return Expr::alt(std::move(options));
}

Expr any_fraction() { return Expr::optional(Expr::seq({Expr::byte('.'), Expr::plus(digit())})); }
Expr zero_fraction() {
  return Expr::optional(Expr::seq({Expr::byte('.'), Expr::plus(Expr::byte('0'))}));
}
Expr nonzero_fraction() {
  return Expr::seq(
      {Expr::byte('.'), Expr::star(digit()), digit_range('1', '9'), Expr::star(digit())});
}

// Magnitudes m = I + 0.F (no sign) with L (<)= m (<)= U, L and U integers >= 0.
std::optional<Expr> magnitude_range(Bound l, std::optional<Bound> u) {
  if (u && (u->value < l.value || (u->value == l.value && !(l.inclusive && u->inclusive)))) {
    return std::nullopt;
  }
  const auto L = static_cast<uint64_t>(l.value);
  if (u && u->value == l.value) return Expr::seq({unsigned_range(L, L), zero_fraction()});
  std::vector<Expr> options;
  options.push_back(
      Expr::seq({unsigned_range(L, L), l.inclusive ? any_fraction() : nonzero_fraction()}));
  const std::optional<uint64_t> top =
      u ? std::optional<uint64_t>(static_cast<uint64_t>(u->value) - 1) : std::nullopt;
  if (!top || *top >= L + 1)
    options.push_back(Expr::seq({unsigned_range(L + 1, top), any_fraction()}));
  if (u && u->inclusive) {
    options.push_back(
        Expr::seq({unsigned_range(static_cast<uint64_t>(u->value), static_cast<uint64_t>(u->value)),
                   zero_fraction()}));
  }
  return Expr::alt(std::move(options));
}

Expr from_regex(std::string_view regex) {
  return Expr::seq(
      {Expr::byte('"'), parse_regex(regex, RegexEncoding::kJsonString).expr, Expr::byte('"')});
}

}  // namespace

Expr string_char(bool single_codepoint) {
  Expr plain = Expr::codepoints({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodepoint}});
  Expr simple_escape = Expr::codepoints({{'"', '"'},
                                         {'\\', '\\'},
                                         {'/', '/'},
                                         {'b', 'b'},
                                         {'f', 'f'},
                                         {'n', 'n'},
                                         {'r', 'r'},
                                         {'t', 't'}});
  Expr hex4 =
      single_codepoint
          ? Expr::alt({Expr::seq({Expr::codepoints(
                                      {{'0', '9'}, {'a', 'c'}, {'e', 'f'}, {'A', 'C'}, {'E', 'F'}}),
                                  Expr::repeat(hex_digit(), 3, 3)}),
                       Expr::seq({Expr::codepoints({{'d', 'd'}, {'D', 'D'}}), digit_range('0', '7'),
                                  Expr::repeat(hex_digit(), 2, 2)})})
          : Expr::repeat(hex_digit(), 4, 4);
  Expr escape =
      Expr::seq({Expr::byte('\\'), Expr::alt({simple_escape, Expr::seq({Expr::byte('u'), hex4})})});
  return Expr::alt({std::move(plain), std::move(escape)});
}

Expr string_value(int64_t min_length, int64_t max_length) {
  const bool bounded = min_length > 0 || max_length >= 0;
  return Expr::seq({Expr::byte('"'),
                    Expr::repeat(string_char(bounded), static_cast<int32_t>(min_length),
                                 static_cast<int32_t>(max_length)),
                    Expr::byte('"')});
}

Expr string_with_pattern(std::string_view pattern) {
  ParsedRegex r = parse_regex(pattern, RegexEncoding::kJsonString);
  std::vector<Expr> parts;
  parts.push_back(Expr::byte('"'));
  if (!r.anchored_start) parts.push_back(Expr::star(string_char(false)));
  parts.push_back(std::move(r.expr));
  if (!r.anchored_end) parts.push_back(Expr::star(string_char(false)));
  parts.push_back(Expr::byte('"'));
  return Expr::seq(std::move(parts));
}

std::optional<Expr> string_with_format(std::string_view format) {
  // Full dates with the days of each month; February 29 only in leap years.
  static const std::string kDate =
      "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]"
      "[0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:"
      "[02468][048]|[13579][26])00)-02-29)";
  static const std::string kTime =
      "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5]"
      "[0-9])";
  if (format == "date") return from_regex(kDate);
  if (format == "time") return from_regex(kTime);
  if (format == "date-time") return from_regex(kDate + "T" + kTime);
  if (format == "uuid") {
    return from_regex(
        "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}");
  }
  if (format == "email") {
    // A dot-atom local part and a domain of letter/digit/hyphen labels (a subset of RFC 5321).
    return from_regex(
        "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:"
        "[A-Za-z0-9-]*[A-Za-z0-9])?\\.)+[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?");
  }
  if (format == "ipv4") {
    return from_regex(
        "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|"
        "[1-9]?[0-9])){3}");
  }
  return std::nullopt;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<uint8_t>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

Expr integer_value() {
  return Expr::seq(
      {Expr::optional(Expr::byte('-')),
       Expr::alt({Expr::byte('0'), Expr::seq({digit_range('1', '9'), Expr::star(digit())})})});
}

Expr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) {
    throw InvalidArgument(fmt::format("no integer lies in [{}, {}]", *lo, *hi));
  }
  std::vector<Expr> options;
  // Non-negative part [max(lo, 0), hi].
  if (!hi || *hi >= 0) {
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    options.push_back(
        unsigned_range(a, hi ? std::optional<uint64_t>(static_cast<uint64_t>(*hi)) : std::nullopt));
  }
  // Negative part [lo, min(hi, -1)] as "-" and magnitudes [-min(hi, -1), -lo].
  if (!lo || *lo < 0) {
    const uint64_t a = hi && *hi < -1 ? static_cast<uint64_t>(-(*hi)) : 1;
    const std::optional<uint64_t> b =
        lo ? std::optional<uint64_t>(static_cast<uint64_t>(-(*lo))) : std::nullopt;
    options.push_back(Expr::seq({Expr::byte('-'), unsigned_range(a, b)}));
  }
  return Expr::alt(std::move(options));
}

Expr number_value() {
  return Expr::seq(
      {integer_value(), any_fraction(),
       Expr::optional(Expr::seq({Expr::codepoints({{'e', 'e'}, {'E', 'E'}}),
                                 Expr::optional(Expr::codepoints({{'+', '+'}, {'-', '-'}})),
                                 Expr::plus(digit())}))});
}

Expr number_range(std::optional<Bound> lo, std::optional<Bound> hi) {
  std::vector<Expr> options;
  // v >= 0: magnitudes in [max(lo, 0), hi].
  if (!hi || hi->value > 0 || (hi->value == 0 && hi->inclusive)) {
    Bound l{0, true};
    if (lo && lo->value >= 0) l = *lo;
    if (auto e = magnitude_range(l, hi)) options.push_back(std::move(*e));
  }
  // v <= 0 written with a minus: magnitudes in [max(-hi, 0), -lo].
  if (!lo || lo->value < 0 || (lo->value == 0 && lo->inclusive)) {
    Bound l{0, true};
    if (hi && hi->value <= 0) l = Bound{-hi->value, hi->inclusive};
    std::optional<Bound> u;
    if (lo) u = Bound{-lo->value, lo->inclusive};
    if (auto e = magnitude_range(l, u))
      options.push_back(Expr::seq({Expr::byte('-'), std::move(*e)}));
  }
  if (options.empty()) throw InvalidArgument("no number lies within the bounds");
  return Expr::alt(std::move(options));
}

}  // namespace pagoda::structured::json
