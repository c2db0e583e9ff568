#include "sampling/bad_words.h"

#include <algorithm>

namespace pagoda {

std::vector<std::vector<int32_t>> bad_words_token_ids(
    const std::vector<std::string>& words,
    const std::function<std::vector<int32_t>(const std::string&)>& encode) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& word : words) {
    const std::string stripped =
        word.substr(std::min(word.find_first_not_of(" \t\n\r\f\v"), word.size()));
    std::vector<int32_t> plain = encode(stripped);
    std::vector<int32_t> spaced = encode(" " + stripped);
    if (!plain.empty()) out.push_back(plain);
    // " word" is a different word only when it starts with another token and is as long: a
    // tokenizer that splits the space off would otherwise ban the space token alone.
    if (!spaced.empty() && !plain.empty() && spaced.front() != plain.front() &&
        spaced.size() == plain.size()) {
      out.push_back(std::move(spaced));
    }
  }
  return out;
}

void append_bad_word_bans(const std::vector<std::vector<int32_t>>& words,
                          std::span<const int32_t> output, std::vector<int32_t>& banned) {
  for (const std::vector<int32_t>& word : words) {
    if (word.empty() || word.size() > output.size() + 1) continue;
    const size_t prefix = word.size() - 1;
    if (std::equal(word.begin(), word.end() - 1, output.end() - static_cast<ptrdiff_t>(prefix))) {
      banned.push_back(word.back());
    }
  }
}

}  // namespace pagoda
