// Scenario tests of KVCacheManager: allocation on demand, prefix caching, salts, forks, frees.
// To add a case: make a manager with make_manager(num_blocks, block_size), describe requests as
// TestRequest (tokens + salt), and drive get_computed_blocks / allocate_slots / fork / free the way
// the scheduler would, asserting on block tables, ref counts and the prefix-cache counters.
#include "kv/kv_cache_manager.h"

#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/status.h"

namespace pagoda::kv {
namespace {

using Ids = std::vector<BlockId>;

struct TestRequest {
  TestRequest(RequestId id, std::vector<TokenId> tokens, std::string salt = "",
              int num_computed = 0)
      : id(id), tokens(std::move(tokens)), salt(std::move(salt)), num_computed(num_computed) {}

  RequestId id;
  std::vector<TokenId> tokens;
  std::string salt;
  int num_computed;

  [[nodiscard]] KVRequestView view() const { return {id, tokens, num_computed, salt}; }
};

std::vector<TokenId> iota_tokens(int n, TokenId first = 100) {
  std::vector<TokenId> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

KVCacheManager make_manager(int num_blocks, int block_size, bool caching = true) {
  return KVCacheManager(KVCacheConfig{num_blocks, block_size, caching});
}

// Schedules the whole remaining prompt at once, as a prefill without chunking; returns the hits.
ComputedBlocks prefill(KVCacheManager& manager, TestRequest& request) {
  ComputedBlocks hits = manager.get_computed_blocks(request.view());
  const int num_new = static_cast<int>(request.tokens.size()) - hits.num_computed_tokens;
  EXPECT_TRUE(manager.allocate_slots(request.view(), num_new, hits).has_value());
  request.num_computed = static_cast<int>(request.tokens.size());
  return hits;
}

Ids table(const KVCacheManager& manager, RequestId id) {
  const auto t = manager.block_table(id);
  return Ids(t.begin(), t.end());
}

TEST(KVCacheManager, AllocatesOnDemandNotForMaxLength) {
  KVCacheManager manager = make_manager(11, 4);
  TestRequest r{1, iota_tokens(6)};
  const auto first = manager.allocate_slots(r.view(), 3);  // chunked prefill: 3 of 6 tokens
  ASSERT_TRUE(first);
  EXPECT_EQ(first->size(), 1u);
  r.num_computed = 3;
  const auto second = manager.allocate_slots(r.view(), 3);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->size(), 1u);
  EXPECT_EQ(table(manager, 1).size(), 2u);
  r.num_computed = 6;
  r.tokens.push_back(7);  // decode: one token at a time fills block 2 without a new block
  EXPECT_EQ(manager.allocate_slots(r.view(), 1)->size(), 0u);
  // Speculative decoding: lookahead slots are allocated but their blocks are not cached.
  EXPECT_EQ(manager.allocate_slots(r.view(), 1, {}, 6)->size(), 2u);  // 13 slots: 4 blocks
  EXPECT_EQ(table(manager, 1).size(), 4u);
  EXPECT_EQ(manager.num_free_blocks(), 6);
  EXPECT_NEAR(manager.usage(), 0.4, 1e-12);
  EXPECT_EQ(manager.block_pool().num_cached_blocks(), 1);  // only tokens 0..3 form a full block
}

TEST(KVCacheManager, FailedAllocationChangesNothing) {
  KVCacheManager manager = make_manager(4, 4);  // 3 usable blocks
  TestRequest a{1, iota_tokens(8)};
  ASSERT_TRUE(manager.allocate_slots(a.view(), 8));
  TestRequest b{2, iota_tokens(8, 500)};
  EXPECT_FALSE(manager.allocate_slots(b.view(), 8).has_value());
  EXPECT_FALSE(manager.has_request(2));
  EXPECT_EQ(manager.num_free_blocks(), 1);
  a.num_computed = 8;
  a.tokens.push_back(1);
  EXPECT_FALSE(manager.allocate_slots(a.view(), 1, {}, 4).has_value());  // needs 2 blocks
  EXPECT_EQ(table(manager, 1).size(), 2u);
  EXPECT_EQ(manager.allocate_slots(a.view(), 1)->size(), 1u);
}

TEST(KVCacheManager, SharedPrefixIsHitAndCounted) {
  KVCacheManager manager = make_manager(64, 4);
  TestRequest a{1, iota_tokens(30)};
  const ComputedBlocks miss = prefill(manager, a);
  EXPECT_TRUE(miss.empty());
  EXPECT_EQ(manager.queries_tokens(), 30);
  EXPECT_EQ(manager.hits_tokens(), 0);

  // b shares the first 21 tokens: 5 full blocks (20 tokens) are hits.
  TestRequest b{2, iota_tokens(21)};
  for (TokenId t : {7, 7, 7, 7, 7, 7}) b.tokens.push_back(t);
  const ComputedBlocks hits = prefill(manager, b);
  EXPECT_EQ(hits.num_computed_tokens, 20);
  EXPECT_EQ(manager.queries_tokens(), 30 + 27);
  EXPECT_EQ(manager.hits_tokens(), 20);
  EXPECT_NEAR(manager.prefix_cache_stats().hit_rate(), 20.0 / 57, 1e-12);
  const Ids ta = table(manager, 1);
  const Ids tb = table(manager, 2);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ta[i], tb[i]);
    EXPECT_EQ(manager.block_pool().block(ta[i]).ref_count, 2);
  }
  EXPECT_NE(ta[5], tb[5]);
  EXPECT_EQ(manager.block_pool().block(tb[5]).ref_count, 1);
}

TEST(KVCacheManager, NeverHitsTheWholePrompt) {
  KVCacheManager manager = make_manager(16, 4);
  TestRequest a{1, iota_tokens(8)};
  prefill(manager, a);
  TestRequest b{2, iota_tokens(8)};  // identical, block-aligned prompt
  EXPECT_EQ(manager.get_computed_blocks(b.view()).num_computed_tokens, 4);
  TestRequest c{3, iota_tokens(9)};
  EXPECT_EQ(manager.get_computed_blocks(c.view()).num_computed_tokens, 8);
  TestRequest d{4, iota_tokens(1)};
  EXPECT_EQ(manager.get_computed_blocks(d.view()).num_computed_tokens, 0);
}

TEST(KVCacheManager, DifferentSaltSharesNothing) {
  KVCacheManager manager = make_manager(32, 4);
  TestRequest a{1, iota_tokens(17), "tenant-a"};
  prefill(manager, a);
  TestRequest b{2, iota_tokens(17), "tenant-b"};
  EXPECT_TRUE(manager.get_computed_blocks(b.view()).empty());
  TestRequest unsalted{3, iota_tokens(17)};
  EXPECT_TRUE(manager.get_computed_blocks(unsalted.view()).empty());
  TestRequest same{4, iota_tokens(17), "tenant-a"};
  EXPECT_EQ(manager.get_computed_blocks(same.view()).num_computed_tokens, 16);
  EXPECT_EQ(manager.hits_tokens(), 16);
}

TEST(KVCacheManager, PrefixCachingOffSharesNothing) {
  KVCacheManager manager = make_manager(32, 4, /*caching=*/false);
  TestRequest a{1, iota_tokens(17)};
  prefill(manager, a);
  TestRequest b{2, iota_tokens(17)};
  EXPECT_TRUE(prefill(manager, b).empty());
  EXPECT_EQ(manager.block_pool().num_cached_blocks(), 0);
  EXPECT_EQ(manager.queries_tokens(), 0);
  EXPECT_EQ(manager.hits_tokens(), 0);
  for (BlockId id : table(manager, 1)) EXPECT_EQ(manager.block_pool().block(id).ref_count, 1);
}

TEST(KVCacheManager, FreedBlocksStayHitableUntilEvicted) {
  KVCacheManager manager = make_manager(7, 4);  // 6 usable blocks
  TestRequest a{1, iota_tokens(13)};
  prefill(manager, a);
  const Ids ta = table(manager, 1);  // 4 blocks, 3 full and cached
  manager.free(1);
  EXPECT_EQ(manager.num_free_blocks(), 6);
  EXPECT_FALSE(manager.has_request(1));

  TestRequest b{2, iota_tokens(13)};
  const ComputedBlocks hits = prefill(manager, b);
  EXPECT_EQ(hits.block_ids, (Ids{ta[0], ta[1], ta[2]}));
  EXPECT_EQ(manager.num_free_blocks(), 2);  // the hits left the free queue, the tail is new
  manager.free(2);

  // An unrelated request needing all 6 blocks evicts the cache; a is then a miss.
  TestRequest big{3, iota_tokens(24, 9000)};
  ASSERT_TRUE(manager.allocate_slots(big.view(), 24));
  manager.free(3);
  TestRequest again{4, iota_tokens(13)};
  EXPECT_TRUE(manager.get_computed_blocks(again.view()).empty());
}

TEST(KVCacheManager, EvictsTheTailOfAFreedSequenceFirst) {
  KVCacheManager manager = make_manager(6, 4);  // 5 usable blocks
  TestRequest a{1, iota_tokens(17)};
  prefill(manager, a);  // 5 blocks, 4 full and cached
  manager.free(1);
  TestRequest other{2, iota_tokens(8, 7000)};  // takes 2 blocks: a's last two
  ASSERT_TRUE(manager.allocate_slots(other.view(), 8));
  TestRequest b{3, iota_tokens(17)};
  EXPECT_EQ(manager.get_computed_blocks(b.view()).num_computed_tokens, 12);  // head survived
}

TEST(KVCacheManager, HitsOnFreeBlocksCountAgainstFreeSpace) {
  KVCacheManager manager = make_manager(5, 4);  // 4 usable blocks
  TestRequest a{1, iota_tokens(13)};
  prefill(manager, a);
  manager.free(1);  // 3 cached free blocks + 1 uncached
  TestRequest b{2, iota_tokens(13)};
  const ComputedBlocks hits = manager.get_computed_blocks(b.view());
  ASSERT_EQ(hits.block_ids.size(), 3u);
  // 3 hits (free, so they consume free space) + 2 new blocks > 4 free: must fail, and leave the
  // cache intact.
  EXPECT_FALSE(manager.allocate_slots(b.view(), 1, hits, 4).has_value());
  EXPECT_EQ(manager.block_pool().num_cached_blocks(), 3);
  EXPECT_EQ(manager.allocate_slots(b.view(), 1, hits)->size(), 1u);
  EXPECT_EQ(manager.num_free_blocks(), 0);
}

TEST(KVCacheManager, StaleComputedBlocksAreABug) {
  KVCacheManager manager = make_manager(4, 4);  // 3 usable blocks
  TestRequest a{1, iota_tokens(9)};
  prefill(manager, a);
  manager.free(1);
  TestRequest b{2, iota_tokens(9)};
  const ComputedBlocks hits = manager.get_computed_blocks(b.view());
  ASSERT_EQ(hits.block_ids.size(), 2u);
  TestRequest c{3, iota_tokens(12, 5000)};
  ASSERT_TRUE(manager.allocate_slots(c.view(), 12));  // evicts a's blocks
  EXPECT_THROW((void)manager.allocate_slots(b.view(), 1, hits), Internal);
}

TEST(KVCacheManager, ForkSharesFullBlocksAndCopiesThePartialOne) {
  KVCacheManager manager = make_manager(16, 4);
  TestRequest parent{1, iota_tokens(10)};
  prefill(manager, parent);
  const Ids tp = table(manager, 1);  // 3 blocks: 2 full, 1 holding 2 tokens
  const auto fork = manager.fork(1, 2, 10);
  ASSERT_TRUE(fork);
  ASSERT_TRUE(fork->copy_on_write);
  const Ids tc = table(manager, 2);
  ASSERT_EQ(tc.size(), 3u);
  EXPECT_EQ(tc[0], tp[0]);
  EXPECT_EQ(tc[1], tp[1]);
  EXPECT_EQ(manager.block_pool().block(tp[0]).ref_count, 2);
  EXPECT_EQ(manager.block_pool().block(tp[1]).ref_count, 2);
  EXPECT_EQ(*fork->copy_on_write, (BlockCopy{tp[2], tc[2]}));
  EXPECT_NE(tc[2], tp[2]);
  EXPECT_EQ(manager.block_pool().block(tp[2]).ref_count, 1);
  EXPECT_EQ(manager.block_pool().block(tc[2]).ref_count, 1);

  // Each continues with its own sampled token; the child's full blocks get cached by content.
  TestRequest child{2, parent.tokens, "", 10};
  parent.tokens.push_back(1);
  child.tokens.push_back(2);
  ASSERT_TRUE(manager.allocate_slots(parent.view(), 1));
  ASSERT_TRUE(manager.allocate_slots(child.view(), 1));
  parent.num_computed = child.num_computed = 11;
  parent.tokens.push_back(1);
  child.tokens.push_back(2);
  ASSERT_TRUE(manager.allocate_slots(parent.view(), 1));
  ASSERT_TRUE(manager.allocate_slots(child.view(), 1));
  EXPECT_EQ(manager.block_pool().num_cached_blocks(), 4);  // 2 shared + each one's 3rd block

  manager.free(1);
  EXPECT_EQ(manager.block_pool().block(tp[0]).ref_count, 1);
  manager.free(2);
  EXPECT_EQ(manager.num_free_blocks(), 15);
}

TEST(KVCacheManager, ForkAtABlockBoundaryCopiesNothing) {
  KVCacheManager manager = make_manager(4, 4);
  TestRequest parent{1, iota_tokens(8)};
  prefill(manager, parent);
  EXPECT_EQ(manager.num_free_blocks(), 1);
  const auto fork = manager.fork(1, 2, 8);
  ASSERT_TRUE(fork);
  EXPECT_FALSE(fork->copy_on_write);
  EXPECT_EQ(table(manager, 2), table(manager, 1));
  EXPECT_EQ(manager.num_free_blocks(), 1);
}

TEST(KVCacheManager, ForkWithoutRoomChangesNothing) {
  KVCacheManager manager = make_manager(3, 4);  // 2 usable blocks
  TestRequest parent{1, iota_tokens(6)};
  prefill(manager, parent);
  EXPECT_FALSE(manager.fork(1, 2, 6).has_value());
  EXPECT_FALSE(manager.has_request(2));
  EXPECT_EQ(manager.block_pool().block(table(manager, 1)[0]).ref_count, 1);
  EXPECT_THROW((void)manager.fork(9, 2, 0), Internal);  // unknown parent
  EXPECT_THROW((void)manager.fork(1, 1, 0), Internal);  // child exists
  EXPECT_THROW((void)manager.fork(1, 2, 9), Internal);  // past the parent's blocks
}

TEST(KVCacheManager, FreeIsImmediateAndIdempotent) {
  KVCacheManager manager = make_manager(8, 4);
  TestRequest a{1, iota_tokens(12)};
  ASSERT_TRUE(manager.allocate_slots(a.view(), 5));  // aborted mid chunked prefill
  manager.free(1);
  EXPECT_EQ(manager.num_free_blocks(), 7);
  manager.free(1);
  manager.free(12345);
  EXPECT_EQ(manager.num_free_blocks(), 7);
  EXPECT_THROW((void)manager.block_table(1), Internal);
}

TEST(KVCacheManager, ResetPrefixCache) {
  KVCacheManager manager = make_manager(8, 4);
  TestRequest a{1, iota_tokens(9)};
  prefill(manager, a);
  EXPECT_FALSE(manager.reset_prefix_cache());
  manager.free(1);
  EXPECT_TRUE(manager.reset_prefix_cache());
  TestRequest b{2, iota_tokens(9)};
  EXPECT_TRUE(manager.get_computed_blocks(b.view()).empty());
}

TEST(KVCacheManager, MisuseIsCaught) {
  KVCacheManager manager = make_manager(8, 4);
  TestRequest a{1, iota_tokens(9)};
  prefill(manager, a);
  EXPECT_THROW((void)manager.get_computed_blocks(a.view()), Internal);  // already holds blocks
  EXPECT_THROW((void)manager.allocate_slots(a.view(), -1), Internal);
  EXPECT_THROW(make_manager(1, 4), InvalidArgument);
  EXPECT_THROW(make_manager(8, 0), InvalidArgument);
}

// Scheduling windows (begin_window): blocks cached within the current window are not hit by a
// prefix lookup of the same window, a preempted request's pending blocks lose their hashes (their
// step never writes them), and everything else keeps the behaviour of a manager without windows.
TEST(KVCacheManagerWindow, PendingBlocksAreNotHitAndAPreemptedRequestsAreUncached) {
  KVCacheManager manager = make_manager(32, 16);
  const std::vector<TokenId> prefix = iota_tokens(40);
  manager.begin_window();
  TestRequest a(1, prefix);
  (void)prefill(manager, a);  // blocks 0 and 1 (tokens 0..31) cached, pending
  TestRequest b(2, prefix);
  EXPECT_EQ(manager.get_computed_blocks(b.view()).num_computed_tokens, 0);  // same window
  manager.free(a.id, /*drop_pending=*/true);  // preempted before its step ran
  manager.begin_window();
  EXPECT_EQ(manager.get_computed_blocks(b.view()).num_computed_tokens, 0);  // hashes dropped

  // A request whose step ran (freed at its finish, even within the window it was scheduled in)
  // keeps its cached blocks for the next window.
  TestRequest c(3, prefix);
  (void)prefill(manager, c);
  manager.free(c.id);
  EXPECT_EQ(manager.get_computed_blocks(b.view()).num_computed_tokens, 0);  // still pending
  manager.begin_window();
  EXPECT_EQ(manager.get_computed_blocks(b.view()).num_computed_tokens, 32);
}

TEST(KVCacheManagerWindow, APendingBlockSharedWithAnotherRequestStaysCached) {
  KVCacheManager manager = make_manager(32, 16);
  manager.begin_window();
  TestRequest a(1, iota_tokens(40));
  (void)prefill(manager, a);
  ASSERT_TRUE(manager.fork(a.id, 2, 32).has_value());  // the child holds blocks 0 and 1 too
  manager.free(a.id, /*drop_pending=*/true);
  manager.begin_window();
  TestRequest b(3, iota_tokens(40));
  EXPECT_EQ(manager.get_computed_blocks(b.view()).num_computed_tokens, 32);
}

TEST(KVCacheManagerWindow, WithoutWindowsCachedBlocksAreHitAtOnce) {
  KVCacheManager manager = make_manager(32, 16);
  TestRequest a(1, iota_tokens(40));
  (void)prefill(manager, a);
  TestRequest b(2, iota_tokens(40));
  EXPECT_EQ(manager.get_computed_blocks(b.view()).num_computed_tokens, 32);
  manager.free(a.id, /*drop_pending=*/true);  // nothing is pending without windows
  EXPECT_EQ(manager.get_computed_blocks(b.view()).num_computed_tokens, 32);
}

}  // namespace
}  // namespace pagoda::kv
