#pragma once
// Grammar expressions for JSON's primitive values: strings (plain, length-bounded, by pattern or
// format), integers and numbers (plain or within bounds). Private to the JSON Schema compiler.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "structured/grammar.h"

namespace pagoda::structured::json {

/// One character of a JSON string's content: a plain character or an escape. With
/// `single_codepoint`, \uXXXX escapes of surrogates are left out, so that one unit is always one
/// codepoint (for length bounds).
[[nodiscard]] Expr string_char(bool single_codepoint);
/// A whole JSON string with content of min..max characters (max < 0: unbounded).
[[nodiscard]] Expr string_value(int64_t min_length, int64_t max_length);
/// A JSON string whose decoded content matches pattern (JSON Schema semantics: a search unless
/// anchored with ^ / $). Throws InvalidArgument (the regex's error).
[[nodiscard]] Expr string_with_pattern(std::string_view pattern);
/// The JSON string of a format: date, time, date-time, uuid, email, ipv4. nullopt for others.
[[nodiscard]] std::optional<Expr> string_with_format(std::string_view format);
/// The JSON text of s as a string literal (json.dumps with ensure_ascii=False).
[[nodiscard]] std::string quote(std::string_view s);

/// A JSON integer without bounds: -?(0|[1-9][0-9]*).
[[nodiscard]] Expr integer_value();
/// A JSON integer in [lo, hi] (either may be absent). Throws InvalidArgument when empty.
[[nodiscard]] Expr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);
/// A JSON number without bounds.
[[nodiscard]] Expr number_value();
/// A bound of a number range: an integer value, inclusive or not.
struct Bound {
  int64_t value = 0;
  bool inclusive = true;
};
/// A JSON number (no exponent) within integer bounds. Throws InvalidArgument when empty.
[[nodiscard]] Expr number_range(std::optional<Bound> lo, std::optional<Bound> hi);

}  // namespace pagoda::structured::json
