// The paged-attention plan (host code: the work partition and the split-KV choice), run on every
// machine: the split counts the measured rules give for the benchmark shapes (docs/benchmarks.md,
// "Paged attention"), the bounds on any split, and the shapes the plan refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "kernels/cuda/paged_attention.h"

namespace pagoda::cuda {
namespace {

// A decode batch of `seqs` sequences with `ctx` keys each (one new token), Llama-3.1-8B's heads.
struct DecodeBatch {
  std::vector<int32_t> qsl, lens;
  DecodeBatch(int seqs, int ctx) : lens(static_cast<size_t>(seqs), ctx) {
    for (int s = 0; s <= seqs; ++s) qsl.push_back(s);
  }
};

// Splits per (sequence, kv head) of the plan, checking that every item of one has the same count.
int splits_of(const AttentionPlan& plan, int kv_heads) {
  std::map<std::pair<int, int>, int> count;
  for (const AttentionWorkItem& item : plan.items) ++count[{item.seq, item.kv_head}];
  int n = -1;
  for (const auto& [key, c] : count) {
    if (n < 0) n = c;
    EXPECT_EQ(c, n) << "sequence " << key.first << ", kv head " << key.second;
  }
  EXPECT_EQ(static_cast<int>(count.size()) % kv_heads, 0);
  return n;
}

TEST(AttentionPlan, DecodeSplitCountsOnTheMeasuredShapes) {
  struct Expect {
    int seqs, ctx, splits;
  };
  // One block per SM for fewer items than SMs when a block then holds <= 1,024 keys; the wave
  // model otherwise (132 SMs, 3 decode blocks per SM at head_dim 128).
  const Expect cases[] = {
      {1, 512, 8},    // 16 per SM would be splits of 32 keys: one 64-key tile each
      {1, 2048, 16},  //
      {1, 8192, 16},  // 128 blocks of 512 keys (43 of 192 measured 13% slower)
      {4, 2048, 4},   //
      {4, 8192, 12},  // one per SM would be 2,048 keys: the wave model
      {16, 512, 1},   // 128 items already: no split (3 measured 20% slower)
      {16, 2048, 3},  // 2,048 keys: the wave model
      {32, 1024, 1},  // 256 items fill 0.65 of the 396 slots
      {64, 512, 1},   // 512 items: splitting measured slower
      {64, 4096, 3},  // 1.29 waves unsplit; 3 splits run 3.9 waves of shorter blocks
  };
  for (const Expect& c : cases) {
    SCOPED_TRACE(::testing::Message() << "B" << c.seqs << " x " << c.ctx);
    const DecodeBatch b(c.seqs, c.ctx);
    AttentionPlanInput in{b.qsl.data(), b.lens.data(), c.seqs, 32, 8, 132};
    AttentionLimits limits{c.seqs, 1 << 16, 1 << 16, 128};
    AttentionPlan plan;
    ASSERT_EQ(plan_paged_attention(in, limits, &plan), cudaSuccess);
    EXPECT_EQ(plan.num_prefill_items, 0);
    EXPECT_EQ(splits_of(plan, 8), c.splits);
    // The splits cover each sequence's keys once, in order.
    std::map<std::pair<int, int>, int> next;  // (seq, kv head) -> next key
    for (const AttentionWorkItem& item : plan.items) {
      int& at = next[{item.seq, item.kv_head}];
      EXPECT_EQ(item.kv_begin, at);
      at = item.kv_end;
      EXPECT_EQ(item.partial_slot >= 0, c.splits > 1);
    }
    for (const auto& [key, end] : next) EXPECT_EQ(end, c.ctx);
  }
}

// The split merge keeps one weight per (split, row) in shared memory: no item's key range may be
// cut into more than kAttentionMaxSplits, however long, and no split is shorter than asked.
TEST(AttentionPlan, BoundsTheSplits) {
  const int32_t qsl[] = {0, 1, 65}, lens[] = {200000, 150000};  // a decode, a prefill chunk
  for (int min_keys : {64, 256}) {
    AttentionPlanInput in{qsl, lens, 2, 32, 8, 132, min_keys};
    AttentionLimits limits{65, 1 << 16, 1 << 16, 128};
    AttentionPlan plan;
    ASSERT_EQ(plan_paged_attention(in, limits, &plan), cudaSuccess);
    ASSERT_GT(plan.num_partial_slots, 0);
    std::map<std::pair<int, int>, int> splits;  // (first token, kv head) -> splits
    for (const AttentionWorkItem& item : plan.items) {
      if (item.partial_slot < 0) continue;
      ++splits[{item.token_begin, item.kv_head}];
      if (item.kv_end < lens[item.seq]) {
        EXPECT_GE(item.kv_end - item.kv_begin, min_keys);
      }
    }
    for (const auto& [key, n] : splits) EXPECT_LE(n, kAttentionMaxSplits);
  }
}

// The slot layout the kernel's split merge reads (finish_split): a split of a decode item holds
// one slot, a split of a prefill item prefill_rows / kAttentionSlotRows consecutive slots,
// at token_info.first_slot + (kv_head * num_splits + split) * (slots of an item); no two items'
// slots overlap, and all lie inside num_partial_slots.
TEST(AttentionPlan, PartialSlotsOfDecodeAndPrefillItems) {
  // Two decodes and a 300-token prefill chunk after 700 cached keys, few enough items to split.
  const int32_t qsl[] = {0, 1, 2, 302}, lens[] = {3000, 5000, 1000};
  for (int rows : {kAttentionSmallTileRows, kAttentionTileRows})
    for (int group : {1, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << "group " << group << ", rows " << rows);
      const int kv_heads = 2;
      AttentionPlanInput in{qsl, lens, 3, kv_heads * group, kv_heads, 132};
      in.prefill_rows = rows;
      AttentionLimits limits{302, 1 << 16, 1 << 16, 128};
      AttentionPlan plan;
      ASSERT_EQ(plan_paged_attention(in, limits, &plan), cudaSuccess);
      ASSERT_EQ(plan.prefill_rows, rows);
      ASSERT_GT(plan.num_partial_slots, 0);
      std::vector<int> owner(static_cast<size_t>(plan.num_partial_slots), -1);
      std::map<std::pair<int, int>, std::set<int>> splits_seen;  // (first token, kv head)
      int decode_splits = 0, prefill_splits = 0;
      for (size_t i = 0; i < plan.items.size(); ++i) {
        const AttentionWorkItem& item = plan.items[i];
        const bool decode = static_cast<int>(i) < plan.num_decode_items;
        EXPECT_LE((item.token_end - item.token_begin) * group, decode ? 16 : plan.prefill_rows);
        if (item.partial_slot < 0) continue;
        const int per_item = decode ? 1 : plan.prefill_rows / kAttentionSlotRows;
        (decode ? decode_splits : prefill_splits) += 1;
        const AttentionTokenInfo& info = plan.token_info[static_cast<size_t>(item.token_begin)];
        // Split sp sits at first_slot + (kv_head * num_splits + sp) * per_item (prefill items are
        // sorted by length, so sp is found from the slot).
        const int offset =
            item.partial_slot - info.first_slot - item.kv_head * info.num_splits * per_item;
        EXPECT_EQ(offset % per_item, 0);
        EXPECT_TRUE(offset >= 0 && offset / per_item < info.num_splits)
            << "slot " << item.partial_slot;
        const bool first_time =
            splits_seen[{item.token_begin, item.kv_head}].insert(offset / per_item).second;
        EXPECT_TRUE(first_time);
        for (int k = 0; k < per_item; ++k) {
          const int slot = item.partial_slot + k;
          ASSERT_LT(slot, plan.num_partial_slots);
          EXPECT_EQ(owner[static_cast<size_t>(slot)], -1) << "slot " << slot << " held twice";
          owner[static_cast<size_t>(slot)] = static_cast<int>(i);
        }
      }
      EXPECT_GT(decode_splits, 0);
      EXPECT_GT(prefill_splits, 0);
    }
}

// Prefill items of 128 rows when the batch makes two per SM of them, else of 64; a split of a
// causal tile only cuts the keys its rows see (no split without keys), and the splits of a tile
// cover its keys once, the last running to the sequence's end.
TEST(AttentionPlan, PrefillRowsAndCausalSplits) {
  struct Case {
    int seqs, len, group, rows;
  };
  const Case cases[] = {
      {1, 512, 4, 64},      // 128 items of 128 rows on 132 SMs
      {8, 2048, 4, 128},    // 4,096 items
      {1, 8192, 4, 128},    // 2,048 items
      {2, 1024, 128, 128},  // a group of 128 only fits 128 rows
      {1, 100, 1, 64},      //
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "B" << c.seqs << " x " << c.len << ", group " << c.group);
    std::vector<int32_t> qsl, lens(static_cast<size_t>(c.seqs), c.len);
    for (int s = 0; s <= c.seqs; ++s) qsl.push_back(s * c.len);
    const int kv_heads = 8;
    AttentionPlanInput in{qsl.data(), lens.data(), c.seqs, kv_heads * c.group, kv_heads, 132};
    AttentionLimits limits{c.seqs * c.len, 1 << 20, 1 << 16, 128};
    AttentionPlan plan;
    ASSERT_EQ(plan_paged_attention(in, limits, &plan), cudaSuccess);
    EXPECT_EQ(plan.prefill_rows, c.rows);
    std::map<std::pair<int, int>, int> next;  // (first token, kv head) -> next key
    for (const AttentionWorkItem& item : plan.items) {
      EXPECT_LE((item.token_end - item.token_begin) * c.group, plan.prefill_rows);
      const int seq_begin = item.seq * c.len;
      const int tile_keys = item.token_end - seq_begin;  // keys of its last token (no cache)
      EXPECT_LT(item.kv_begin, tile_keys) << "a split without keys";
      int& at = next[{item.token_begin, item.kv_head}];
      EXPECT_EQ(item.kv_begin, at);
      at = item.kv_end;
    }
    for (const auto& [key, end] : next) EXPECT_EQ(end, c.len);
  }
}

// With the Hopper kernel (hopper_prefill) the plan keeps 128-row items, unsplit, down to half a
// wave of them (66 on 132 SMs); below that it plans as the FlashAttention-2 kernel wants (64 rows,
// splits), and decode items in the same step still split.
TEST(AttentionPlan, HopperPrefillKeepsWholeWideItems) {
  struct Case {
    int seqs, len;
    bool decode;  // one more sequence decoding (1 token after 4,096 cached)
    int rows;
    bool split;  // some prefill item split
  };
  const Case cases[] = {
      {1, 512, false, 128, false},   // 16 x 8 = 128 items
      {1, 512, true, 128, false},    // the decode sequence's items split, not the prefill's
      {1, 288, false, 128, false},   // 9 x 8 = 72 items: more than half a wave
      {1, 256, false, 64, true},     // 64 items: the FlashAttention-2 plan (64 rows, split)
      {4, 2048, false, 128, false},  // 2,048 items
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "B" << c.seqs << " x " << c.len << (c.decode ? " + decode" : ""));
    std::vector<int32_t> qsl, lens(static_cast<size_t>(c.seqs), c.len);
    for (int s = 0; s <= c.seqs; ++s) qsl.push_back(s * c.len);
    if (c.decode) {
      qsl.push_back(qsl.back() + 1);
      lens.push_back(4097);
    }
    const int seqs = static_cast<int>(lens.size());
    AttentionPlanInput in{qsl.data(), lens.data(), seqs, 32, 8, 132};
    in.hopper_prefill = true;
    AttentionLimits limits{qsl.back(), 1 << 20, 1 << 16, 128};
    AttentionPlan plan;
    ASSERT_EQ(plan_paged_attention(in, limits, &plan), cudaSuccess);
    EXPECT_EQ(plan.prefill_rows, c.rows);
    EXPECT_EQ(plan.prefill_split, c.split);
    int decode_items = 0;
    for (const AttentionWorkItem& item : plan.items) decode_items += item.seq == c.seqs;
    if (c.decode) EXPECT_GT(decode_items, 8) << "the decode sequence's items are split";
    // Without the Hopper kernel the same batch plans 64-row split items below two waves.
    in.hopper_prefill = false;
    AttentionPlan fa2;
    ASSERT_EQ(plan_paged_attention(in, limits, &fa2), cudaSuccess);
    if (c.seqs == 1) EXPECT_EQ(fa2.prefill_rows, 64);
  }
}

// With a sliding window the splits cut the keys inside it: a 32k-key decode under a 4,096-key
// window splits like a 4,096-key one, and every split but the first (which starts at 0, so that
// no key is lost) holds window keys only.
TEST(AttentionPlan, SlidingWindowSplitsOnlyTheWindow) {
  const DecodeBatch windowed(1, 32768), plain(1, 4096);
  AttentionPlanInput in{windowed.qsl.data(), windowed.lens.data(), 1, 32, 8, 132};
  in.sliding_window = 4096;
  AttentionLimits limits{1, 1 << 16, 1 << 16, 128};
  AttentionPlan w, p;
  ASSERT_EQ(plan_paged_attention(in, limits, &w), cudaSuccess);
  AttentionPlanInput in_plain{plain.qsl.data(), plain.lens.data(), 1, 32, 8, 132};
  ASSERT_EQ(plan_paged_attention(in_plain, limits, &p), cudaSuccess);
  EXPECT_EQ(splits_of(w, 8), splits_of(p, 8));
  EXPECT_GT(splits_of(w, 8), 1);
  const int window_first = 32768 - 4096;  // the one token's first visible key
  for (const AttentionWorkItem& item : w.items) {
    EXPECT_EQ(item.kv_end > window_first, true) << "a split with no key in the window";
    if (item.kv_begin > 0) {
      EXPECT_GE(item.kv_begin, window_first);
    }
  }
  // A 64-token chunk after 8,000 cached keys, window 1,000: few items, so split, and each tile's
  // splits lie in its tokens' windows.
  const int32_t qsl[] = {0, 64}, lens[] = {8064};
  AttentionPlanInput pin{qsl, lens, 1, 32, 8, 132};
  pin.sliding_window = 1000;
  AttentionLimits plimits{64, 1 << 16, 1 << 16, 128};
  AttentionPlan pp;
  ASSERT_EQ(plan_paged_attention(pin, plimits, &pp), cudaSuccess);
  ASSERT_GT(pp.num_partial_slots, 0);
  for (const AttentionWorkItem& item : pp.items) {
    const int first_visible = 8000 + item.token_begin - 1000 + 1;  // of the tile's first token
    EXPECT_GT(item.kv_end, first_visible);
    if (item.kv_begin > 0) {
      EXPECT_GE(item.kv_begin, first_visible);
    }
    EXPECT_LE(item.kv_end - std::max(item.kv_begin, first_visible), 1064);
  }
}

TEST(AttentionPlan, RejectsBadShapes) {
  const int32_t qsl[] = {0, 4}, lens[] = {4};
  AttentionPlanInput in{qsl, lens, 1, 12, 5, 132};  // 12 heads over 5 kv heads
  AttentionLimits limits{16, 64, 0, 128};
  AttentionPlan plan;
  EXPECT_EQ(plan_paged_attention(in, limits, &plan), cudaErrorInvalidValue);
  in.num_kv_heads = 4;
  limits.max_tokens = 2;  // 4 tokens do not fit
  EXPECT_EQ(plan_paged_attention(in, limits, &plan), cudaErrorInvalidValue);
  limits.max_tokens = 16;
  EXPECT_EQ(plan_paged_attention(in, limits, &plan), cudaSuccess);
  EXPECT_EQ(plan.num_decode_items + plan.num_prefill_items, 4);
}

}  // namespace
}  // namespace pagoda::cuda
