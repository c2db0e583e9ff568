#pragma once
// Python's str semantics on UTF-8 text where chat templates meet non-ASCII content: whitespace
// (str.strip/split/isspace) and simple case mapping (str.lower/upper/title/capitalize) for the
// Latin, Greek, Cyrillic, Armenian and fullwidth alphabets. Other scripts are left unchanged,
// which for caseless scripts (CJK, Arabic, ...) is also what Python does.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::tmpl {

/// Decodes UTF-8 (invalid bytes decode as themselves, so nothing is lost).
[[nodiscard]] std::vector<uint32_t> utf8_decode(std::string_view s);
/// Appends one code point as UTF-8.
void utf8_append(std::string& out, uint32_t cp);
/// The UTF-8 encoding of code point cp, appended to out (no raw-byte mapping: for string escapes).
void encode_utf8(std::string& out, uint32_t cp);

/// Python's str.isspace() for one code point.
[[nodiscard]] bool is_unicode_space(uint32_t cp);
/// Simple lower/upper case mapping of one code point (identity where there is none).
[[nodiscard]] uint32_t unicode_lower(uint32_t cp);
[[nodiscard]] uint32_t unicode_upper(uint32_t cp);
/// Whether a code point is a cased letter (has a case mapping or is a lowercase-only letter).
[[nodiscard]] bool is_unicode_cased(uint32_t cp);

/// Python's str.lower(), str.upper() (with "ß" -> "SS"), str.title(), str.capitalize() and
/// str.swapcase().
[[nodiscard]] std::string py_lower(std::string_view s);
[[nodiscard]] std::string py_upper(std::string_view s);
[[nodiscard]] std::string py_title(std::string_view s);
[[nodiscard]] std::string py_capitalize(std::string_view s);
[[nodiscard]] std::string py_swapcase(std::string_view s);

/// Python's str.splitlines(): lines without their breaks, a break being \n, \r, \r\n, \v, \f,
/// \x1c-\x1e, U+0085, U+2028 or U+2029; no empty last line after a final break.
[[nodiscard]] std::vector<std::string> py_splitlines(std::string_view s);

}  // namespace pagoda::tmpl
