#include "router/prefix_policy.h"

#include <gtest/gtest.h>

#include <string>

#include "core/status.h"

namespace pagoda::router {
namespace {

std::vector<BackendState> loads(std::vector<int64_t> in_flight) {
  std::vector<BackendState> out;
  for (int64_t n : in_flight) out.push_back({true, n});
  return out;
}

TEST(PrefixBlockHashesTest, WholeBlocksChainedOnTheirPrefix) {
  EXPECT_TRUE(prefix_block_hashes("abc", 4).empty());
  const auto a = prefix_block_hashes("abcdefghij", 4);
  ASSERT_EQ(a.size(), 2u);
  // The second hash names the whole prefix: the same second block after another first differs.
  const auto b = prefix_block_hashes("xbcdefgh", 4);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_NE(a[0], b[0]);
  EXPECT_NE(a[1], b[1]);
  EXPECT_EQ(prefix_block_hashes("abcdefghXY", 4), a);  // the partial tail does not count
  EXPECT_EQ(prefix_block_hashes("abcdZZZZ", 4)[0], a[0]);
  EXPECT_NE(prefix_block_hashes("abcdZZZZ", 4)[1], a[1]);
}

TEST(BlockLruTest, EvictsTheLeastRecentlyUsed) {
  BlockLru lru(2);
  lru.touch(1);
  lru.touch(2);
  lru.touch(1);  // 2 is now the oldest
  lru.touch(3);
  EXPECT_TRUE(lru.contains(1));
  EXPECT_FALSE(lru.contains(2));
  EXPECT_TRUE(lru.contains(3));
  EXPECT_EQ(lru.size(), 2u);
}

TEST(PrefixPolicyTest, NoMatchGoesLeastLoadedWithTiesRoundRobin) {
  PrefixPolicy policy(3, {});
  RouteDecision d;
  std::vector<size_t> chosen;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(policy.choose({}, loads({0, 0, 0}), d));
    EXPECT_EQ(d.reason, RouteReason::kLeastLoaded);
    chosen.push_back(d.backend);
  }
  EXPECT_EQ(chosen, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
  ASSERT_TRUE(policy.choose({}, loads({3, 1, 2}), d));
  EXPECT_EQ(d.backend, 1u);
}

TEST(PrefixPolicyTest, TheLongestLeadingMatchWins) {
  PrefixPolicy policy(2, {});
  const auto shared = prefix_block_hashes(std::string(40, 's') + "one", 8);
  const auto longer = prefix_block_hashes(std::string(40, 's') + std::string(16, 'x'), 8);
  RouteDecision d;
  ASSERT_TRUE(policy.choose(shared, loads({0, 0}), d));  // round robin: backend 0
  EXPECT_EQ(d.backend, 0u);
  ASSERT_TRUE(policy.choose(longer, loads({0, 5}), d));  // 5 blocks match on backend 0
  EXPECT_EQ(d.backend, 0u);
  EXPECT_EQ(d.reason, RouteReason::kPrefixHit);
  EXPECT_EQ(d.matched_blocks, 5u);
  // Both hold the first 5 blocks once backend 1 served them too; backend 0 holds 7.
  ASSERT_TRUE(policy.choose(shared, {{false, 0}, {true, 0}}, d));  // only 1 is eligible
  EXPECT_EQ(d.backend, 1u);
  ASSERT_TRUE(policy.choose(longer, loads({1, 0}), d));
  EXPECT_EQ(d.backend, 0u);
  EXPECT_EQ(d.matched_blocks, 7u);
  EXPECT_EQ(policy.matched_blocks(1, longer), 5u);
}

TEST(PrefixPolicyTest, AHotPrefixSpillsOverPastBothThresholds) {
  PrefixPolicy policy(2, {.balance_abs_threshold = 2, .balance_rel_threshold = 1.5});
  const auto hashes = prefix_block_hashes(std::string(64, 'p'), 16);
  RouteDecision d;
  ASSERT_TRUE(policy.choose(hashes, loads({0, 0}), d));
  ASSERT_EQ(d.backend, 0u);
  // 2 above the least loaded is not more than the absolute threshold.
  ASSERT_TRUE(policy.choose(hashes, loads({2, 0}), d));
  EXPECT_EQ(d.backend, 0u);
  // 3 above, and 3 > 1.5 * 0: spills over, and backend 1 now holds the prefix too.
  ASSERT_TRUE(policy.choose(hashes, loads({3, 0}), d));
  EXPECT_EQ(d.backend, 1u);
  EXPECT_EQ(d.reason, RouteReason::kLoadBalanced);
  EXPECT_EQ(policy.matched_blocks(1, hashes), 4u);
  // Both match now: the less loaded of the two.
  ASSERT_TRUE(policy.choose(hashes, loads({3, 1}), d));
  EXPECT_EQ(d.backend, 1u);
  EXPECT_EQ(d.reason, RouteReason::kPrefixHit);
  // The relative threshold: 10 vs 7 is 3 above but not 1.5 times; only backend 0 matches.
  PrefixPolicy relative(2, {.balance_abs_threshold = 2, .balance_rel_threshold = 1.5});
  ASSERT_TRUE(relative.choose(hashes, {{true, 0}, {false, 0}}, d));
  ASSERT_TRUE(relative.choose(hashes, loads({10, 7}), d));
  EXPECT_EQ(d.backend, 0u);
  EXPECT_EQ(d.reason, RouteReason::kPrefixHit);
}

TEST(PrefixPolicyTest, NothingEligibleAndBadOptions) {
  PrefixPolicy policy(2, {});
  RouteDecision d;
  EXPECT_FALSE(policy.choose({}, {{false, 0}, {false, 0}}, d));
  EXPECT_THROW(PrefixPolicy(1, {.balance_abs_threshold = -1}), InvalidArgument);
  EXPECT_THROW(PrefixPolicy(1, {.balance_rel_threshold = 0.5}), InvalidArgument);
  EXPECT_THROW(PrefixPolicy(1, {.max_blocks_per_backend = 0}), InvalidArgument);
}

TEST(PrefixPolicyTest, MatchesSurviveEvictionFromTheFirstBlock) {
  // Room for 3 hashes: a 4-block prompt keeps its first 3 blocks (the last is evicted first).
  PrefixPolicy policy(1, {.max_blocks_per_backend = 3});
  const auto hashes = prefix_block_hashes(std::string(32, 'q'), 8);
  RouteDecision d;
  ASSERT_TRUE(policy.choose(hashes, loads({0}), d));
  EXPECT_EQ(policy.matched_blocks(0, hashes), 3u);
}

}  // namespace
}  // namespace pagoda::router
