#pragma once
// The tokenizer of a model: reads tokenizer.json (and tokenizer_config.json beside it) and
// encodes/decodes exactly like Hugging Face `tokenizers` does with the same file.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

struct TokenizerImpl;

/// A loaded BPE tokenizer; copies share the same immutable data and every method is thread-safe.
class Tokenizer {
 public:
  /// Loads `path_or_dir`: a tokenizer.json file, or a directory holding one. Throws NotFound for a
  /// missing file and InvalidArgument (naming the file and field) for a malformed or unsupported
  /// one.
  [[nodiscard]] static Tokenizer load(const std::string& path_or_dir);

  /// The ids of text (invalid UTF-8 is repaired to U+FFFD first). add_special_tokens applies the
  /// post-processor (e.g. BOS); special tokens written in the text are always recognised.
  [[nodiscard]] std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;

  /// The text of ids; throws InvalidArgument naming an id outside [0, vocab_size()).
  [[nodiscard]] std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  /// One more than the largest id (model vocabulary and added tokens).
  [[nodiscard]] int32_t vocab_size() const;
  [[nodiscard]] std::optional<int32_t> token_to_id(std::string_view token) const;
  /// The raw vocabulary string of id (empty for an unused id); throws InvalidArgument out of range.
  [[nodiscard]] std::string id_to_token(int32_t id) const;
  /// The bytes id adds to a decoded text when it follows other tokens: byte-level symbols and
  /// byte-fallback tokens as their raw bytes (possibly part of a UTF-8 character), a sentencepiece
  /// "▁" as a space (also at the start of a completion, which is decoded after the prompt). Empty
  /// for an unused id; throws InvalidArgument out of range.
  [[nodiscard]] std::string token_bytes(int32_t id) const;
  /// Whether id is an added token marked special (skipped by decode with skip_special_tokens).
  [[nodiscard]] bool is_special(int32_t id) const;

  /// BOS from tokenizer_config.json, else the single id the post-processor puts in front.
  [[nodiscard]] std::optional<int32_t> bos_id() const;
  /// EOS from tokenizer_config.json plus generation_config.json's eos_token_id, deduplicated.
  [[nodiscard]] std::vector<int32_t> eos_ids() const;
  [[nodiscard]] std::string bos_token() const;
  [[nodiscard]] std::string eos_token() const;
  /// tokenizer_config.json's add_bos_token / add_eos_token when given.
  [[nodiscard]] std::optional<bool> add_bos_token() const;
  [[nodiscard]] std::optional<bool> add_eos_token() const;
  /// The chat template (Jinja source), empty when the model has none.
  [[nodiscard]] const std::string& chat_template() const;
  /// The path of the tokenizer.json that was loaded.
  [[nodiscard]] const std::string& path() const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const TokenizerImpl> impl_;
};

}  // namespace pagoda
