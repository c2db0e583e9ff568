// KVCacheManager with a host tier: prefix lookups that continue the device's hash chain in the
// tier, the evictions offered to the tier (take_host_saves) and the loads of host hits
// (take_host_loads). A Harness plays the engine: each step() takes the saves and loads as the
// engine does before a launch, moves "KV" between a fake device (per block, the hash its content
// was computed for) and the tier, then "runs" the step by writing the blocks it filled. So a test
// can check that a block's content is right whenever a request counts it as computed.
// To add a case: drive admit/finish/step on a Harness and assert on its device, tier and stats.
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/status.h"
#include "kv/kv_cache_manager.h"

namespace pagoda::kv {
namespace {

constexpr int64_t kBlockBytes = sizeof(BlockHash);

std::vector<TokenId> iota_tokens(int n, TokenId first) {
  std::vector<TokenId> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

struct Harness {
  Harness(int num_blocks, int block_size, int64_t tier_blocks)
      : tier(tier_blocks, kBlockBytes),
        manager(KVCacheConfig{num_blocks, block_size, true}, &tier),
        device(static_cast<size_t>(num_blocks)) {}

  struct Live {
    std::vector<TokenId> tokens;
    int num_computed = 0;
    int scheduled_from = 0;  // the step in flight computes [scheduled_from, num_computed)
  };

  // Admits a request and schedules its whole prompt; false when the pool cannot hold it.
  bool admit(RequestId id, std::vector<TokenId> tokens) {
    Live& r = live[id];
    r.tokens = std::move(tokens);
    const KVRequestView view{id, r.tokens, 0, {}};
    const ComputedBlocks hits = manager.get_computed_blocks(view);
    last_hits = hits;
    const int num_new = static_cast<int>(r.tokens.size()) - hits.num_computed_tokens;
    if (!manager.allocate_slots(view, num_new, hits)) {
      live.erase(id);
      return false;
    }
    r.scheduled_from = hits.num_computed_tokens;
    r.num_computed = static_cast<int>(r.tokens.size());
    return true;
  }

  // Frees a request (finish, or preemption before its step ran: then it is not in the step).
  void free(RequestId id) {
    manager.free(id);
    live.erase(id);
  }

  // Before the launch: saves (device -> tier, after the loads read the tier), loads (tier ->
  // device); then the step writes each live request's newly computed full blocks.
  void step() {
    const std::vector<HostKVCopy> saves = manager.take_host_saves();
    const std::vector<HostKVCopy> loads = manager.take_host_loads();
    std::vector<std::optional<BlockHash>> staged;
    for (const HostKVCopy& s : saves) staged.push_back(device[static_cast<size_t>(s.block)]);
    for (const HostKVCopy& l : loads) {
      const std::span<const std::byte> bytes = tier.lookup(l.hash);
      ASSERT_EQ(static_cast<int64_t>(bytes.size()), kBlockBytes);
      BlockHash h;
      std::memcpy(&h, bytes.data(), sizeof(h));
      device[static_cast<size_t>(l.block)] = h;
    }
    for (size_t i = 0; i < saves.size(); ++i) {
      ASSERT_TRUE(staged[i].has_value()) << "saving a block no step wrote";
      ASSERT_EQ(*staged[i], saves[i].hash) << "saving block " << saves[i].block;
      std::byte bytes[kBlockBytes];
      std::memcpy(bytes, &*staged[i], sizeof(BlockHash));
      tier.store(saves[i].hash, bytes);
    }
    num_saved += static_cast<int64_t>(saves.size());
    num_loaded += static_cast<int64_t>(loads.size());
    const int bs = manager.block_size();
    for (auto& [id, r] : live) {
      const auto table = manager.block_table(id);
      // Every block the request counts as computed before this step must hold its content.
      for (int i = 0; i < r.scheduled_from / bs; ++i) {
        const BlockId b = table[static_cast<size_t>(i)];
        ASSERT_EQ(device[static_cast<size_t>(b)], manager.block_pool().block(b).block_hash)
            << "request " << id << " block " << i;
      }
      for (int i = r.scheduled_from / bs; i < r.num_computed / bs; ++i) {
        const BlockId b = table[static_cast<size_t>(i)];
        device[static_cast<size_t>(b)] = manager.block_pool().block(b).block_hash;
      }
      r.scheduled_from = r.num_computed;
    }
  }

  HostKVTier tier;
  KVCacheManager manager;
  std::vector<std::optional<BlockHash>> device;  // [num_blocks]: the hash block b holds the KV of
  std::map<RequestId, Live> live;
  ComputedBlocks last_hits;
  int64_t num_saved = 0;
  int64_t num_loaded = 0;
};

TEST(KVHostTier, AHitContinuesInTheHostTierWhereTheDeviceStops) {
  Harness h(/*num_blocks=*/5, /*block_size=*/4, /*tier_blocks=*/8);  // 4 usable device blocks
  const std::vector<TokenId> a = iota_tokens(13, 100);               // 3 full blocks + 1 token
  ASSERT_TRUE(h.admit(1, a));
  h.step();
  EXPECT_EQ(h.num_saved, 0);
  h.free(1);  // tail first into the free queue: blocks 3, 2, 1 of A are evicted in that order
  ASSERT_TRUE(h.admit(2, iota_tokens(9, 500)));  // 3 blocks: A's partial block, then 2 and 1
  h.step();
  EXPECT_EQ(h.num_saved, 2);  // A's logical blocks 2 and 1 (the partial one has no hash)
  EXPECT_EQ(h.tier.num_blocks(), 2);
  h.free(2);

  ASSERT_TRUE(h.admit(3, a));
  EXPECT_EQ(h.last_hits.block_ids.size(), 1u);          // A's block 0, still on the device
  EXPECT_EQ(h.last_hits.host_block_hashes.size(), 2u);  // blocks 1 and 2 from the host tier
  EXPECT_EQ(h.last_hits.num_computed_tokens, 12);
  EXPECT_EQ(h.manager.prefix_cache_stats().hits_tokens, 4);
  EXPECT_EQ(h.manager.host_cache_stats().hits_tokens, 8);
  EXPECT_EQ(h.manager.host_cache_stats().queries_tokens, 13 + 9 + 13);
  h.step();  // checks that the loaded blocks hold A's KV
  EXPECT_EQ(h.num_loaded, 2);
  // The loaded blocks are device-cached again under the same hashes.
  const auto table = h.manager.block_table(3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(
        h.manager.block_pool().get_cached_block(*h.manager.block_pool().block(table[i]).block_hash),
        table[i]);
  }
}

TEST(KVHostTier, ABlockEvictedBeforeItsStepRanIsNotSaved) {
  Harness h(5, 4, 8);
  ASSERT_TRUE(h.admit(1, iota_tokens(13, 100)));
  h.free(1);  // preempted before its step ran: its cached blocks hold nothing yet
  ASSERT_TRUE(h.admit(2, iota_tokens(16, 500)));  // evicts all of them
  h.step();
  EXPECT_EQ(h.num_saved, 0);
  EXPECT_EQ(h.tier.num_blocks(), 0);
}

TEST(KVHostTier, AHashTheTierHoldsIsTouchedNotCopiedAgain) {
  Harness h(5, 4, 8);
  const std::vector<TokenId> a = iota_tokens(9, 100);
  ASSERT_TRUE(h.admit(1, a));
  h.step();
  h.free(1);
  ASSERT_TRUE(h.admit(2, iota_tokens(16, 500)));
  h.step();
  h.free(2);
  EXPECT_EQ(h.num_saved, 2);   // A's two blocks
  ASSERT_TRUE(h.admit(3, a));  // back from the tier, into blocks that held B's blocks 3, 2, 1
  h.step();
  EXPECT_EQ(h.num_saved, 2 + 3);
  h.free(3);
  ASSERT_TRUE(h.admit(4, iota_tokens(16, 900)));  // evicts B's block 0 and A's blocks again
  h.step();
  EXPECT_EQ(h.num_saved, 2 + 3 + 1);  // only B's block 0 is new to the tier
  EXPECT_EQ(h.tier.num_blocks(), 6);
  EXPECT_EQ(h.tier.num_evictions(), 0);
}

TEST(KVHostTier, ALoadIntoABlockEvictedAgainIsDropped) {
  Harness h(5, 4, 8);
  const std::vector<TokenId> a = iota_tokens(9, 100);
  ASSERT_TRUE(h.admit(1, a));
  h.step();
  h.free(1);
  ASSERT_TRUE(h.admit(2, iota_tokens(16, 500)));
  h.step();
  h.free(2);
  ASSERT_TRUE(h.admit(3, a));
  EXPECT_EQ(h.last_hits.host_block_hashes.size(), 2u);
  h.free(3);                                      // preempted before the load
  ASSERT_TRUE(h.admit(4, iota_tokens(16, 900)));  // takes every block, the load targets too
  EXPECT_TRUE(h.manager.take_host_loads().empty());
}

TEST(KVHostTier, NeedsPrefixCaching) {
  HostKVTier tier(4, kBlockBytes);
  EXPECT_THROW(KVCacheManager(KVCacheConfig{8, 4, false}, &tier), InvalidArgument);
}

// Random admissions and frees of prompts drawn from a few shared prefixes, on a small device pool
// and tier: Harness::step() checks that every block a request counts as computed holds the KV of
// its hash, so a save of an unwritten block, a lost load or a stale host hit fails here.
TEST(KVHostTier, RandomWorkloadsKeepEveryComputedBlockRight) {
  int64_t host_hits = 0, saves = 0;
  for (uint32_t seed = 0; seed < 200; ++seed) {
    std::mt19937 rng(seed);
    const int block_size = std::uniform_int_distribution<int>(1, 4)(rng);
    const int num_blocks = std::uniform_int_distribution<int>(6, 16)(rng);
    Harness h(num_blocks, block_size, std::uniform_int_distribution<int64_t>(1, 24)(rng));
    RequestId next_id = 1;
    for (int op = 0; op < 60; ++op) {
      if (!h.live.empty() && std::uniform_int_distribution<int>(0, 2)(rng) == 0) {
        // Finishes a request whose step ran (one freed before its step ran is the directed test
        // above's case; here another request may have hit its blocks in the same step).
        auto it = h.live.begin();
        std::advance(it, std::uniform_int_distribution<size_t>(0, h.live.size() - 1)(rng));
        if (it->second.scheduled_from == it->second.num_computed) h.free(it->first);
        continue;
      }
      // A prompt: one of 3 prefixes, cut at a random length, then a random tail.
      const int prefix = std::uniform_int_distribution<int>(0, 2)(rng);
      std::vector<TokenId> tokens = iota_tokens(
          std::uniform_int_distribution<int>(1, 3 * block_size + 2)(rng), 1000 * prefix);
      tokens.push_back(std::uniform_int_distribution<TokenId>(0, 3)(rng));
      if (!h.admit(next_id++, tokens)) continue;
      host_hits += static_cast<int64_t>(h.last_hits.host_block_hashes.size());
      if (std::uniform_int_distribution<int>(0, 3)(rng) != 0) {
        ASSERT_NO_FATAL_FAILURE(h.step());
      }
    }
    ASSERT_NO_FATAL_FAILURE(h.step());
    saves += h.num_saved;
  }
  EXPECT_GT(host_hits, 100);
  EXPECT_GT(saves, 100);
}

}  // namespace
}  // namespace pagoda::kv
