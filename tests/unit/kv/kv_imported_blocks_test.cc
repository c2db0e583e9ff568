// KVCacheManager::import_blocks (bi-directional KV: a finished turn's KV from another engine):
// the blocks the cache lacks are placed in free blocks and cached under the hashes a prompt of
// those tokens (and salt) gets, the cached ones kept; placing never evicts the chain's own head;
// a later lookup hits them, counted as imported hits; a failed copy uncaches them, and the host
// tier does not save blocks whose bytes were never written.
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "kv/kv_cache_manager.h"

namespace pagoda::kv {
namespace {

std::vector<TokenId> iota_tokens(int n, TokenId first = 100) {
  std::vector<TokenId> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(KVImportedBlocks, PlacesTheMissingBlocksWhereALaterPromptHitsThem) {
  KVCacheManager m(KVCacheConfig{32, 4, true});
  const std::vector<TokenId> turn = iota_tokens(16);  // 4 full blocks
  // The prefill of the turn's prompt left blocks 0-1 cached.
  const std::vector<TokenId> head(turn.begin(), turn.begin() + 8);
  ASSERT_TRUE(m.allocate_slots({1, head, 0, {}}, 8).has_value());
  m.free(1);
  const ImportedBlocks imported = m.import_blocks(turn, "");
  EXPECT_EQ(imported.num_cached, 2);
  ASSERT_EQ(imported.placed.size(), 2u);
  EXPECT_EQ(imported.placed[0].index, 2);
  EXPECT_EQ(imported.placed[1].index, 3);
  EXPECT_EQ(m.usage(), 0.0);  // cached free blocks, held by no request
  // The next turn: the turn's 16 tokens and 3 more hit all 4 blocks, 2 of them imported.
  std::vector<TokenId> next = turn;
  next.insert(next.end(), {7, 8, 9});
  const ComputedBlocks hits = m.get_computed_blocks({2, next, 0, {}});
  ASSERT_EQ(hits.block_ids.size(), 4u);
  EXPECT_EQ(hits.block_ids[2], imported.placed[0].block);
  EXPECT_EQ(hits.block_ids[3], imported.placed[1].block);
  EXPECT_EQ(m.prefix_cache_stats().hits_tokens, 16);
  EXPECT_EQ(m.imported_hits_tokens(), 8);
  // Importing the same turn again places nothing.
  const ImportedBlocks again = m.import_blocks(turn, "");
  EXPECT_TRUE(again.placed.empty());
  EXPECT_EQ(again.num_cached, 4);
}

TEST(KVImportedBlocks, TheSaltIsPartOfTheHashes) {
  KVCacheManager m(KVCacheConfig{32, 4, true});
  const std::vector<TokenId> turn = iota_tokens(8);
  ASSERT_EQ(m.import_blocks(turn, "tenant-a").placed.size(), 2u);
  std::vector<TokenId> next = turn;
  next.push_back(1);
  EXPECT_TRUE(m.get_computed_blocks({1, next, 0, "tenant-b"}).empty());
  EXPECT_EQ(m.get_computed_blocks({2, next, 0, "tenant-a"}).block_ids.size(), 2u);
}

TEST(KVImportedBlocks, PlacingNeverEvictsTheChainsHeadAndStopsWhenFull) {
  KVCacheManager m(KVCacheConfig{4, 4, true});        // 3 usable blocks
  const std::vector<TokenId> turn = iota_tokens(20);  // 5 full blocks
  // Block 0 of the chain is cached and free: the least recently used, first to be evicted.
  const std::vector<TokenId> head(turn.begin(), turn.begin() + 4);
  ASSERT_TRUE(m.allocate_slots({1, head, 0, {}}, 4).has_value());
  m.free(1);
  const ImportedBlocks imported = m.import_blocks(turn, "");
  EXPECT_EQ(imported.num_cached, 1);
  ASSERT_EQ(imported.placed.size(), 2u);  // blocks 1-2; no room for 3-4
  std::vector<TokenId> next = turn;
  next.push_back(1);
  EXPECT_EQ(m.get_computed_blocks({2, next, 0, {}}).block_ids.size(), 3u);
}

TEST(KVImportedBlocks, AFailedCopyUncachesThemAndTheHostTierSkipsThem) {
  HostKVTier tier(8, 16);
  KVCacheManager m(KVCacheConfig{4, 4, true}, &tier);  // 3 usable blocks
  (void)m.take_host_saves();
  const std::vector<TokenId> turn = iota_tokens(8);
  const ImportedBlocks imported = m.import_blocks(turn, "");
  ASSERT_EQ(imported.placed.size(), 2u);
  (void)m.take_host_saves();  // what placing them evicted (nothing here)
  m.uncache_imported(imported.placed);
  std::vector<TokenId> next = turn;
  next.push_back(1);
  EXPECT_TRUE(m.get_computed_blocks({1, next, 0, {}}).empty());
  EXPECT_TRUE(m.take_host_saves().empty());  // never written: not saved
  EXPECT_EQ(tier.num_blocks(), 0);
}

}  // namespace
}  // namespace pagoda::kv
