#pragma once
// Added tokens (special and not) and how HF finds them inside text before the model runs:
// leftmost-longest matching with the single_word, lstrip and rstrip options.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_util.h"
#include "tokenizer/string_map.h"

namespace pagoda {

class Normalizer;

/// One entry of tokenizer.json's added_tokens.
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

/// A piece of input text: either an added token (id >= 0) or text for the normal pipeline.
struct TextSplit {
  std::string text;
  int32_t added_id = -1;
};

/// Finds a fixed set of tokens in text, leftmost-longest, as HF's AddedVocabulary does.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  /// `tokens` must outlive the matcher; `patterns[i]` is the string to look for for tokens[i].
  AddedTokenMatcher(const std::vector<const AddedToken*>& tokens,
                    const std::vector<std::string>& patterns);

  /// Splits text into added tokens and the text between them (empty text pieces dropped).
  void split(std::string_view text, std::vector<TextSplit>& out) const;
  [[nodiscard]] bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    std::unordered_map<unsigned char, int32_t> children;
    int32_t token = -1;  // index into tokens_ of the token ending here
  };
  std::vector<Node> nodes_;
  std::vector<const AddedToken*> tokens_;
  std::vector<size_t> lengths_;
  std::array<bool, 256> first_byte_{};
};

/// All added tokens of a tokenizer, with the two matchers HF uses (raw text, then normalized).
class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  /// Reads added_tokens; normalized tokens are matched by their normalized form.
  AddedVocabulary(const tokenizer_json::Json& list, const Normalizer* normalizer,
                  const std::string& file);
  // The matchers point into tokens_, whose buffer survives a move but not a copy.
  AddedVocabulary(AddedVocabulary&&) = default;
  AddedVocabulary& operator=(AddedVocabulary&&) = default;
  AddedVocabulary(const AddedVocabulary&) = delete;
  AddedVocabulary& operator=(const AddedVocabulary&) = delete;

  [[nodiscard]] const AddedTokenMatcher& raw_matcher() const { return raw_; }
  [[nodiscard]] const AddedTokenMatcher& normalized_matcher() const { return normalized_; }
  [[nodiscard]] const AddedToken* find_id(int32_t id) const;
  [[nodiscard]] std::optional<int32_t> find_content(std::string_view content) const;
  [[nodiscard]] int32_t max_id() const { return max_id_; }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  TokenIdMap by_content_;
  AddedTokenMatcher raw_, normalized_;
  int32_t max_id_ = -1;
};

}  // namespace pagoda
