// Checks every case of tests/data/tokenizers/vectors/<name>.json, produced by Hugging Face
// `tokenizers`: `ids` (no special tokens), `ids_with_special`, and `decoded`.
// To add a tokenizer: add its name to kAllTokenizers in test_util.h and a vectors file.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace pagoda {
namespace {

using testing::shared_tokenizer;

nlohmann::json load_vectors(const std::string& name) {
  std::ifstream in(testing::vectors_path(name));
  EXPECT_TRUE(in.good()) << name;
  return nlohmann::json::parse(in);
}

class VectorsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(VectorsTest, EncodeAndDecodeMatchHuggingFace) {
  const std::string name = GetParam();
  const Tokenizer& tok = shared_tokenizer(name);
  const nlohmann::json vectors = load_vectors(name);
  ASSERT_EQ(vectors["tokenizer"], name);
  const auto& cases = vectors["cases"];
  ASSERT_GT(cases.size(), 0u);
  int passed = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto ids_with_special = c["ids_with_special"].get<std::vector<int32_t>>();
    const std::string decoded = c["decoded"];
    const auto got = tok.encode(text, false);
    const auto got_special = tok.encode(text, true);
    // `decoded` is HF's decode of ids_with_special with skip_special_tokens=true; decoding the
    // plain ids without skipping must give the same text.
    const std::string got_decoded = tok.decode(ids_with_special, true);
    const std::string got_decoded_plain = tok.decode(ids, false);
    EXPECT_EQ(got, ids) << name << " text: " << text;
    EXPECT_EQ(got_special, ids_with_special) << name << " text: " << text;
    EXPECT_EQ(got_decoded, decoded) << name << " text: " << text;
    EXPECT_EQ(got_decoded_plain, decoded) << name << " text: " << text;
    passed += got == ids && got_special == ids_with_special && got_decoded == decoded &&
              got_decoded_plain == decoded;
  }
  std::printf("%s: %d/%zu vectors pass\n", name.c_str(), passed, cases.size());
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, VectorsTest, ::testing::ValuesIn(testing::kAllTokenizers),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace pagoda
