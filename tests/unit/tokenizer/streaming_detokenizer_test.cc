// Property tests for StreamingDetokenizer: for random id sequences fed in random chunk sizes, the
// concatenated deltas (plus flush) must equal Tokenizer::decode of all ids, and every delta must
// be valid UTF-8. To add a case: add an id-sequence generator to make_sequences().
#include <random>

#include <gtest/gtest.h>

#include "core/status.h"
#include "test_util.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/utf8.h"

namespace pagoda {
namespace {

using testing::shared_tokenizer;

// Byte-fallback ids of each byte of text ("<0xXX>"), for sentencepiece vocabularies.
std::vector<int32_t> byte_token_ids(const Tokenizer& tok, std::string_view text) {
  std::vector<int32_t> ids;
  for (const char c : text) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned char>(c));
    if (const auto id = tok.token_to_id(name)) ids.push_back(*id);
  }
  return ids;
}

std::vector<std::vector<int32_t>> make_sequences(const Tokenizer& tok, std::mt19937& rng) {
  const std::vector<std::string> pieces = {
      "Hello", " world", "🦙", "😶‍🌫️", "中文", "é", " ",
      "  ",    "\n",     "ß",    "👍🏽",       "Ω",    "x"};
  std::vector<std::vector<int32_t>> sequences;
  for (int trial = 0; trial < 150; ++trial) {
    std::vector<int32_t> ids;
    const int parts = 1 + static_cast<int>(rng() % 12);
    for (int p = 0; p < parts; ++p) {
      const auto kind = rng() % 6;
      if (kind == 0) {  // any id at all, including special and byte tokens
        ids.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(tok.vocab_size())));
      } else if (kind == 1) {  // a multibyte character spelled as byte-fallback tokens
        const auto bytes = byte_token_ids(tok, pieces[rng() % pieces.size()]);
        ids.insert(ids.end(), bytes.begin(), bytes.end());
      } else if (kind == 2) {  // a stray byte token, possibly a lone continuation byte
        const auto bytes = byte_token_ids(tok, std::string(1, static_cast<char>(rng() % 256)));
        ids.insert(ids.end(), bytes.begin(), bytes.end());
      } else if (kind == 3 && tok.bos_id()) {
        ids.push_back(*tok.bos_id());
      } else {  // normal text, whose byte-level tokens can split emojis
        const auto enc = tok.encode(pieces[rng() % pieces.size()], false);
        ids.insert(ids.end(), enc.begin(), enc.end());
      }
    }
    sequences.push_back(std::move(ids));
  }
  // Every single-byte id alone and a long emoji-heavy text, one token at a time.
  sequences.push_back(tok.encode(
      "🦙🦙 tokens 😶‍🌫️ split 中文字符 across ids 👍🏽👍🏽", false));
  return sequences;
}

class StreamingTest : public ::testing::TestWithParam<const char*> {};

TEST_P(StreamingTest, ConcatenationEqualsFullDecode) {
  const Tokenizer& tok = shared_tokenizer(GetParam());
  std::mt19937 rng(42);
  int checked = 0;
  for (const auto& ids : make_sequences(tok, rng)) {
    for (const bool skip : {false, true}) {
      StreamingDetokenizer stream(tok, skip);
      std::string text;
      size_t i = 0;
      while (i < ids.size()) {
        const size_t n = std::min<size_t>(1 + rng() % 3, ids.size() - i);
        const std::string delta =
            n == 1 ? stream.add(ids[i]) : stream.add(std::span<const int32_t>(ids).subspan(i, n));
        EXPECT_TRUE(utf8::is_valid(delta));
        text += delta;
        i += n;
      }
      const std::string rest = stream.flush();
      EXPECT_TRUE(utf8::is_valid(rest));
      text += rest;
      EXPECT_EQ(text, tok.decode(ids, skip)) << GetParam() << " skip=" << skip;
      ++checked;
    }
  }
  EXPECT_GT(checked, 300);
}

TEST_P(StreamingTest, EmitsCompleteCharactersPromptly) {
  const Tokenizer& tok = shared_tokenizer(GetParam());
  const auto ids = tok.encode("Hello 🦙 world", false);
  StreamingDetokenizer stream(tok, true);
  std::string text;
  size_t non_empty = 0;
  for (const int32_t id : ids) {
    const std::string delta = stream.add(id);
    non_empty += !delta.empty();
    text += delta;
  }
  text += stream.flush();
  EXPECT_EQ(text, tok.decode(ids, true));
  EXPECT_GE(non_empty, 3u);  // text streams out as it completes rather than only at flush
}

TEST_P(StreamingTest, PromptContextKeepsTheJoiningSpace) {
  const Tokenizer& tok = shared_tokenizer(GetParam());
  std::mt19937 rng(7);
  const auto sequences = make_sequences(tok, rng);
  int checked = 0;
  for (size_t i = 0; i + 1 < sequences.size(); i += 2) {
    const auto& context = sequences[i];
    const auto& ids = sequences[i + 1];
    StreamingDetokenizer stream(tok, true, context);
    std::string text;
    for (const int32_t id : ids) text += stream.add(id);
    text += stream.flush();
    // The promise: decode(tail + ids) minus decode(tail), tail = the last five context ids.
    std::vector<int32_t> tail(context.end() - std::min<ptrdiff_t>(5, std::ssize(context)),
                              context.end());
    const std::string tail_text = tok.decode(tail, true);
    tail.insert(tail.end(), ids.begin(), ids.end());
    const std::string full = tok.decode(tail, true);
    if (!full.starts_with(tail_text)) continue;  // a byte run split by the boundary: no promise
    EXPECT_EQ(text, full.substr(tail_text.size())) << GetParam();
    ++checked;
  }
  EXPECT_GT(checked, 40);
  // A sentencepiece word after a prompt keeps its space, which a decode of the word alone strips.
  auto prompt = tok.encode("The big dog was", true);
  const std::vector<int32_t> word{prompt.back()};
  prompt.pop_back();
  StreamingDetokenizer stream(tok, true, prompt);
  std::string text;
  for (const int32_t id : word) text += stream.add(id);
  text += stream.flush();
  EXPECT_EQ(text, " was") << GetParam();
}

TEST_P(StreamingTest, RejectsBadIds) {
  StreamingDetokenizer stream(shared_tokenizer(GetParam()), false);
  EXPECT_THROW((void)stream.add(-1), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, StreamingTest, ::testing::ValuesIn(testing::kAllTokenizers),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace pagoda
