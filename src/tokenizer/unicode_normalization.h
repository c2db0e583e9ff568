#pragma once
// Unicode normalization forms (UAX #15) and lowercasing, needed by the NFC/NFD/NFKC/NFKD,
// Lowercase and BertNormalizer normalizers. The tables are generated from the Unicode Character
// Database by gen_nfc_tables.py, gen_compat_tables.py and gen_lowercase_tables.py.
#include <string>
#include <string_view>

namespace pagoda {

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };

/// Returns `form` of valid UTF-8 text; ASCII (and for NFC, text already in NFC) returns quickly.
[[nodiscard]] std::string unicode_normalize(std::string_view text, NormalizationForm form);

/// NFC of valid UTF-8 text; text already in NFC is returned unchanged quickly.
[[nodiscard]] inline std::string nfc_normalize(std::string_view text) {
  return unicode_normalize(text, NormalizationForm::kNfc);
}

/// Lowercases valid UTF-8 text one character at a time, without context (so a final capital
/// sigma becomes "σ"), as Rust's char::to_lowercase and so HF's Lowercase normalizer do.
[[nodiscard]] std::string unicode_lowercase(std::string_view text);

}  // namespace pagoda
