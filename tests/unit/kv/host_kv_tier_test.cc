// HostKVTier: bytes in and out, LRU eviction at capacity, touches, and random operation sequences
// checked against a reference LRU (a std::list of hashes). To add a case: store blocks whose bytes
// are derived from their hash (block_bytes_of), then assert on contains / lookup / lru_order.
#include "kv/host_kv_tier.h"

#include <algorithm>
#include <list>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/status.h"

namespace pagoda::kv {
namespace {

constexpr int64_t kBlockBytes = 24;

BlockHash hash_of(uint64_t n) { return BlockHash{n * 0x9e3779b97f4a7c15ULL + 1, n}; }

// The bytes a test stores under hash_of(n): byte i is (n * 7 + i) mod 256.
std::vector<std::byte> block_bytes_of(uint64_t n) {
  std::vector<std::byte> bytes(kBlockBytes);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>((n * 7 + i) & 0xff);
  return bytes;
}

bool holds(HostKVTier& tier, uint64_t n) {
  const std::span<const std::byte> got = tier.lookup(hash_of(n));
  const std::vector<std::byte> want = block_bytes_of(n);
  return std::equal(got.begin(), got.end(), want.begin(), want.end());
}

TEST(HostKVTier, StoresAndLooksUpBytes) {
  HostKVTier tier(4, kBlockBytes);
  EXPECT_FALSE(tier.contains(hash_of(1)));
  EXPECT_TRUE(tier.lookup(hash_of(1)).empty());
  EXPECT_TRUE(tier.store(hash_of(1), block_bytes_of(1)));
  EXPECT_TRUE(tier.store(hash_of(2), block_bytes_of(2)));
  EXPECT_TRUE(tier.contains(hash_of(1)));
  EXPECT_TRUE(holds(tier, 1));
  EXPECT_TRUE(holds(tier, 2));
  EXPECT_EQ(tier.num_blocks(), 2);
  EXPECT_DOUBLE_EQ(tier.usage(), 0.5);
}

TEST(HostKVTier, EvictsTheLeastRecentlyUsedAtCapacity) {
  HostKVTier tier(3, kBlockBytes);
  for (uint64_t n : {1, 2, 3}) ASSERT_TRUE(tier.store(hash_of(n), block_bytes_of(n)));
  EXPECT_FALSE(tier.lookup(hash_of(1)).empty());  // 1 is now the most recently used
  EXPECT_TRUE(tier.store(hash_of(4), block_bytes_of(4)));
  EXPECT_FALSE(tier.contains(hash_of(2)));  // the least recently used went
  EXPECT_EQ(tier.lru_order(), (std::vector<BlockHash>{hash_of(3), hash_of(1), hash_of(4)}));
  EXPECT_EQ(tier.num_evictions(), 1);
  EXPECT_EQ(tier.num_blocks(), 3);
  for (uint64_t n : {1, 3, 4}) EXPECT_TRUE(holds(tier, n)) << n;  // the reused slot has 4's bytes
}

TEST(HostKVTier, StoringAPresentHashOnlyTouchesIt) {
  HostKVTier tier(2, kBlockBytes);
  ASSERT_TRUE(tier.store(hash_of(1), block_bytes_of(1)));
  ASSERT_TRUE(tier.store(hash_of(2), block_bytes_of(2)));
  EXPECT_FALSE(tier.store(hash_of(1), block_bytes_of(9)));  // same hash: content kept
  EXPECT_EQ(tier.lru_order(), (std::vector<BlockHash>{hash_of(2), hash_of(1)}));
  EXPECT_TRUE(tier.touch(hash_of(2)));
  EXPECT_FALSE(tier.touch(hash_of(3)));
  EXPECT_EQ(tier.lru_order(), (std::vector<BlockHash>{hash_of(1), hash_of(2)}));
  EXPECT_TRUE(holds(tier, 1));
}

TEST(HostKVTier, RejectsEmptyOrWrongSizes) {
  EXPECT_THROW(HostKVTier(0, kBlockBytes), InvalidArgument);
  EXPECT_THROW(HostKVTier(4, 0), InvalidArgument);
  EXPECT_THROW(HostKVTier(INT64_MAX / 2, 4), InvalidArgument);  // overflows the arena size
  HostKVTier tier(1, kBlockBytes);
  std::vector<std::byte> short_block(kBlockBytes - 1);
  EXPECT_THROW((void)tier.store(hash_of(1), short_block), Internal);
}

// Random stores, lookups and touches over a small universe of hashes, against a reference LRU:
// after every operation the tier holds exactly the reference's hashes in its order, never more
// than its capacity, each with the bytes stored under it.
TEST(HostKVTier, RandomSequencesMatchAReferenceLRU) {
  int64_t evictions_seen = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    std::mt19937 rng(seed);
    const int64_t capacity = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    const uint64_t universe = std::uniform_int_distribution<uint64_t>(1, 16)(rng);
    HostKVTier tier(capacity, kBlockBytes);
    std::list<uint64_t> reference;  // least recently used first
    auto ref_touch = [&](uint64_t n) {
      const auto it = std::find(reference.begin(), reference.end(), n);
      if (it == reference.end()) return false;
      reference.splice(reference.end(), reference, it);
      return true;
    };
    for (int op = 0; op < 200; ++op) {
      const uint64_t n = std::uniform_int_distribution<uint64_t>(0, universe - 1)(rng);
      switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
        case 0: {  // store
          const bool copied = tier.store(hash_of(n), block_bytes_of(n));
          const bool present = ref_touch(n);
          ASSERT_EQ(copied, !present) << "seed " << seed << " op " << op;
          if (!present) {
            if (static_cast<int64_t>(reference.size()) == capacity) reference.pop_front();
            reference.push_back(n);
          }
          break;
        }
        case 1: {  // lookup
          const bool found = !tier.lookup(hash_of(n)).empty();
          ASSERT_EQ(found, ref_touch(n)) << "seed " << seed << " op " << op;
          break;
        }
        default:  // touch
          ASSERT_EQ(tier.touch(hash_of(n)), ref_touch(n)) << "seed " << seed << " op " << op;
      }
      std::vector<BlockHash> want;
      for (uint64_t m : reference) want.push_back(hash_of(m));
      ASSERT_EQ(tier.lru_order(), want) << "seed " << seed << " op " << op;
      ASSERT_LE(tier.num_blocks(), capacity);
    }
    // Lookups reorder the LRU, so the bytes are checked in the reference's order.
    const std::vector<uint64_t> held(reference.begin(), reference.end());
    for (uint64_t m : held) ASSERT_TRUE(holds(tier, m)) << "seed " << seed << " hash " << m;
    evictions_seen += tier.num_evictions();
  }
  EXPECT_GT(evictions_seen, 1000);  // the workload reaches capacity often
}

}  // namespace
}  // namespace pagoda::kv
