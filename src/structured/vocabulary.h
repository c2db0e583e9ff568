#pragma once
// A model's vocabulary as grammars see it: every token's bytes, the tokens sorted by their bytes
// (so that a walk over them shares the work of common prefixes, as over a trie), and the ids that
// end a text.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {
class Tokenizer;
}

namespace pagoda::structured {

/// Immutable; shared by every grammar compiled for one model.
class Vocabulary {
 public:
  /// token_bytes[id] for ids [0, token_bytes.size()); an empty string is a token no grammar can
  /// produce (special tokens, unused ids). size >= token_bytes.size() is the mask width (the
  /// model's vocabulary, which may be padded past the tokenizer's). eos_ids end a text.
  Vocabulary(std::vector<std::string> token_bytes, int32_t size, std::vector<int32_t> eos_ids);

  /// Every non-special token of tokenizer by Tokenizer::token_bytes; special added tokens and
  /// eos_ids are never text.
  [[nodiscard]] static std::shared_ptr<const Vocabulary> from_tokenizer(
      const Tokenizer& tokenizer, int32_t model_vocab_size, std::span<const int32_t> eos_ids);

  /// The mask width in tokens.
  [[nodiscard]] int32_t size() const { return size_; }
  [[nodiscard]] int32_t mask_words() const { return (size_ + 31) / 32; }
  [[nodiscard]] std::string_view bytes(int32_t id) const {
    return std::string_view(data_).substr(
        offsets_[static_cast<size_t>(id)],
        offsets_[static_cast<size_t>(id) + 1] - offsets_[static_cast<size_t>(id)]);
  }
  /// Ids with bytes, sorted by their bytes.
  [[nodiscard]] const std::vector<int32_t>& sorted() const { return sorted_; }
  /// lcp()[i]: the length of the common prefix of sorted()[i] and sorted()[i - 1] (0 for i = 0).
  [[nodiscard]] const std::vector<int32_t>& lcp() const { return lcp_; }
  [[nodiscard]] const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  /// A hash of the contents, for caches keyed by vocabulary.
  [[nodiscard]] uint64_t fingerprint() const { return fingerprint_; }
  /// The longest token in bytes.
  [[nodiscard]] int32_t max_token_bytes() const { return max_token_bytes_; }

 private:
  int32_t size_ = 0;
  std::string data_;
  std::vector<uint32_t> offsets_;  // [num tokens + 1] into data_
  std::vector<int32_t> sorted_, lcp_, eos_ids_;
  uint64_t fingerprint_ = 0;
  int32_t max_token_bytes_ = 0;
};

}  // namespace pagoda::structured
