#pragma once
// vLLM's bad_words: token sequences a request must never generate. A one-token word is banned
// at every step; a longer one has its last token banned at a step whose generated tokens end
// with the rest of it. Both samplers (CPU and GPU) take the bans as tokens whose logits become
// -inf, so the rule lives here once.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace pagoda {

/// The token sequences of `words` as vLLM forms them: each word (left-stripped) as it tokenizes
/// at the start of a text, and with a leading space when that gives a different first token and
/// the same length. `encode` tokenizes without special tokens.
[[nodiscard]] std::vector<std::vector<int32_t>> bad_words_token_ids(
    const std::vector<std::string>& words,
    const std::function<std::vector<int32_t>(const std::string&)>& encode);

/// Appends to `banned` the tokens the next step may not produce after `output` (the tokens
/// generated so far).
void append_bad_word_bans(const std::vector<std::vector<int32_t>>& words,
                          std::span<const int32_t> output, std::vector<int32_t>& banned);

}  // namespace pagoda
