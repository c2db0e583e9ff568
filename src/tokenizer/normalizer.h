#pragma once
// Normalizers of tokenizer.json: text rewrites applied to each piece between added tokens.
#include <memory>
#include <string>

#include "tokenizer/json_util.h"

namespace pagoda {

/// One normalizer; normalize is const and thread-safe.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  /// Rewrites valid UTF-8 text in place.
  virtual void normalize(std::string& text) const = 0;
};

/// Builds the normalizer described by j (Sequence, Prepend, Replace, Strip, NFC, NFD, NFKC,
/// NFKD, Lowercase, StripAccents, BertNormalizer); throws InvalidArgument naming the type and the
/// file for anything else.
[[nodiscard]] std::unique_ptr<Normalizer> make_normalizer(const tokenizer_json::Json& j,
                                                          const std::string& file);

}  // namespace pagoda
