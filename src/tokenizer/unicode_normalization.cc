#include "tokenizer/unicode_normalization.h"

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <vector>

#include "tokenizer/utf8.h"

namespace pagoda {

namespace {

struct NfcDecomposition {
  char32_t code_point, first, second;  // second is 0 for singleton decompositions
};
struct NfcCombiningClass {
  char32_t code_point;
  uint8_t combining_class;
};
struct NfcComposition {
  char32_t first, second, composite;
};

struct CompatDecomposition {
  char32_t code_point;
  uint16_t offset, length;  // into kCompatDecompositionChars
};
struct LowercaseMapping {
  char32_t code_point, first, second;  // second is 0 for one-character mappings
};

#include "tokenizer/compat_tables.inc"
#include "tokenizer/lowercase_tables.inc"
#include "tokenizer/nfc_tables.inc"

constexpr char32_t kHangulSBase = 0xAC00, kHangulLBase = 0x1100, kHangulVBase = 0x1161,
                   kHangulTBase = 0x11A7;
constexpr char32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28;
constexpr char32_t kHangulNCount = kHangulVCount * kHangulTCount;
constexpr char32_t kHangulSCount = kHangulLCount * kHangulNCount;
// Every code point that is not NFC-stable on its own lies below this bound.
constexpr char32_t kQuickCheckLimit = 0x30000;

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = std::end(kNfcCombiningClasses);
  const auto* it =
      std::lower_bound(std::begin(kNfcCombiningClasses), end, cp,
                       [](const NfcCombiningClass& e, char32_t c) { return e.code_point < c; });
  return it != end && it->code_point == cp ? it->combining_class : 0;
}

const NfcDecomposition* find_decomposition(char32_t cp) {
  const auto* end = std::end(kNfcDecompositions);
  const auto* it =
      std::lower_bound(std::begin(kNfcDecompositions), end, cp,
                       [](const NfcDecomposition& e, char32_t c) { return e.code_point < c; });
  return it != end && it->code_point == cp ? it : nullptr;
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kHangulLBase && a < kHangulLBase + kHangulLCount && b >= kHangulVBase &&
      b < kHangulVBase + kHangulVCount) {
    return kHangulSBase + ((a - kHangulLBase) * kHangulVCount + (b - kHangulVBase)) * kHangulTCount;
  }
  if (a >= kHangulSBase && a < kHangulSBase + kHangulSCount &&
      (a - kHangulSBase) % kHangulTCount == 0 && b > kHangulTBase &&
      b < kHangulTBase + kHangulTCount) {
    return a + (b - kHangulTBase);
  }
  const auto* end = std::end(kNfcCompositions);
  const auto* it = std::lower_bound(std::begin(kNfcCompositions), end, std::pair(a, b),
                                    [](const NfcComposition& e, std::pair<char32_t, char32_t> k) {
                                      return std::pair(e.first, e.second) < k;
                                    });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

template <typename Entry, size_t N>
const Entry* find_entry(const Entry (&table)[N], char32_t cp) {
  const Entry* end = table + N;
  const Entry* it =
      std::lower_bound(table, end, cp, [](const Entry& e, char32_t c) { return e.code_point < c; });
  return it != end && it->code_point == cp ? it : nullptr;
}

// Compatibility entries hold the full NFKD of their code point; every other code point
// decomposes canonically, and NFKD equals NFD there.
void decompose(char32_t cp, bool compat, std::vector<char32_t>& out) {
  if (compat) {
    if (const CompatDecomposition* d = find_entry(kCompatDecompositions, cp)) {
      const char32_t* chars = kCompatDecompositionChars + d->offset;
      out.insert(out.end(), chars, chars + d->length);
      return;
    }
  }
  if (cp >= kHangulSBase && cp < kHangulSBase + kHangulSCount) {
    const char32_t s = cp - kHangulSBase;
    out.push_back(kHangulLBase + s / kHangulNCount);
    out.push_back(kHangulVBase + (s % kHangulNCount) / kHangulTCount);
    if (s % kHangulTCount != 0) out.push_back(kHangulTBase + s % kHangulTCount);
    return;
  }
  if (const NfcDecomposition* d = find_decomposition(cp)) {
    decompose(d->first, compat, out);
    if (d->second != 0) decompose(d->second, compat, out);
    return;
  }
  out.push_back(cp);
}

// Code points that may change under NFC or combine with a neighbour (the NFC_QC "No" and "Maybe"
// sets, plus every non-starter to be safe about ordering). Precomposed letters such as "ệ" are
// stable. Text without any of these is already NFC and skips the full algorithm.
const std::bitset<kQuickCheckLimit>& unstable_code_points() {
  static const std::bitset<kQuickCheckLimit> bits = [] {
    std::bitset<kQuickCheckLimit> b;
    for (const auto& e : kNfcCombiningClasses) b.set(e.code_point);
    for (const char32_t c : kNfcChangedAlone) b.set(c);
    for (const auto& e : kNfcCompositions) b.set(e.second);
    for (char32_t c = kHangulVBase; c < kHangulVBase + kHangulVCount; ++c) b.set(c);
    for (char32_t c = kHangulTBase + 1; c < kHangulTBase + kHangulTCount; ++c) b.set(c);
    return b;
  }();
  return bits;
}

bool is_quick_nfc(std::string_view text) {
  const auto& unstable = unstable_code_points();
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0xCC) {  // below U+0300: always stable
      i += utf8::char_length(static_cast<unsigned char>(text[i]));
      continue;
    }
    const char32_t cp = utf8::decode_at(text, i);
    if (cp < kQuickCheckLimit && unstable.test(cp)) return false;
  }
  return true;
}

bool is_ascii(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

std::string encode(const std::vector<char32_t>& chars, size_t size_hint) {
  std::string out;
  out.reserve(size_hint);
  for (const char32_t c : chars) utf8::append(out, c);
  return out;
}

}  // namespace

std::string unicode_normalize(std::string_view text, NormalizationForm form) {
  if (is_ascii(text)) return std::string(text);
  if (form == NormalizationForm::kNfc && is_quick_nfc(text)) return std::string(text);
  // Full algorithm (UAX #15): decomposition, canonical ordering, then for the C forms canonical
  // composition.
  const bool compat = form == NormalizationForm::kNfkc || form == NormalizationForm::kNfkd;
  std::vector<char32_t> chars;
  chars.reserve(text.size());
  for (size_t i = 0; i < text.size();) decompose(utf8::decode_at(text, i), compat, chars);
  for (size_t i = 1; i < chars.size(); ++i) {
    const uint8_t cc = combining_class(chars[i]);
    if (cc == 0) continue;
    for (size_t j = i; j > 0; --j) {
      const uint8_t prev = combining_class(chars[j - 1]);
      if (prev == 0 || prev <= cc) break;
      std::swap(chars[j - 1], chars[j]);
    }
  }
  if (form == NormalizationForm::kNfd || form == NormalizationForm::kNfkd) {
    return encode(chars, text.size());
  }
  std::vector<char32_t> result;
  result.reserve(chars.size());
  ptrdiff_t starter = -1;
  for (const char32_t c : chars) {
    const uint8_t cc = combining_class(c);
    if (starter >= 0) {
      const bool adjacent = static_cast<size_t>(starter) + 1 == result.size();
      const uint8_t last_cc = combining_class(result.back());
      const bool blocked = !adjacent && (last_cc == 0 || last_cc >= cc);
      if (!blocked) {
        if (const char32_t composite = compose_pair(result[starter], c)) {
          result[starter] = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<ptrdiff_t>(result.size());
    result.push_back(c);
  }
  return encode(result, text.size());
}

std::string unicode_lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      out.push_back(b >= 'A' && b <= 'Z' ? static_cast<char>(b + ('a' - 'A')) : text[i]);
      ++i;
      continue;
    }
    const char32_t cp = utf8::decode_at(text, i);
    if (const LowercaseMapping* m = find_entry(kLowercaseMappings, cp)) {
      utf8::append(out, m->first);
      if (m->second != 0) utf8::append(out, m->second);
    } else {
      utf8::append(out, cp);
    }
  }
  return out;
}

}  // namespace pagoda
