// KVCacheManager with received blocks (prefill/decode disaggregation's consumer): the lookup
// continues with them where the device cache stops, they get fresh blocks handed out by
// take_external_loads(), they are cached under their hashes, and a request freed before its load
// drops its loads.
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

TEST(KVExternalBlocks, ReceivedBlocksFollowTheDeviceHitsAndAreLoaded) {
  KVCacheManager m(KVCacheConfig{32, 4, true});
  const std::vector<TokenId> tokens = iota_tokens(18);  // 4 full blocks, then 2 tokens
  // A first request puts blocks 0-1 in the device cache.
  const std::vector<TokenId> head(tokens.begin(), tokens.begin() + 8);
  ASSERT_TRUE(m.allocate_slots({1, head, 0, {}}, 8).has_value());
  m.free(1);
  // Request 2 received 4 blocks: the device holds 0-1, so 2-3 are loaded.
  const KVRequestView view{2, tokens, 0, {}, 4};
  const ComputedBlocks hits = m.get_computed_blocks(view);
  EXPECT_EQ(hits.block_ids.size(), 2u);
  EXPECT_EQ(hits.num_external_blocks, 2);
  EXPECT_EQ(hits.num_computed_tokens, 16);
  EXPECT_EQ(m.prefix_cache_stats().hits_tokens, 8);  // device hits only
  const auto fresh = m.allocate_slots(view, 2, hits);
  ASSERT_TRUE(fresh.has_value());
  ASSERT_EQ(fresh->size(), 3u);  // blocks 2, 3 and the tail's block 4
  const std::vector<ExternalKVLoad> loads = m.take_external_loads();
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads[0], (ExternalKVLoad{2, 2, (*fresh)[0]}));
  EXPECT_EQ(loads[1], (ExternalKVLoad{2, 3, (*fresh)[1]}));
  EXPECT_TRUE(m.take_external_loads().empty());
  // Cached under their hashes: a third request with the prompt hits all 4 blocks.
  m.free(2);
  EXPECT_EQ(m.get_computed_blocks({3, tokens, 0, {}}).block_ids.size(), 4u);
}

TEST(KVExternalBlocks, TheLastTokenIsNeverReceivedAndCachingOffStillLoads) {
  KVCacheManager m(KVCacheConfig{32, 4, false});
  const std::vector<TokenId> tokens = iota_tokens(8);  // 2 full blocks: only 1 may be used
  const KVRequestView view{1, tokens, 0, {}, 2};
  const ComputedBlocks hits = m.get_computed_blocks(view);
  EXPECT_EQ(hits.num_external_blocks, 1);
  EXPECT_EQ(hits.num_computed_tokens, 4);
  ASSERT_TRUE(m.allocate_slots(view, 4, hits).has_value());
  EXPECT_EQ(m.take_external_loads().size(), 1u);
}

TEST(KVExternalBlocks, AFreedRequestDropsItsLoads) {
  KVCacheManager m(KVCacheConfig{32, 4, true});
  const std::vector<TokenId> tokens = iota_tokens(13);
  const KVRequestView view{1, tokens, 0, {}, 3};
  const ComputedBlocks hits = m.get_computed_blocks(view);
  ASSERT_TRUE(m.allocate_slots(view, 1, hits).has_value());
  m.free(1, /*drop_pending=*/true);
  EXPECT_TRUE(m.take_external_loads().empty());
  EXPECT_EQ(m.num_free_blocks(), 31);
}

}  // namespace
}  // namespace pagoda::kv
