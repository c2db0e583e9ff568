#pragma once
// Metaspace, the sentencepiece convention of spelling spaces as "▁" (U+2581): its pre-tokenizer
// and its decoder read the same tokenizer.json fields, so both live here.
#include <memory>
#include <string>

#include "tokenizer/decoder.h"
#include "tokenizer/json_util.h"
#include "tokenizer/pre_tokenizer.h"

namespace pagoda {

/// Builds a Metaspace pre-tokenizer: spaces become `replacement`, a replacement is prepended per
/// `prepend_scheme` ("always", "first": only to the text at the start of the input, "never"; the
/// legacy `add_prefix_space: false` means "never"), and with `split` each replacement starts a
/// new word.
[[nodiscard]] std::unique_ptr<PreTokenizer> make_metaspace_pre_tokenizer(
    const tokenizer_json::Json& j, const std::string& file);

/// Builds a Metaspace decoder: replacements become spaces, except that in the first token they
/// are dropped unless prepend_scheme is "never" (that is where the pre-tokenizer added one).
[[nodiscard]] std::unique_ptr<Decoder> make_metaspace_decoder(const tokenizer_json::Json& j,
                                                              const std::string& file);

}  // namespace pagoda
