// Unit tests of FreeBlockQueue and BlockPool. To add a case: build a small pool (a handful of
// blocks makes eviction order easy to read), drive it, and compare free_queue_order() or block()
// against what LRU eviction predicts.
#include "kv/block_pool.h"

#include <vector>

#include <gtest/gtest.h>

#include "core/status.h"

namespace pagoda::kv {
namespace {

using Ids = std::vector<BlockId>;

BlockHash hash_of(TokenId t) { return hash_block_tokens(std::nullopt, Ids{t}); }

TEST(FreeBlockQueue, PushPopRemoveInOrder) {
  std::vector<KVCacheBlock> blocks(6);
  FreeBlockQueue queue(blocks);
  for (BlockId id : {3, 1, 4, 5, 2}) queue.push_back(id);
  EXPECT_EQ(queue.to_vector(), (Ids{3, 1, 4, 5, 2}));
  queue.remove(4);  // middle
  queue.remove(3);  // head
  queue.remove(2);  // tail
  EXPECT_EQ(queue.to_vector(), (Ids{1, 5}));
  EXPECT_EQ(queue.size(), 2);
  queue.push_back(3);
  EXPECT_EQ(queue.pop_front(), 1);
  EXPECT_EQ(queue.pop_front(), 5);
  EXPECT_EQ(queue.pop_front(), 3);
  EXPECT_TRUE(queue.empty());
  EXPECT_THROW((void)queue.pop_front(), Internal);
  EXPECT_THROW(queue.remove(1), Internal);
  queue.push_back(0);
  EXPECT_THROW(queue.push_back(0), Internal);
}

TEST(BlockPool, NullBlockIsNeverHandedOut) {
  BlockPool pool(5, true);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  const Ids ids = pool.get_new_blocks(4);
  EXPECT_EQ(ids, (Ids{1, 2, 3, 4}));
  EXPECT_EQ(pool.num_free_blocks(), 0);
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
  EXPECT_THROW((void)pool.get_new_blocks(1), Internal);
  EXPECT_THROW(pool.free_blocks(Ids{kNullBlockId}), Internal);
  EXPECT_THROW(pool.touch(Ids{kNullBlockId}), Internal);
  pool.free_blocks(ids);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
}

TEST(BlockPool, DoubleFreeIsABug) {
  BlockPool pool(4, false);
  const Ids ids = pool.get_new_blocks(1);
  pool.free_blocks(ids);
  EXPECT_THROW(pool.free_blocks(ids), Internal);
  EXPECT_THROW(pool.free_blocks(Ids{99}), Internal);
  EXPECT_THROW(BlockPool(1, true), Internal);
}

TEST(BlockPool, FreedBlocksAreReusedLeastRecentlyFreedFirst) {
  BlockPool pool(6, true);
  const Ids a = pool.get_new_blocks(2);  // 1, 2
  const Ids b = pool.get_new_blocks(2);  // 3, 4
  pool.free_blocks(Ids{b[1], b[0]});     // a request frees tail first
  pool.free_blocks(Ids{a[1], a[0]});
  EXPECT_EQ(pool.free_queue_order(), (Ids{5, 4, 3, 2, 1}));
  EXPECT_EQ(pool.get_new_blocks(3), (Ids{5, 4, 3}));
}

TEST(BlockPool, CachedBlocksSurviveFreeUntilEvicted) {
  BlockPool pool(4, true);  // usable: 1, 2, 3
  const Ids ids = pool.get_new_blocks(2);
  pool.cache_full_blocks(ids, std::vector<BlockHash>{hash_of(10), hash_of(11)});
  EXPECT_EQ(pool.num_cached_blocks(), 2);
  pool.free_blocks(Ids{ids[1], ids[0]});
  EXPECT_EQ(pool.get_cached_block(hash_of(10)), ids[0]);  // still hit-able while free
  EXPECT_EQ(pool.get_cached_block(hash_of(11)), ids[1]);
  // Queue: 3 (never used), 2, 1. Taking two evicts block 2's hash, not block 1's.
  EXPECT_EQ(pool.get_new_blocks(2), (Ids{3, ids[1]}));
  EXPECT_EQ(pool.get_cached_block(hash_of(11)), std::nullopt);
  EXPECT_FALSE(pool.block(ids[1]).block_hash.has_value());
  EXPECT_EQ(pool.get_cached_block(hash_of(10)), ids[0]);
  EXPECT_EQ(pool.num_cached_blocks(), 1);
}

TEST(BlockPool, ReportsStoredAndEvictedBlocksWhenAsked) {
  BlockPool pool(4, true);  // usable: 1, 2, 3
  Ids ids = pool.get_new_blocks(2);
  pool.cache_full_blocks(ids, std::vector<BlockHash>{hash_of(10), hash_of(11)});
  EXPECT_TRUE(pool.take_events().empty());  // not recording yet
  pool.set_record_events(true);
  const Ids more = pool.get_new_blocks(1);
  pool.cache_full_blocks(more, std::vector<BlockHash>{hash_of(12)});
  pool.free_blocks(Ids{ids[1], ids[0], more[0]});
  // Free cached blocks, next to evict first: all three, in the order they were freed.
  EXPECT_EQ(pool.evictable_cached_blocks(), (Ids{ids[1], ids[0], more[0]}));
  (void)pool.get_new_blocks(1);  // evicts ids[1] (hash 11)
  const std::vector<KVCacheEvent> events = pool.take_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, KVCacheEvent::Kind::kStored);
  EXPECT_EQ(events[0].hash, hash_of(12));
  EXPECT_EQ(events[0].block_id, more[0]);
  EXPECT_EQ(events[1].kind, KVCacheEvent::Kind::kEvicted);
  EXPECT_EQ(events[1].hash, hash_of(11));
  EXPECT_EQ(events[1].block_id, ids[1]);
  EXPECT_TRUE(pool.take_events().empty());
  EXPECT_EQ(pool.evictable_cached_blocks(), (Ids{ids[0], more[0]}));
}

TEST(BlockPool, TouchingACachedFreeBlockRemovesItFromTheQueue) {
  BlockPool pool(5, true);
  const Ids ids = pool.get_new_blocks(3);
  pool.cache_full_blocks(Ids{ids[1]}, std::vector<BlockHash>{hash_of(7)});
  pool.free_blocks(ids);
  EXPECT_EQ(pool.free_queue_order(), (Ids{4, 1, 2, 3}));
  pool.touch(Ids{ids[1]});
  EXPECT_EQ(pool.block(ids[1]).ref_count, 1);
  EXPECT_EQ(pool.free_queue_order(), (Ids{4, 1, 3}));
  EXPECT_EQ(pool.get_new_blocks(3), (Ids{4, 1, 3}));  // the touched block is not evicted
  EXPECT_EQ(pool.get_cached_block(hash_of(7)), ids[1]);
  // Touching a block in use only adds a reference.
  pool.touch(Ids{ids[1]});
  EXPECT_EQ(pool.block(ids[1]).ref_count, 2);
  pool.free_blocks(Ids{ids[1]});
  EXPECT_EQ(pool.num_free_blocks(), 0);
  pool.free_blocks(Ids{ids[1]});
  EXPECT_EQ(pool.free_queue_order(), (Ids{ids[1]}));
}

TEST(BlockPool, DuplicateHashKeepsTheFirstBlock) {
  BlockPool pool(4, true);
  const Ids ids = pool.get_new_blocks(2);
  pool.cache_full_blocks(Ids{ids[0]}, std::vector<BlockHash>{hash_of(1)});
  pool.cache_full_blocks(Ids{ids[1]}, std::vector<BlockHash>{hash_of(1)});
  EXPECT_EQ(pool.get_cached_block(hash_of(1)), ids[0]);
  EXPECT_FALSE(pool.block(ids[1]).block_hash.has_value());
  // Re-caching a block under its own hash is a no-op; under another hash a bug.
  pool.cache_full_blocks(Ids{ids[0]}, std::vector<BlockHash>{hash_of(1)});
  EXPECT_THROW(pool.cache_full_blocks(Ids{ids[0]}, std::vector<BlockHash>{hash_of(2)}), Internal);
}

TEST(BlockPool, CachingOffCachesNothing) {
  BlockPool pool(4, false);
  const Ids ids = pool.get_new_blocks(1);
  pool.cache_full_blocks(ids, std::vector<BlockHash>{hash_of(1)});
  EXPECT_EQ(pool.get_cached_block(hash_of(1)), std::nullopt);
  EXPECT_EQ(pool.num_cached_blocks(), 0);
}

TEST(BlockPool, ResetPrefixCacheOnlyWhenIdle) {
  BlockPool pool(4, true);
  const Ids ids = pool.get_new_blocks(1);
  pool.cache_full_blocks(ids, std::vector<BlockHash>{hash_of(1)});
  EXPECT_FALSE(pool.reset_prefix_cache());
  EXPECT_EQ(pool.get_cached_block(hash_of(1)), ids[0]);
  pool.free_blocks(ids);
  EXPECT_TRUE(pool.reset_prefix_cache());
  EXPECT_EQ(pool.get_cached_block(hash_of(1)), std::nullopt);
  EXPECT_FALSE(pool.block(ids[0]).block_hash.has_value());
  EXPECT_EQ(pool.num_free_blocks(), 3);
}

}  // namespace
}  // namespace pagoda::kv
