// Token masks over real vocabularies (byte-level BPE with multi-byte pieces: llama3, qwen2;
// sentencepiece with byte fallback: llama2, mistral_v3): at every step checked, a token's bit is
// set exactly when the byte-level matcher accepts the token's bytes (so the mask never admits an
// invalid token and never hides a valid one); real tokenizations of valid documents pass step by
// step; random walks through the masks that end produce documents the validator accepts. To add a
// case: a constraint in kCases with a document it admits.
#include <random>
#include <unordered_map>

#include <gtest/gtest.h>

#include "../tokenizer/test_util.h"
#include "json_test_util.h"
#include "structured/constraint.h"
#include "structured/matcher.h"
#include "structured/state_cache.h"
#include "structured/vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::structured {
namespace {

using testing::Json;

struct Case {
  Constraint::Kind kind;
  const char* text;      // the constraint
  const char* document;  // a text it admits
};

const Case kCases[] = {
    {Constraint::Kind::kJsonSchema,
     R"x({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"enum": ["Zürich", "東京", "New York"]},
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "age", "city"]})x",
     R"x({"name": "Zoë \"Z\" 😀", "age": 42, "city": "東京", "tags": ["a\\b", "naïve\n"]})x"},
    {Constraint::Kind::kJsonObject, "",
     "{\n  \"a\": [1, 2.5e-3, {\"b\": null}],\n  \"c\": \"ü\\u00fc\"\n}"},
    {Constraint::Kind::kRegex, R"x(\(\d{3}\) \d{3}-\d{4}|[a-z]+@[a-z]+\.(com|org))x",
     "(555) 123-4567"},
    {Constraint::Kind::kGrammar, R"x(root ::= "SELECT " cols " FROM " [a-z_]+ ";"
                                   cols ::= "*" | [a-z_]+ (", " [a-z_]+)*)x",
     "SELECT name, age FROM people;"},
    {Constraint::Kind::kChoice, "", "negative"},
};

std::shared_ptr<const Vocabulary> vocab_of(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const Vocabulary>> cache;
  auto& v = cache[name];
  if (!v) {
    const Tokenizer& tok = pagoda::testing::shared_tokenizer(name);
    const std::vector<int32_t> eos = tok.eos_ids();
    v = Vocabulary::from_tokenizer(tok, tok.vocab_size() + 5, eos);  // a padded model vocabulary
  }
  return v;
}

Constraint constraint_of(const Case& c) {
  Constraint out;
  out.kind = c.kind;
  out.text = c.text;
  if (c.kind == Constraint::Kind::kChoice) out.choices = {"positive", "negative", "neutral"};
  return out;
}

// The mask against the byte-level matcher, token by token.
void expect_exact_mask(GrammarMatcher& m, const std::vector<uint32_t>& mask) {
  const Vocabulary& v = m.vocab();
  const auto& eos = v.eos_ids();
  int64_t allowed = 0;
  for (int32_t id = 0; id < v.size(); ++id) {
    const bool bit = (mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u;
    bool expected = false;
    if (std::binary_search(eos.begin(), eos.end(), id)) {
      expected = m.can_end();
    } else if (!v.bytes(id).empty()) {
      expected = m.can_accept_bytes(v.bytes(id));
    }
    ASSERT_EQ(bit, expected) << "token " << id << " '" << v.bytes(id) << "'";
    allowed += bit;
  }
  EXPECT_GT(allowed, 0);
}

// A tokenization of text by the vocabulary's own bytes: the longest token at each position.
std::vector<int32_t> greedy_tokens(const Vocabulary& v, std::string_view text) {
  std::unordered_map<std::string_view, int32_t> by_bytes;
  for (int32_t id : v.sorted()) by_bytes.emplace(v.bytes(id), id);
  std::vector<int32_t> ids;
  for (size_t p = 0; p < text.size();) {
    size_t len = std::min<size_t>(static_cast<size_t>(v.max_token_bytes()), text.size() - p);
    for (; len > 0; --len) {
      auto it = by_bytes.find(text.substr(p, len));
      if (it != by_bytes.end()) {
        ids.push_back(it->second);
        break;
      }
    }
    if (len == 0) return {};
    p += len;
  }
  return ids;
}

class MaskTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MaskTest, DocumentsPassStepByStepWithExactMasks) {
  const auto vocab = vocab_of(GetParam());
  const Tokenizer& tok = pagoda::testing::shared_tokenizer(GetParam());
  // Twice: each grammar alone, then all through one StateCache (later grammars reuse the states
  // of earlier ones, restricted to their own FOLLOW sets).
  StateCache cache;
  for (int shared = 0; shared < 2; ++shared)
    for (const Case& c : kCases) {
      SCOPED_TRACE(::testing::Message() << (shared ? "shared states: " : "") << c.document);
      const auto g = compile_grammar(build_grammar(constraint_of(c)), vocab, nullptr,
                                     shared ? &cache : nullptr);
      std::vector<std::vector<int32_t>> tokenizations = {greedy_tokens(*vocab, c.document)};
      // The tokenizer's own encoding, when its bytes are exactly the document (byte-level BPE).
      const std::vector<int32_t> encoded = tok.encode(c.document, false);
      std::string joined;
      for (int32_t id : encoded) joined += vocab->bytes(id);
      if (joined == c.document) tokenizations.push_back(encoded);
      for (const auto& ids : tokenizations) {
        ASSERT_FALSE(ids.empty());
        GrammarMatcher m(g);
        std::vector<uint32_t> mask(static_cast<size_t>(vocab->mask_words()));
        for (size_t i = 0; i < ids.size(); ++i) {
          m.fill_mask(mask);
          if (i < 4 || i % 5 == 0) expect_exact_mask(m, mask);
          ASSERT_TRUE((mask[static_cast<size_t>(ids[i]) >> 5] >> (ids[i] & 31)) & 1u)
              << "step " << i << " token '" << vocab->bytes(ids[i]) << "'";
          ASSERT_TRUE(m.accept_token(ids[i]));
        }
        ASSERT_TRUE(m.can_end());
        m.fill_mask(mask);
        expect_exact_mask(m, mask);
        ASSERT_TRUE(m.accept_token(vocab->eos_ids()[0]));
      }
    }
  EXPECT_GT(cache.size(), 0u);
}

TEST(Vocabulary, DuplicateTokenBytes) {
  // Two ids with the same bytes (a byte-fallback token and a plain one) both follow the grammar.
  auto vocab = std::make_shared<const Vocabulary>(
      std::vector<std::string>{"a", " ", "ab", " ", "b", ""}, 7, std::vector<int32_t>{6});
  Constraint c;
  c.kind = Constraint::Kind::kRegex;
  c.text = "a? b";
  const auto g = compile_grammar(build_grammar(c), vocab);
  GrammarMatcher m(g);
  std::vector<uint32_t> mask(1);
  m.fill_mask(mask);
  EXPECT_EQ(mask[0], (1u << 0) | (1u << 1) | (1u << 3));
  ASSERT_TRUE(m.accept_token(3));
  m.fill_mask(mask);
  EXPECT_EQ(mask[0], 1u << 4);
}

TEST_P(MaskTest, RandomWalksThatEndValidate) {
  const auto vocab = vocab_of(GetParam());
  const char* const schema =
      R"x({"type": "object", "properties": {"ok": {"type": "boolean"},
          "n": {"type": "integer", "minimum": -20, "maximum": 20},
          "word": {"type": "string", "maxLength": 6},
          "list": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3}},
          "required": ["ok", "n", "word"]})x";
  Constraint c;
  c.kind = Constraint::Kind::kJsonSchema;
  c.text = schema;
  const auto g = compile_grammar(build_grammar(c), vocab);
  const Json parsed = Json::parse(schema);
  std::mt19937 rng(7);
  int ended = 0;
  for (int walk = 0; walk < 12; ++walk) {
    GrammarMatcher m(g);
    std::string text;
    std::vector<uint32_t> mask(static_cast<size_t>(vocab->mask_words()));
    for (int step = 0; step < 120 && !m.terminated(); ++step) {
      m.fill_mask(mask);
      if (step % 9 == 0) expect_exact_mask(m, mask);
      std::vector<int32_t> allowed, solid;  // solid: without whitespace, so that walks end
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if (!((mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u)) continue;
        allowed.push_back(id);
        const std::string_view b = vocab->bytes(id);
        if (b.find_first_of(" \n\t\r") == std::string_view::npos && b.size() <= 3)
          solid.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      const auto& pool = !solid.empty() && rng() % 5 != 0 ? solid : allowed;
      int32_t pick = pool[rng() % pool.size()];
      if (m.can_end()) pick = vocab->eos_ids()[0];
      ASSERT_TRUE(m.accept_token(pick));
      if (!m.terminated()) text += vocab->bytes(pick);
    }
    if (!m.terminated()) continue;
    ++ended;
    const Json doc = Json::parse(text, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << text;
    EXPECT_TRUE(testing::validates(parsed, doc, parsed)) << text;
  }
  EXPECT_GE(ended, 3);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, MaskTest,
                         ::testing::Values("llama2", "llama3", "qwen2", "mistral_v3"));

}  // namespace
}  // namespace pagoda::structured
