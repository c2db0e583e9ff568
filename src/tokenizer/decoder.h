#pragma once
// Decoders of tokenizer.json: turn the token strings of ids back into text.
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_util.h"

namespace pagoda {

/// One decoder step over the whole token list (HF's decode_chain); const and thread-safe.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  /// The bytes one token adds in the middle of a text: no UTF-8 repair and none of the changes
  /// decoders make only at the start of a text (a stripped leading space). For matching grammars
  /// over the vocabulary. The default runs decode_chain on the token alone.
  virtual void token_bytes(std::string& token) const;
};

/// Builds the decoder described by j (Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip,
/// Metaspace, WordPiece, BPEDecoder); throws InvalidArgument naming the type and the file for
/// anything else.
[[nodiscard]] std::unique_ptr<Decoder> make_decoder(const tokenizer_json::Json& j,
                                                    const std::string& file);

}  // namespace pagoda
