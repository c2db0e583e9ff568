#include "tokenizer/normalizer.h"

#include <vector>

#include "tokenizer/pattern.h"
#include "tokenizer/unicode_normalization.h"
#include "tokenizer/utf8.h"

namespace pagoda {

namespace {

namespace tj = tokenizer_json;

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// HF prepends only to non-empty text, so an empty input still encodes to no tokens.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(const tj::Json& j, const std::string& file)
      : pattern_(tj::require(j, "pattern", file, "Replace normalizer"), file,
                 "Replace normalizer pattern"),
        content_(tj::get_string(j, "content", file, "Replace normalizer")) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class UnicodeFormNormalizer final : public Normalizer {
 public:
  explicit UnicodeFormNormalizer(NormalizationForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = unicode_normalize(text, form_); }

 private:
  NormalizationForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = unicode_lowercase(text); }
};

// A pattern built in, never read from a file, so it always compiles.
Pattern builtin_pattern(const char* regex, const std::string& file) {
  return Pattern(tj::Json{{"Regex", regex}}, file, "built-in pattern");
}

// HF's StripAccents drops nonspacing marks (category Mn); it does not decompose first, so
// files pair it with a preceding NFD or NFKD.
class StripAccentsNormalizer final : public Normalizer {
 public:
  explicit StripAccentsNormalizer(const std::string& file)
      : marks_(builtin_pattern(R"(\p{Mn})", file)) {}
  void normalize(std::string& text) const override { text = marks_.replace_all(text, ""); }

 private:
  Pattern marks_;
};

// Strips Unicode whitespace; ASCII whitespace and the common Unicode spaces cover the cases HF's
// char::is_whitespace accepts in practice.
bool is_unicode_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// CJK Unified Ideographs and their extensions and compatibility blocks, as BERT defines them.
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// BERT's text cleanup, in HF's order: drop control characters (category C, except \t \n \r, and
// U+FFFD), turn whitespace into spaces, isolate CJK ideographs with spaces, strip accents (NFD,
// then drop Mn; on by default when lowercasing), lowercase.
class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(const tj::Json& j, const std::string& file)
      : clean_text_(tj::get_bool(j, "clean_text", file, "BertNormalizer", true)),
        handle_chinese_chars_(
            tj::get_bool(j, "handle_chinese_chars", file, "BertNormalizer", true)),
        lowercase_(tj::get_bool(j, "lowercase", file, "BertNormalizer", true)),
        strip_accents_(tj::get_bool(j, "strip_accents", file, "BertNormalizer", lowercase_)),
        controls_(builtin_pattern(R"((?![\t\n\r])[\p{C}\x{FFFD}])", file)),
        marks_(builtin_pattern(R"(\p{Mn})", file)) {}

  void normalize(std::string& text) const override {
    if (clean_text_) {
      text = controls_.replace_all(text, "");
      map_chars(text, [](char32_t c, std::string& out) {
        utf8::append(out, is_unicode_space(c) ? U' ' : c);
      });
    }
    if (handle_chinese_chars_) {
      map_chars(text, [](char32_t c, std::string& out) {
        if (is_chinese_char(c)) out.push_back(' ');
        utf8::append(out, c);
        if (is_chinese_char(c)) out.push_back(' ');
      });
    }
    if (strip_accents_) {
      text = marks_.replace_all(unicode_normalize(text, NormalizationForm::kNfd), "");
    }
    if (lowercase_) text = unicode_lowercase(text);
  }

 private:
  template <typename Fn>
  static void map_chars(std::string& text, Fn fn) {
    std::string out;
    out.reserve(text.size() + 8);
    for (size_t i = 0; i < text.size();) fn(utf8::decode_at(text, i), out);
    text = std::move(out);
  }

  bool clean_text_, handle_chinese_chars_, lowercase_, strip_accents_;
  Pattern controls_, marks_;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override;

 private:
  bool left_, right_;
};

void StripNormalizer::normalize(std::string& text) const {
  size_t begin = 0, end = text.size();
  if (left_) {
    while (begin < end) {
      size_t next = begin;
      if (!is_unicode_space(utf8::decode_at(text, next))) break;
      begin = next;
    }
  }
  if (right_) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t next = start;
      if (!is_unicode_space(utf8::decode_at(text, next))) break;
      end = start;
    }
  }
  text = text.substr(begin, end - begin);
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const tj::Json& j, const std::string& file) {
  const std::string type = tj::component_type(j, file, "normalizer");
  if (type == "Sequence") {
    const tj::Json& list = tj::require(j, "normalizers", file, "Sequence normalizer");
    if (!list.is_array()) tj::fail(file, "Sequence normalizer 'normalizers' must be an array");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& item : list) steps.push_back(make_normalizer(item, file));
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "Prepend") {
    return std::make_unique<PrependNormalizer>(tj::get_string(j, "prepend", file, "Prepend"));
  }
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(j, file);
  if (type == "NFC") return std::make_unique<UnicodeFormNormalizer>(NormalizationForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeFormNormalizer>(NormalizationForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeFormNormalizer>(NormalizationForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeFormNormalizer>(NormalizationForm::kNfkd);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>(file);
  if (type == "BertNormalizer") return std::make_unique<BertNormalizer>(j, file);
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(tj::get_bool(j, "strip_left", file, "Strip", true),
                                             tj::get_bool(j, "strip_right", file, "Strip", true));
  }
  tj::fail(file, "unsupported normalizer type '" + type + "'");
}

}  // namespace pagoda
