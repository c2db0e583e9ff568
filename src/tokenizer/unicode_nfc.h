#pragma once
// Unicode Normalization Form C, needed by the `NFC` normalizer (Qwen2 and others). The tables are
// generated from the Unicode Character Database by gen_nfc_tables.py.
#include <string>
#include <string_view>

namespace pagoda {

/// Returns the NFC form of valid UTF-8 text; text already in NFC is returned unchanged quickly.
[[nodiscard]] std::string nfc_normalize(std::string_view text);

}  // namespace pagoda
