#include "template/unicode.h"

namespace pagoda::tmpl {

namespace {

// Invalid UTF-8 bytes decode to U+DC80..U+DCFF and encode back to the same byte.
constexpr uint32_t kRawByteBase = 0xDC00;

// Ranges where upper and lower case alternate: even code point upper, odd lower (or the reverse
// when upper_odd).
struct AlternatingRange {
  uint32_t first;
  uint32_t last;
  bool upper_odd;
};

constexpr AlternatingRange kAlternating[] = {
    {0x0100, 0x012F, false}, {0x0132, 0x0137, false}, {0x0139, 0x0148, true},
    {0x014A, 0x0177, false}, {0x0179, 0x017E, true},  {0x01DE, 0x01EF, false},
    {0x01F8, 0x021F, false}, {0x0222, 0x0233, false}, {0x03D8, 0x03EF, false},
    {0x0460, 0x0481, false}, {0x048A, 0x04BF, false}, {0x04C1, 0x04CE, true},
    {0x04D0, 0x052F, false}, {0x1E00, 0x1E95, false}, {0x1EA0, 0x1EFF, false},
};

const AlternatingRange* find_alternating(uint32_t cp) {
  for (const auto& r : kAlternating) {
    if (cp >= r.first && cp <= r.last) return &r;
  }
  return nullptr;
}

bool is_upper_in(const AlternatingRange& r, uint32_t cp) { return ((cp & 1) != 0) == r.upper_odd; }

}  // namespace

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int extra = c >= 0xf0 && c < 0xf8 ? 3 : c >= 0xe0 && c < 0xf0 ? 2 : c >= 0xc0 ? 1 : 0;
    if (c < 0x80) {
      out.push_back(c);
      ++i;
      continue;
    }
    bool valid = extra > 0 && i + static_cast<size_t>(extra) < s.size();
    for (int k = 1; valid && k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0xc0) != 0x80) valid = false;
    }
    if (!valid) {
      out.push_back(kRawByteBase + c);  // a stray byte, kept as is (Python's surrogateescape)
      ++i;
      continue;
    }
    uint32_t cp = c & (0x3fu >> extra);
    for (int k = 1; k <= extra; ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3fu);
    }
    out.push_back(cp);
    i += static_cast<size_t>(extra) + 1;
  }
  return out;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp >= kRawByteBase + 0x80 && cp <= kRawByteBase + 0xff) {
    out += static_cast<char>(cp - kRawByteBase);
  } else {
    encode_utf8(out, cp);
  }
}

void encode_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

bool is_unicode_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

uint32_t unicode_lower(uint32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 0x20 : cp;
  if ((cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)) return cp + 0x20;
  if (cp == 0x178) return 0xFF;
  if (const AlternatingRange* r = find_alternating(cp)) return is_upper_in(*r, cp) ? cp + 1 : cp;
  if (cp == 0x386) return 0x3AC;
  if (cp >= 0x388 && cp <= 0x38A) return cp + 0x25;
  if (cp == 0x38C) return 0x3CC;
  if (cp == 0x38E || cp == 0x38F) return cp + 0x3F;
  if (cp >= 0x391 && cp <= 0x3AB && cp != 0x3A2) return cp + 0x20;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 0x50;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 0x20;
  if (cp == 0x4C0) return 0x4CF;
  if (cp >= 0x531 && cp <= 0x556) return cp + 0x30;
  if (cp >= 0xFF21 && cp <= 0xFF3A) return cp + 0x20;
  return cp;
}

uint32_t unicode_upper(uint32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z' ? cp - 0x20 : cp;
  if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 0x20;
  if (cp == 0xFF) return 0x178;
  if (cp == 0xB5) return 0x39C;
  if (cp == 0x131) return 'I';
  if (cp == 0x17F) return 'S';
  if (const AlternatingRange* r = find_alternating(cp)) return is_upper_in(*r, cp) ? cp : cp - 1;
  if (cp == 0x3AC) return 0x386;
  if (cp >= 0x3AD && cp <= 0x3AF) return cp - 0x25;
  if (cp == 0x3CC) return 0x38C;
  if (cp == 0x3CD || cp == 0x3CE) return cp - 0x3F;
  if (cp == 0x3C2) return 0x3A3;
  if (cp >= 0x3B1 && cp <= 0x3CB) return cp - 0x20;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 0x20;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 0x50;
  if (cp == 0x4CF) return 0x4C0;
  if (cp >= 0x561 && cp <= 0x586) return cp - 0x30;
  if (cp >= 0xFF41 && cp <= 0xFF5A) return cp - 0x20;
  return cp;
}

bool is_unicode_cased(uint32_t cp) {
  return unicode_lower(cp) != cp || unicode_upper(cp) != cp || cp == 0xDF || cp == 0x138 ||
         cp == 0x149 || cp == 0xAA || cp == 0xBA;
}

std::string py_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : utf8_decode(s)) {
    if (cp == 0x130) {
      out += "i\xcc\x87";  // İ lowers to i + combining dot above
    } else {
      utf8_append(out, unicode_lower(cp));
    }
  }
  return out;
}

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : utf8_decode(s)) {
    if (cp == 0xDF) {
      out += "SS";
    } else {
      utf8_append(out, unicode_upper(cp));
    }
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool prev_cased = false;
  for (uint32_t cp : utf8_decode(s)) {
    if (prev_cased) {
      utf8_append(out, unicode_lower(cp));
    } else if (cp == 0xDF) {
      out += "Ss";
    } else {
      utf8_append(out, unicode_upper(cp));
    }
    prev_cased = is_unicode_cased(cp);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (uint32_t cp : utf8_decode(s)) {
    if (first && cp == 0xDF) {
      out += "Ss";
    } else {
      utf8_append(out, first ? unicode_upper(cp) : unicode_lower(cp));
    }
    first = false;
  }
  return out;
}

std::string py_swapcase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : utf8_decode(s)) {
    const uint32_t lower = unicode_lower(cp);
    if (cp == 0xDF) {
      out += "SS";
    } else {
      utf8_append(out, lower != cp ? lower : unicode_upper(cp));
    }
  }
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  auto byte = [&](size_t i) { return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u; };
  std::vector<std::string> lines;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    const unsigned c = byte(i);
    size_t length = 0;  // bytes of the line break at i, 0 where there is none
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) length = 1;
    if (c == '\r') length = byte(i + 1) == '\n' ? 2 : 1;
    if (c == 0xc2 && byte(i + 1) == 0x85) length = 2;                               // U+0085
    if (c == 0xe2 && byte(i + 1) == 0x80 && (byte(i + 2) | 1) == 0xa9) length = 3;  // U+2028/9
    if (length == 0) {
      ++i;
      continue;
    }
    lines.emplace_back(s.substr(start, i - start));
    i += length;
    start = i;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

}  // namespace pagoda::tmpl
