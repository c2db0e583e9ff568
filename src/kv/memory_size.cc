#include "kv/memory_size.h"

#include <cctype>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda::kv {

namespace {

[[noreturn]] void fail(std::string_view text, std::string_view why) {
  throw InvalidArgument(
      fmt::format("invalid memory size '{}': {} (expected e.g. 4G, 512M, 1.5G "
                  "or plain bytes)",
                  text, why));
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

int64_t parse_memory_size(std::string_view text) {
  size_t pos = 0;
  // Integer and fraction digits, kept exact in 128 bits (no floating-point rounding of "1.1G").
  unsigned __int128 integer = 0;
  unsigned __int128 fraction = 0;
  unsigned __int128 fraction_scale = 1;
  constexpr unsigned __int128 kLimit = static_cast<unsigned __int128>(1) << 64;
  const size_t integer_start = pos;
  while (pos < text.size() && is_digit(text[pos])) {
    integer = integer * 10 + (text[pos++] - '0');
    if (integer > kLimit) fail(text, "too large");
  }
  const bool has_integer = pos > integer_start;
  bool has_fraction = false;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    const size_t fraction_start = pos;
    while (pos < text.size() && is_digit(text[pos])) {
      if (fraction_scale < static_cast<unsigned __int128>(1000000000000000000ULL)) {
        fraction = fraction * 10 + (text[pos] - '0');
        fraction_scale *= 10;
      }  // digits past 18 cannot change the byte count of anything below 2^60 * 1e-18
      ++pos;
    }
    has_fraction = pos > fraction_start;
    if (!has_fraction) fail(text, "no digits after the decimal point");
  }
  if (!has_integer && !has_fraction) fail(text, "no number");

  unsigned __int128 multiplier = 1;
  if (pos < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[pos]))) {
      case 'K':
        multiplier = 1ULL << 10;
        break;
      case 'M':
        multiplier = 1ULL << 20;
        break;
      case 'G':
        multiplier = 1ULL << 30;
        break;
      case 'T':
        multiplier = 1ULL << 40;
        break;
      case 'B':
        break;  // "512B"
      default:
        fail(text, "unknown suffix");
    }
    const bool unit_is_bytes = std::toupper(static_cast<unsigned char>(text[pos])) == 'B';
    ++pos;
    std::string rest;
    for (; pos < text.size(); ++pos) rest += static_cast<char>(std::toupper(text[pos]));
    if (!unit_is_bytes && !rest.empty() && rest != "B" && rest != "IB")
      fail(text, "unknown suffix");
    if (unit_is_bytes && !rest.empty()) fail(text, "unknown suffix");
  }
  if (multiplier == 1 && has_fraction) fail(text, "a fraction of a byte");

  const unsigned __int128 bytes = integer * multiplier + fraction * multiplier / fraction_scale;
  if (bytes > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
    fail(text, "too large");
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace pagoda::kv
