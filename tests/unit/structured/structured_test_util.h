#pragma once
// Helpers of the structured-output tests: a vocabulary of the 256 single bytes (so that a
// grammar can be matched byte by byte through the real compiled path) and whole-text matching.
#include <memory>
#include <string>
#include <string_view>

#include "structured/compiled_grammar.h"
#include "structured/grammar.h"
#include "structured/matcher.h"

namespace pagoda::structured::testing {

/// Token b is the byte b; token 256 ends the text.
inline std::shared_ptr<const Vocabulary> byte_vocab() {
  static const auto vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    tokens.emplace_back();
    return std::make_shared<const Vocabulary>(std::move(tokens), 257, std::vector<int32_t>{256});
  }();
  return vocab;
}

/// Whether the whole text matches g.
inline bool full_match(const std::shared_ptr<const CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}
inline bool full_match(const Grammar& g, std::string_view text) {
  return full_match(compile_grammar(g, byte_vocab()), text);
}

/// Whether text is a prefix of some text g matches.
inline bool prefix_match(const std::shared_ptr<const CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text);
}

}  // namespace pagoda::structured::testing
