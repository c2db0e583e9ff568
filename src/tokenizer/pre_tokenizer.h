#pragma once
// Pre-tokenizers of tokenizer.json: split each normalized piece into the words BPE runs on.
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_util.h"

namespace pagoda {

/// The words of one piece of input on their way through the pre-tokenizers.
struct PreTokenizedWords {
  std::vector<std::string> words;
  /// True while words[0] begins at offset 0 of the whole input (no added token or removed text
  /// before it). Metaspace's prepend_scheme "first" prepends only there: HF checks the word's
  /// original offset, so text after a leading special token gets no "▁".
  bool first_begins_input = false;
};

/// One pre-tokenizer; pre_tokenize is const and thread-safe.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Replaces each word by its sub-words (in order); empty words are dropped.
  virtual void pre_tokenize(PreTokenizedWords& words) const = 0;
};

/// Builds the pre-tokenizer described by j (Sequence, Split, ByteLevel, Metaspace, Whitespace,
/// WhitespaceSplit, Punctuation, Digits, BertPreTokenizer); throws InvalidArgument naming the
/// type and the file for anything else.
[[nodiscard]] std::unique_ptr<PreTokenizer> make_pre_tokenizer(const tokenizer_json::Json& j,
                                                               const std::string& file);

}  // namespace pagoda
