#pragma once
// The BPE model of tokenizer.json: vocabulary, ranked merges and the per-word merge loop, for both
// byte-level (GPT-2, Llama 3, Qwen2) and sentencepiece-style (Llama 2, Mistral) vocabularies.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_util.h"
#include "tokenizer/string_map.h"

namespace pagoda {

/// A BPE vocabulary and merge table; encode_word is const and thread-safe.
class BpeModel {
 public:
  /// Reads the "model" object of tokenizer.json; errors name `file`.
  BpeModel(const tokenizer_json::Json& j, const std::string& file);
  ~BpeModel();

  /// Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  [[nodiscard]] std::optional<int32_t> token_to_id(std::string_view token) const;
  /// The token of id, or nullptr when the vocabulary has no such id.
  [[nodiscard]] const std::string* id_to_token(int32_t id) const;
  /// One more than the largest id in the vocabulary.
  [[nodiscard]] int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  [[nodiscard]] bool byte_fallback() const { return byte_fallback_; }

 private:
  class WordCache;

  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  TokenIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<char> has_id_;  // whether id_to_token_[id] is a real entry
  PairMap merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  std::array<int32_t, 256> byte_ids_{};  // id of "<0xXX>" per byte, -1 when absent
  std::unique_ptr<WordCache> cache_;
};

}  // namespace pagoda
