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
};

/// Builds the decoder described by j (Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip,
/// Metaspace, WordPiece, BPEDecoder); throws InvalidArgument naming the type and the file for
/// anything else.
[[nodiscard]] std::unique_ptr<Decoder> make_decoder(const tokenizer_json::Json& j,
                                                    const std::string& file);

}  // namespace pagoda
