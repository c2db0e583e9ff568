// The datasets of `pagoda bench serve`: the random dataset's shared prefix is really shared,
// prefix_repetition's prefixes each head floor(num_prompts / num_prefixes) prompts, ShareGPT keeps
// and drops conversations as vLLM does (tests/data/sharegpt/tiny_sharegpt.json, counted with the
// demo model's tokenizer). To add a case, build a dataset and check the property on its requests.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include "core/status.h"
#include "server/client/bench_datasets.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::client {
namespace {

const SyntheticVocabulary kTokens{false, 512};
const SyntheticVocabulary kWords{true, 0};

std::vector<int64_t> head(const std::vector<int64_t>& ids, int n) {
  return {ids.begin(), ids.begin() + n};
}

TEST(RandomDatasetTest, EveryPromptStartsWithTheSamePrefix) {
  RandomDatasetOptions o;
  o.num_prompts = 20;
  o.input_len = 12;
  o.output_len = 5;
  o.prefix_len = 30;
  o.range_ratio = 0.5;
  o.seed = 7;
  const auto requests = sample_random(o, kTokens);
  ASSERT_EQ(requests.size(), 20u);
  const std::vector<int64_t> prefix = head(requests[0].prompt_token_ids, 30);
  std::set<std::vector<int64_t>> rests;
  for (const SampleRequest& r : requests) {
    ASSERT_GE(r.prompt_token_ids.size(), 30u + 6);  // the prefix, then at least 12 * 0.5
    EXPECT_LE(r.prompt_token_ids.size(), 30u + 18);
    EXPECT_EQ(head(r.prompt_token_ids, 30), prefix);
    EXPECT_EQ(r.prompt_len, static_cast<int64_t>(r.prompt_token_ids.size()));  // prefix counted
    EXPECT_GE(r.output_len, 2);
    EXPECT_LE(r.output_len, 8);
    EXPECT_TRUE(r.prompt_text.empty());
    for (int64_t id : r.prompt_token_ids) EXPECT_TRUE(id >= 0 && id < 512) << id;
    rests.insert({r.prompt_token_ids.begin() + 30, r.prompt_token_ids.end()});
  }
  EXPECT_EQ(rests.size(), 20u) << "what follows the prefix differs";
  // The same seed gives the same prompts; without a prefix, those of a run without the flag.
  EXPECT_EQ(sample_random(o, kTokens)[3].prompt_token_ids, requests[3].prompt_token_ids);
  o.prefix_len = 0;
  const auto plain = sample_random(o, kTokens);
  EXPECT_NE(head(plain[0].prompt_token_ids, 6), head(plain[1].prompt_token_ids, 6));
}

TEST(RandomDatasetTest, ChatPromptsShareTheirFirstWords) {
  RandomDatasetOptions o;
  o.num_prompts = 5;
  o.input_len = 4;
  o.prefix_len = 6;
  const auto requests = sample_random(o, kWords);
  auto first_words = [](const std::string& text, int n) {
    size_t at = 0;
    for (int i = 0; i < n; ++i) at = text.find(' ', at) + 1;
    return text.substr(0, at);
  };
  for (const SampleRequest& r : requests) {
    EXPECT_TRUE(r.prompt_token_ids.empty());
    EXPECT_EQ(r.prompt_len, 10);
    EXPECT_EQ(std::count(r.prompt_text.begin(), r.prompt_text.end(), ' '), 9) << r.prompt_text;
    EXPECT_EQ(first_words(r.prompt_text, 6), first_words(requests[0].prompt_text, 6));
  }
}

TEST(RandomDatasetTest, BadValuesNameTheirFlag) {
  RandomDatasetOptions o;
  o.prefix_len = -1;
  EXPECT_THROW(
      {
        try {
          (void)sample_random(o, kTokens);
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("--random-prefix-len"), std::string::npos);
          throw;
        }
      },
      InvalidArgument);
  o = {};
  o.range_ratio = 1.0;
  EXPECT_THROW((void)sample_random(o, kTokens), InvalidArgument);
  o = {};
  EXPECT_THROW((void)sample_random(o, SyntheticVocabulary{false, 0}), InvalidArgument);
}

TEST(PrefixRepetitionDatasetTest, EachPrefixHeadsItsShareOfThePrompts) {
  PrefixRepetitionOptions o;
  o.num_prompts = 14;  // 3 prefixes: 4 prompts each, 12 in all (vLLM drops the remainder)
  o.num_prefixes = 3;
  o.prefix_len = 10;
  o.suffix_len = 5;
  o.output_len = 7;
  o.seed = 3;
  const auto requests = sample_prefix_repetition(o, kTokens);
  ASSERT_EQ(requests.size(), 12u);
  std::map<std::vector<int64_t>, int> per_prefix;
  std::set<std::vector<int64_t>> suffixes;
  for (const SampleRequest& r : requests) {
    ASSERT_EQ(r.prompt_token_ids.size(), 15u);
    EXPECT_EQ(r.prompt_len, 15);
    EXPECT_EQ(r.output_len, 7);
    ++per_prefix[head(r.prompt_token_ids, 10)];
    suffixes.insert({r.prompt_token_ids.begin() + 10, r.prompt_token_ids.end()});
  }
  EXPECT_EQ(per_prefix.size(), 3u);
  for (const auto& [prefix, count] : per_prefix) EXPECT_EQ(count, 4);
  EXPECT_EQ(suffixes.size(), 12u);
  // Shuffled: the first four are not all of one prefix (seed 3).
  std::set<std::vector<int64_t>> first_four;
  for (int i = 0; i < 4; ++i) first_four.insert(head(requests[i].prompt_token_ids, 10));
  EXPECT_GT(first_four.size(), 1u);

  o.num_prompts = 2;  // fewer prompts than prefixes
  EXPECT_THROW((void)sample_prefix_repetition(o, kTokens), InvalidArgument);
  o.num_prompts = 10;
  o.suffix_len = 0;
  EXPECT_THROW((void)sample_prefix_repetition(o, kTokens), InvalidArgument);
}

TEST(ShareGptDatasetTest, FiltersAsVllmDoes) {
  EXPECT_TRUE(is_valid_sequence(4, 4, false));
  EXPECT_FALSE(is_valid_sequence(3, 100, false));  // prompt too short
  EXPECT_FALSE(is_valid_sequence(10, 3, false));   // reply too short
  EXPECT_TRUE(is_valid_sequence(10, 3, true));     // ... unless the output length is fixed
  EXPECT_TRUE(is_valid_sequence(1024, 1024, false));
  EXPECT_FALSE(is_valid_sequence(1025, 10, false));    // prompt too long
  EXPECT_FALSE(is_valid_sequence(1000, 1049, false));  // 2049 in all
}

class ShareGptFixtureTest : public ::testing::Test {
 protected:
  ShareGptFixtureTest()
      : tokenizer_(Tokenizer::load(PAGODA_SOURCE_DIR "/models/stories260K")),
        count_([this](std::string_view text) {
          return static_cast<int64_t>(tokenizer_.encode(text, true).size());
        }) {}
  static ShareGptOptions options(int num_prompts) {
    ShareGptOptions o;
    o.path = PAGODA_SOURCE_DIR "/tests/data/sharegpt/tiny_sharegpt.json";
    o.num_prompts = num_prompts;
    return o;
  }
  Tokenizer tokenizer_;
  TokenCounter count_;
};

TEST_F(ShareGptFixtureTest, KeepsTheThreeValidPairsAndTheirReplyLengths) {
  // 8 entries: 3 valid; a 2-token "Hi", a 2-token "Hot" reply, one turn, no conversations and a
  // 3,000-token prompt are dropped.
  ShareGptOptions o = options(3);
  const auto requests = sample_sharegpt(o, count_);
  ASSERT_EQ(requests.size(), 3u);
  std::set<std::string> prompts;
  for (const SampleRequest& r : requests) {
    prompts.insert(r.prompt_text);
    EXPECT_TRUE(r.prompt_token_ids.empty());
    EXPECT_EQ(r.prompt_len, count_(r.prompt_text));
  }
  EXPECT_EQ(prompts, (std::set<std::string>{
                         "Tell me a story about a small dog who finds a ball in the park.",
                         "What did the girl see when she looked out of the window?",
                         "Write two sentences about a boat on a river."}));
  for (const SampleRequest& r : requests) {
    if (r.prompt_text.starts_with("What did")) {
      // The second turn's length, not the later turns'.
      EXPECT_EQ(r.output_len,
                count_("She saw a bird sitting on the fence, singing to the morning sun."));
    }
  }
}

TEST_F(ShareGptFixtureTest, OversamplesUnlessAskedNotToAndFixesTheOutputLength) {
  ShareGptOptions o = options(7);
  auto requests = sample_sharegpt(o, count_);
  ASSERT_EQ(requests.size(), 7u);  // 3 distinct, 4 repeated
  std::set<std::string> distinct;
  for (const SampleRequest& r : requests) distinct.insert(r.prompt_text);
  EXPECT_EQ(distinct.size(), 3u);
  o.no_oversample = true;
  EXPECT_EQ(sample_sharegpt(o, count_).size(), 3u);
  // A fixed output length keeps the pair with the one-word reply.
  o.output_len = 2;
  requests = sample_sharegpt(o, count_);
  EXPECT_EQ(requests.size(), 4u);
  for (const SampleRequest& r : requests) EXPECT_EQ(r.output_len, 2);
}

TEST_F(ShareGptFixtureTest, BadFilesNameThePath) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + name) << text;
    ShareGptOptions o = options(2);
    o.path = dir + name;
    return o;
  };
  auto message = [&](const ShareGptOptions& o) {
    try {
      (void)sample_sharegpt(o, count_);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(write("a.json", "{not json")).find("not a JSON document"), std::string::npos);
  EXPECT_NE(message(write("b.json", "{}")).find("a JSON list"), std::string::npos);
  EXPECT_NE(message(write("c.json", R"([{"conversations": [{"value": 1}, {"value": "x"}]}])"))
                .find("no string \"value\""),
            std::string::npos);
  EXPECT_NE(message(write("d.json", "[]")).find("no conversation passes"), std::string::npos);
  ShareGptOptions missing = options(2);
  missing.path = dir + "missing.json";
  EXPECT_NE(message(missing).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::client
