#pragma once
// GPT-2's reversible byte <-> printable-character mapping, used by the ByteLevel pre-tokenizer
// (bytes to characters) and the ByteLevel decoder (back to bytes).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pagoda::byte_level {

/// The UTF-8 encoding of the character that stands for each byte.
[[nodiscard]] const std::array<std::string, 256>& byte_to_chars();

/// Appends the mapped characters of every byte of text to out.
void map_bytes(std::string_view text, std::string& out);

/// Appends the bytes that a mapped token stands for; returns false (appending nothing) when some
/// character is not in the mapping, in which case HF keeps the token's raw UTF-8.
[[nodiscard]] bool unmap_token(std::string_view token, std::string& out);

}  // namespace pagoda::byte_level
