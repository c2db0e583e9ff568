#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace pagoda::byte_level {

namespace {

struct Tables {
  std::array<std::string, 256> to_chars;
  std::array<int16_t, 512> from_code_point;  // -1 where the code point stands for no byte
};

// Printable bytes map to themselves; the rest are shifted to U+0100 and up, in byte order.
const Tables& tables() {
  static const Tables t = [] {
    Tables t{};
    t.from_code_point.fill(-1);
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const char32_t cp = printable ? static_cast<char32_t>(b) : 256 + shifted++;
      utf8::append(t.to_chars[b], cp);
      t.from_code_point[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_to_chars() { return tables().to_chars; }

void map_bytes(std::string_view text, std::string& out) {
  const auto& to_chars = tables().to_chars;
  for (const char c : text) out.append(to_chars[static_cast<unsigned char>(c)]);
}

bool unmap_token(std::string_view token, std::string& out) {
  const auto& from = tables().from_code_point;
  const size_t mark = out.size();
  size_t i = 0;
  while (i < token.size()) {
    if (utf8::valid_sequence_length(token, i) == 0) break;
    const char32_t cp = utf8::decode_at(token, i);
    if (cp >= from.size() || from[cp] < 0) {
      out.resize(mark);
      return false;
    }
    out.push_back(static_cast<char>(from[cp]));
  }
  if (i < token.size()) {
    out.resize(mark);
    return false;
  }
  return true;
}

}  // namespace pagoda::byte_level
