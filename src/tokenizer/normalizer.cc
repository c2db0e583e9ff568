#include "tokenizer/normalizer.h"

#include <vector>

#include "tokenizer/pattern.h"
#include "tokenizer/unicode_nfc.h"
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

class NfcNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = nfc_normalize(text); }
};

// Strips Unicode whitespace; ASCII whitespace and the common Unicode spaces cover the cases HF's
// char::is_whitespace accepts in practice.
bool is_unicode_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

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
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(tj::get_bool(j, "strip_left", file, "Strip", true),
                                             tj::get_bool(j, "strip_right", file, "Strip", true));
  }
  tj::fail(file, "unsupported normalizer type '" + type + "'");
}

}  // namespace pagoda
