#pragma once
// A model's vocabulary as grammars see it: every token's bytes, the tokens sorted by their bytes
// (so that a walk over them shares the work of common prefixes, as over a trie), and the ids that
// end a text.
#include <array>
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

/// One node of the vocabulary's trie: the tokens sorted()[begin, end) share the node's prefix;
/// the node's children (one per next byte, in byte order) are nodes [first_child, first_child +
/// num_children). Tokens whose bytes are exactly the prefix (several ids may share bytes) are
/// sorted()[begin, begin + num_here).
struct TrieNode {
  int32_t begin = 0, end = 0;
  int32_t first_child = 0, num_children = 0;
  int32_t num_here = 0;
  uint8_t byte = 0;  // the last byte of the prefix
};

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
  /// The first index j > i of sorted() whose token does not share the first `depth` bytes of
  /// sorted()[i] (sorted().size() when none): the end of i's subtree at that depth. O(log n).
  [[nodiscard]] size_t skip_prefix(size_t i, int32_t depth) const;
  /// The trie of the tokens: node 0 is the root (the empty prefix).
  [[nodiscard]] const std::vector<TrieNode>& trie() const { return trie_; }
  /// The range [first, second) of sorted() whose tokens begin with byte b.
  [[nodiscard]] std::pair<size_t, size_t> first_byte_range(uint8_t b) const {
    return {first_byte_begin_[b], first_byte_begin_[static_cast<size_t>(b) + 1]};
  }
  /// The longest token in bytes.
  [[nodiscard]] int32_t max_token_bytes() const { return max_token_bytes_; }

 private:
  int32_t size_ = 0;
  std::string data_;
  std::vector<uint32_t> offsets_;  // [num tokens + 1] into data_
  std::vector<int32_t> sorted_, lcp_, eos_ids_;
  // lcp_min_[k][i] = min(lcp_[i .. i + 2^k)), for skip_prefix's binary lifting.
  std::vector<std::vector<int32_t>> lcp_min_;
  std::array<size_t, 257> first_byte_begin_{};
  std::vector<TrieNode> trie_;
  uint64_t fingerprint_ = 0;
  int32_t max_token_bytes_ = 0;
};

}  // namespace pagoda::structured
