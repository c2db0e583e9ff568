#pragma once
// Pre-tokenizers of tokenizer.json: split each normalized piece into the words BPE runs on.
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_util.h"

namespace pagoda {

/// One pre-tokenizer; pre_tokenize is const and thread-safe.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Replaces each word in `words` by its sub-words (in order); empty words are dropped.
  virtual void pre_tokenize(std::vector<std::string>& words) const = 0;
};

/// Builds the pre-tokenizer described by j (Sequence, Split, ByteLevel); throws
/// InvalidArgument naming the type and the file for anything else.
[[nodiscard]] std::unique_ptr<PreTokenizer> make_pre_tokenizer(const tokenizer_json::Json& j,
                                                               const std::string& file);

}  // namespace pagoda
