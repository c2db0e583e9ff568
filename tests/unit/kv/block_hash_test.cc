#include "kv/block_hash.h"

#include <unordered_set>
#include <vector>

#include <gtest/gtest.h>

namespace pagoda::kv {
namespace {

const std::vector<TokenId> kTokens = {1, 2, 3, 4};

TEST(BlockHash, SameInputsSameHash) {
  EXPECT_EQ(hash_block_tokens(std::nullopt, kTokens), hash_block_tokens(std::nullopt, kTokens));
  EXPECT_EQ(hash_block_tokens(std::nullopt, kTokens, "salt"),
            hash_block_tokens(std::nullopt, kTokens, "salt"));
}

TEST(BlockHash, SaltChangesHash) {
  EXPECT_NE(hash_block_tokens(std::nullopt, kTokens, "tenant-a"),
            hash_block_tokens(std::nullopt, kTokens, "tenant-b"));
  EXPECT_NE(hash_block_tokens(std::nullopt, kTokens, "tenant-a"),
            hash_block_tokens(std::nullopt, kTokens));
}

TEST(BlockHash, ChainedOnParent) {
  const BlockHash a = hash_block_tokens(std::nullopt, {{5, 6, 7, 8}});
  const BlockHash b = hash_block_tokens(std::nullopt, {{9, 9, 9, 9}});
  EXPECT_NE(hash_block_tokens(a, kTokens), hash_block_tokens(b, kTokens));
  // A first block (no parent) differs from a block whose parent happens to hash to zero.
  EXPECT_NE(hash_block_tokens(std::nullopt, kTokens), hash_block_tokens(BlockHash{}, kTokens));
  // The salt of a first block reaches its children through the chain.
  const BlockHash salted = hash_block_tokens(std::nullopt, {{5, 6, 7, 8}}, "s");
  EXPECT_NE(hash_block_tokens(salted, kTokens), hash_block_tokens(a, kTokens));
}

TEST(BlockHash, TokenOrderAndBoundariesMatter) {
  EXPECT_NE(hash_block_tokens(std::nullopt, {{1, 2, 3, 4}}),
            hash_block_tokens(std::nullopt, {{4, 3, 2, 1}}));
  // Length prefixes: tokens and extra keys cannot trade bytes.
  const std::vector<TokenId> three = {1, 2, 3};
  const TokenId four = 4;
  const std::string extra(reinterpret_cast<const char*>(&four), sizeof(four));
  EXPECT_NE(hash_block_tokens(std::nullopt, kTokens),
            hash_block_tokens(std::nullopt, three, extra));
}

TEST(BlockHash, NoCollisionsOverManyBlocks) {
  std::unordered_set<BlockHash> seen;
  std::optional<BlockHash> parent;
  for (TokenId t = 0; t < 20000; ++t) {
    const std::vector<TokenId> block = {t, t + 1};
    const BlockHash h = hash_block_tokens(parent, block);
    EXPECT_TRUE(seen.insert(h).second) << "collision at " << t;
    const std::vector<TokenId> first_block = {t, t + 2};
    EXPECT_TRUE(seen.insert(hash_block_tokens(std::nullopt, first_block)).second);
    parent = h;
  }
}

TEST(BlockHash, LargeBlocksUseTheHeapPath) {
  std::vector<TokenId> big(1000, 7);
  const BlockHash h = hash_block_tokens(std::nullopt, big);
  big[999] = 8;
  EXPECT_NE(h, hash_block_tokens(std::nullopt, big));
  EXPECT_EQ(h.to_string().size(), 32u);
}

}  // namespace
}  // namespace pagoda::kv
