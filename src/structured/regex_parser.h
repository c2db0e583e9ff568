#pragma once
// Regular expressions (the common subset of Python's `re` and ECMAScript that JSON Schema
// `pattern`s and vLLM's `regex` use) compiled into a grammar expression. The whole text must
// match (full-match semantics, as vLLM's regex constraint has); ^ and $ may only stand at the
// ends. Supported: literals, `.` (any character but \n), classes [...] / [^...] with ranges,
// \d \w \s \D \W \S (ASCII, as xgrammar), escapes \n \r \t \f \v \0 \xHH \uHHHH \u{H...},
// groups ( ), (?: ), (?P<name> ), (?<name> ), alternation, the quantifiers * + ? {m} {m,} {m,n}
// (lazy and possessive forms match the same language). Refused with the offset: backreferences,
// lookarounds, inline flags, \b \B, anchors inside the pattern.
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "structured/grammar.h"

namespace pagoda::structured {

/// How the characters a regex matches are written in the output.
enum class RegexEncoding : uint8_t {
  kRaw,         // as UTF-8 (a regex over the whole output)
  kJsonString,  // as the content of a JSON string: " \ and control characters escaped
};

/// A parsed pattern: the expression and whether it was anchored at each end.
struct ParsedRegex {
  Expr expr;
  bool anchored_start = false;  // began with ^ (or \A)
  bool anchored_end = false;    // ended with $ (or \Z, \z)
};

/// Parses pattern; throws InvalidArgument "regex: at offset N: ..." (N in bytes).
[[nodiscard]] ParsedRegex parse_regex(std::string_view pattern, RegexEncoding encoding);

/// One character of ranges written as encoding says (JSON: the escapes json.dumps writes).
[[nodiscard]] Expr encode_chars(const std::vector<std::pair<uint32_t, uint32_t>>& ranges,
                                RegexEncoding encoding);

}  // namespace pagoda::structured
