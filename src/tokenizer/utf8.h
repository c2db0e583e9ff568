#pragma once
// UTF-8 helpers shared by the tokenizer stages. Text is kept as UTF-8 bytes throughout; these
// functions walk it by code point and repair invalid input the way Rust's from_utf8_lossy does,
// because Hugging Face `tokenizers` (Rust) defines the behaviour we reproduce.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

/// Length in bytes of the valid UTF-8 sequence starting at s[i], or 0 if it is invalid there.
[[nodiscard]] size_t valid_sequence_length(std::string_view s, size_t i);

/// Decodes the code point at s[i] (which must start a valid sequence) and advances i past it.
[[nodiscard]] char32_t decode_at(std::string_view s, size_t& i);

/// Appends the UTF-8 encoding of cp to out.
void append(std::string& out, char32_t cp);

/// True when s is entirely valid UTF-8.
[[nodiscard]] bool is_valid(std::string_view s);

/// Replaces each maximal invalid subsequence with U+FFFD, exactly like Rust's from_utf8_lossy.
[[nodiscard]] std::string to_valid_lossy(std::string_view s);

/// Length of the UTF-8 character starting with lead byte b (1 for invalid leads).
[[nodiscard]] inline size_t char_length(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace pagoda::utf8
