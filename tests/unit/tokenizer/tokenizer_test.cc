// Hand-written tokenizer cases beyond the Hugging Face vectors: special tokens inside text,
// invalid input, long inputs, malformed files, the config files and concurrency.
// To add a case: add a TEST below; expected ids come from the tokenizer's vocab in tokenizer.json.
#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/status.h"
#include "test_util.h"
#include "tokenizer/unicode_normalization.h"

namespace pagoda {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::shared_tokenizer;

TEST(TokenizerTest, Llama3SpecialTokensInsideText) {
  const Tokenizer& tok = shared_tokenizer("llama3");
  const std::string text = "<|begin_of_text|>hello<|eot_id|>";
  EXPECT_THAT(tok.encode(text, false), ElementsAre(128000, 15339, 128009));
  EXPECT_THAT(tok.encode(text, true), ElementsAre(128000, 128000, 15339, 128009));
  EXPECT_THAT(tok.encode("hello world", true), ElementsAre(128000, 15339, 1917));
  const std::vector<int32_t> ids = {128000, 15339, 128009};
  EXPECT_EQ(tok.decode(ids, false), text);
  EXPECT_EQ(tok.decode(ids, true), "hello");
  EXPECT_TRUE(tok.is_special(128009));
  EXPECT_FALSE(tok.is_special(15339));
  EXPECT_EQ(tok.bos_id(), 128000);
  EXPECT_THAT(tok.eos_ids(), ElementsAre(128009));
  EXPECT_EQ(tok.bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(tok.eos_token(), "<|eot_id|>");
  EXPECT_EQ(tok.vocab_size(), 128256);
  EXPECT_EQ(tok.token_to_id("<|eot_id|>"), 128009);
  EXPECT_EQ(tok.id_to_token(1917), "Ġworld");
}

TEST(TokenizerTest, Llama2SpecialTokensInsideText) {
  const Tokenizer& tok = shared_tokenizer("llama2");
  // HF normalizes each piece between added tokens on its own, so "Hello" gets its own "▁".
  EXPECT_THAT(tok.encode("<s>Hello</s>", false), ElementsAre(1, 15043, 2));
  EXPECT_THAT(tok.encode("<s>Hello</s>", true), ElementsAre(1, 1, 15043, 2));
  EXPECT_THAT(tok.encode("Hello world", true), ElementsAre(1, 15043, 3186));
  const std::vector<int32_t> ids = {1, 15043, 3186, 2};
  EXPECT_EQ(tok.decode(ids, true), "Hello world");
  EXPECT_EQ(tok.decode(ids, false), "<s> Hello world</s>");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_THAT(tok.eos_ids(), ElementsAre(2));
  EXPECT_EQ(tok.vocab_size(), 32000);
}

TEST(TokenizerTest, Qwen2ChatMarkersAndConfig) {
  const Tokenizer& tok = shared_tokenizer("qwen2");
  EXPECT_THAT(tok.encode("<|im_start|>user\nhi<|im_end|>", true),
              ElementsAre(151644, 872, 198, 6023, 151645));
  EXPECT_EQ(tok.bos_id(), std::nullopt);  // bos_token is null and the template adds nothing
  EXPECT_THAT(tok.eos_ids(), ElementsAre(151645));
  EXPECT_THAT(tok.chat_template(), HasSubstr("<|im_start|>"));
}

TEST(TokenizerTest, Qwen2NormalizesToNfc) {
  const Tokenizer& tok = shared_tokenizer("qwen2");
  EXPECT_EQ(tok.encode("Cafe\u0301 \u212B", false), tok.encode("Caf\u00E9 \u00C5", false));
}

TEST(TokenizerTest, NfcAlgorithm) {
  EXPECT_EQ(nfc_normalize("e\u0301"), "\u00E9");
  EXPECT_EQ(nfc_normalize("\u1100\u1161\u11A8"), "\uAC01");   // Hangul LVT
  EXPECT_EQ(nfc_normalize("a\u0307\u0323"), "\u1EA1\u0307");  // canonical reordering
  EXPECT_EQ(nfc_normalize("A\u030A\u0301"), "\u01FA");        // chained composition
  EXPECT_EQ(nfc_normalize("\u212B"), "\u00C5");               // singleton
  EXPECT_EQ(nfc_normalize("plain ascii 🦙 中文"), "plain ascii 🦙 中文");
}

TEST(TokenizerTest, EmptyString) {
  // Only the Llama-style templates add BOS; GPT-2 and Qwen2 add nothing even with special tokens.
  const std::map<std::string, std::vector<int32_t>> expected = {
      {"llama2", {1}}, {"llama3", {128000}}, {"mistral_v3", {1}},
      {"qwen2", {}},   {"gpt2", {}},         {"stories260K", {1}}};
  for (const char* name : testing::kAllTokenizers) {
    const Tokenizer& tok = shared_tokenizer(name);
    EXPECT_TRUE(tok.encode("", false).empty()) << name;
    EXPECT_EQ(tok.encode("", true), expected.at(name)) << name;
    EXPECT_EQ(tok.decode({}, false), "") << name;
  }
}

TEST(TokenizerTest, InvalidUtf8IsRepairedNotFatal) {
  const std::string bad = "ab\xFF\xC3(\xE2\x82 \xF0\x9F\x98";
  const std::string repaired = "ab\uFFFD\uFFFD(\uFFFD \uFFFD";  // one U+FFFD per maximal subpart
  for (const char* name : testing::kAllTokenizers) {
    const Tokenizer& tok = shared_tokenizer(name);
    EXPECT_EQ(tok.encode(bad, false), tok.encode(repaired, false)) << name;
    EXPECT_EQ(tok.decode(tok.encode(bad, false), false), repaired) << name;
  }
}

// Linear, not quadratic, in the length of a run of one character: 4x the text may cost at most
// ~8x the time (quadratic would be 16x). A ratio within one run, not a wall-clock limit, so that
// a loaded machine does not fail it; the 4x run is repeated and its best time taken.
TEST(TokenizerTest, LongRepeatedCharactersAreNotQuadratic) {
  const std::vector<std::string> units = {"a", " ", "\n", "é", "🦙", "3"};
  // This thread's CPU time, not wall time: on a loaded machine (CI runs tests in parallel) a
  // descheduled thread made a linear encode look 38x slower once. encode() runs on the calling
  // thread only.
  auto thread_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  auto best_seconds = [&](const Tokenizer& tok, const std::string& text) {
    double best = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
      const double start = thread_seconds();
      const auto ids = tok.encode(text, false);
      best = std::min(best, thread_seconds() - start);
      EXPECT_FALSE(ids.empty());
    }
    return best;
  };
  for (const char* name : testing::kAllTokenizers) {
    const Tokenizer& tok = shared_tokenizer(name);
    for (const auto& unit : units) {
      std::string small, large;
      for (int i = 0; i < 25000; ++i) small += unit;
      for (int i = 0; i < 4; ++i) large += small;
      const double t_small = best_seconds(tok, small);
      const double t_large = best_seconds(tok, large);
      EXPECT_LT(t_large, 8.0 * t_small + 0.05) << name << " unit '" << unit << "'";
      EXPECT_EQ(tok.decode(tok.encode(large, false), false), large)
          << name << " unit '" << unit << "'";
    }
  }
}

TEST(TokenizerTest, RandomTextRoundTrips) {
  const std::vector<std::string> alphabet = {
      "a", "Z",  " ", "  ", "\n", "\t", "é", "ß", "中",     "文", "🦙",  "😶‍🌫️",
      "3", "42", ".", "'s", "<",  "|",  "ф", "ก", "\u00A0", "_",  "<0x41>"};
  std::mt19937 rng(1234);
  for (const char* name : testing::kAllTokenizers) {
    const Tokenizer& tok = shared_tokenizer(name);
    for (int trial = 0; trial < 200; ++trial) {
      std::string text;
      const int len = static_cast<int>(rng() % 40);
      for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
      const auto ids = tok.encode(text, false);
      EXPECT_EQ(tok.decode(ids, false), text) << name << " text '" << text << "'";
    }
  }
}

TEST(TokenizerTest, DecodeRejectsOutOfRangeIds) {
  const Tokenizer& tok = shared_tokenizer("gpt2");
  const std::vector<int32_t> too_big = {50257};
  const std::vector<int32_t> negative = {1, -5};
  try {
    (void)tok.decode(too_big, false);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("50257"));
  }
  EXPECT_THROW((void)tok.decode(negative, false), InvalidArgument);
  EXPECT_THROW((void)tok.id_to_token(-1), InvalidArgument);
}

TEST(TokenizerTest, ConcurrentEncodesAgree) {
  const Tokenizer& tok = shared_tokenizer("llama3");
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) {
    texts.push_back("Thread text number " + std::to_string(i * 7919) + " with words 🦙 中文 " +
                    std::string(static_cast<size_t>(i), 'x'));
  }
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok.encode(t, true));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      const Tokenizer copy = tok;  // copies share the loaded data
      for (int rep = 0; rep < 50; ++rep) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i + static_cast<size_t>(th) * 13) % texts.size();
          if (copy.encode(texts[k], true) != expected[k]) ++mismatches;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(TokenizerTest, LoadsModelDirectoryAndConfigVariants) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("pagoda_tok_cfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(testing::tokenizer_path("stories260K"), dir / "tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer_config.json") << R"({
    "bos_token": {"content": "<s>", "lstrip": false},
    "eos_token": "</s>", "add_bos_token": true, "add_eos_token": false,
    "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
  })";
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [2, 0]})";
  const Tokenizer tok = Tokenizer::load(dir.string());
  EXPECT_EQ(tok.bos_token(), "<s>");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_THAT(tok.eos_ids(), ElementsAre(2, 0));
  EXPECT_EQ(tok.add_bos_token(), true);
  EXPECT_EQ(tok.add_eos_token(), false);
  EXPECT_EQ(tok.chat_template(), "D");
  std::filesystem::remove_all(dir);
}

// Writes `json` as a tokenizer.json and expects loading it to fail naming the file and `needle`.
void expect_load_error(const std::string& json, const std::string& needle) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("pagoda_tok_bad_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "tokenizer.json").string();
  std::ofstream(path) << json;
  try {
    (void)Tokenizer::load(path);
    ADD_FAILURE() << "loaded a bad file: " << json;
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
  std::filesystem::remove_all(dir);
}

TEST(TokenizerTest, MalformedFilesAreInvalidArgument) {
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
                                          "merges": ["a b"]})";
  expect_load_error("{ not json", "malformed JSON");
  expect_load_error("[1, 2]", "object");
  expect_load_error("{}", "model");
  expect_load_error("{" + model + R"(, "normalizer": {"type": "Precompiled"}})", "Precompiled");
  expect_load_error("{" + model + R"(, "pre_tokenizer": {"type": "UnicodeScripts"}})",
                    "UnicodeScripts");
  expect_load_error("{" + model + R"(, "decoder": {"type": "CTC"}})", "CTC");
  expect_load_error("{" + model + R"(, "post_processor": {"type": "Fancy"}})", "Fancy");
  expect_load_error(R"({"model": {"type": "Unigram", "vocab": []}})", "Unigram");
  expect_load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a c"]}})",
                    "merges[0]");
  expect_load_error(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})", "vocab");
  expect_load_error("{" + model +
                        R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(["},
                           "behavior": "Isolated"}})",
                    "regex");
}

// Load time is measured by bench_tokenizer, not asserted here.
TEST(TokenizerTest, Llama3Loads) {
  const Tokenizer tok = Tokenizer::load(testing::tokenizer_path("llama3"));
  EXPECT_EQ(tok.vocab_size(), 128256);
}

TEST(TokenizerTest, MissingFileIsNotFound) {
  EXPECT_THROW((void)Tokenizer::load("/nonexistent/tokenizer.json"), NotFound);
}

TEST(TokenizerTest, MinimalTokenizerWithoutDecoderOrPreTokenizer) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("pagoda_tok_min_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({
    "added_tokens": [{"id": 4, "content": "<x>", "special": false, "single_word": true,
                      "lstrip": true, "rstrip": true, "normalized": false}],
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "abab": 3, " ": 5},
              "merges": [["a", "b"], ["ab", "ab"]], "unk_token": null}})";
  const Tokenizer tok = Tokenizer::load(dir.string());
  EXPECT_THAT(tok.encode("ababab", false), ElementsAre(3, 2));
  EXPECT_THAT(tok.encode("abc", false), ElementsAre(2));  // 'c' is unknown and no unk: dropped
  // single_word: "<x>" glued to a word is not the added token; lstrip/rstrip eat spaces.
  EXPECT_THAT(tok.encode("ab <x> ab", false), ElementsAre(2, 4, 2));
  EXPECT_THAT(tok.encode("ab<x>", false), ElementsAre(2));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{2, 4, 0}, false), "ab <x> a");  // joined by spaces
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda
