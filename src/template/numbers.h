#pragma once
// Number parsing for the template library that never throws: std::sto* throw std exceptions on
// bad digits or overflow, which would escape as something other than a TemplateError (found by
// fuzz_jinja).
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace pagoda::tmpl {

/// The integer `text` spells in `base`; nullopt on an empty string, a bad digit or overflow.
[[nodiscard]] inline std::optional<int64_t> parse_int(std::string_view text, int base = 10) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value, base);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

/// The double `text` spells (strtod: overflow gives +-inf, as Python's float() of a huge literal
/// would not, but a template cannot tell).
[[nodiscard]] inline double parse_double(const std::string& text) {
  return std::strtod(text.c_str(), nullptr);
}

}  // namespace pagoda::tmpl
