// vLLM's bad_words (sampling/bad_words.h): how words become token sequences, and which tokens a
// step bans after a given output.
#include "sampling/bad_words.h"

#include <gtest/gtest.h>

#include <map>

namespace pagoda {
namespace {

// A toy tokenizer: one id per whitespace-separated word, the space going into the word's token
// (as byte-level BPE does: "dog" and " dog" are different tokens).
std::vector<int32_t> encode(const std::string& text) {
  static const std::map<std::string, int32_t> vocab = {{"dog", 1},  {" dog", 2},  {"hot", 3},
                                                       {" hot", 4}, {" dog!", 5}, {" ", 6}};
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(' ', i + 1);
    if (j == std::string::npos) j = text.size();
    ids.push_back(vocab.at(text.substr(i, j - i)));
    i = j;
  }
  return ids;
}

TEST(BadWords, EachWordAtTheStartAndAfterASpace) {
  EXPECT_EQ(bad_words_token_ids({"dog"}, encode), (std::vector<std::vector<int32_t>>{{1}, {2}}));
  // Leading spaces are stripped first; two-token words keep both forms.
  EXPECT_EQ(bad_words_token_ids({"  hot dog"}, encode),
            (std::vector<std::vector<int32_t>>{{3, 2}, {4, 2}}));
}

TEST(BadWords, TheSpacedFormOnlyWhenItIsAnotherWordOfTheSameLength) {
  // A tokenizer that splits the space off (" dog" -> [" ", "dog"]) would ban the space alone.
  auto split_space = [](const std::string& text) {
    std::vector<int32_t> ids;
    if (!text.empty() && text[0] == ' ') ids.push_back(6);
    ids.push_back(1);
    return ids;
  };
  EXPECT_EQ(bad_words_token_ids({"dog"}, split_space), (std::vector<std::vector<int32_t>>{{1}}));
}

TEST(BadWords, BansTheLastTokenAfterTheRestOfTheWord) {
  const std::vector<std::vector<int32_t>> words = {{7}, {3, 2}, {9, 9, 8}};
  std::vector<int32_t> banned;
  append_bad_word_bans(words, {}, banned);
  EXPECT_EQ(banned, (std::vector<int32_t>{7})) << "one-token words from the first step";
  banned.clear();
  append_bad_word_bans(words, std::vector<int32_t>{5, 3}, banned);
  EXPECT_EQ(banned, (std::vector<int32_t>{7, 2}));
  banned.clear();
  append_bad_word_bans(words, std::vector<int32_t>{9, 9}, banned);
  EXPECT_EQ(banned, (std::vector<int32_t>{7, 8}));
  banned.clear();
  append_bad_word_bans(words, std::vector<int32_t>{9}, banned);
  EXPECT_EQ(banned, (std::vector<int32_t>{7})) << "too short for the three-token word";
}

}  // namespace
}  // namespace pagoda
