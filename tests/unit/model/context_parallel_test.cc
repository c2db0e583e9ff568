// Decode context parallelism's pieces (model/context_parallel.h): the groups' plans, the
// position -> member/slot mapping, and the paged attention partials of D members merged by
// log-sum-exp against one rank's attention over the whole sequence (random data; sequences whose
// lengths leave partial blocks and members without any of a row's positions).
#include "model/context_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/cpu/paged_attention.h"

namespace pagoda {
namespace {

TEST(ContextParallelPlan, GroupsShareOrUniteTheirKvHeads) {
  // 8 heads, 2 KV heads over 4 ranks: ranks 0, 1 hold KV head 0, ranks 2, 3 KV head 1.
  const ContextParallelPlan shared = plan_context_parallel(8, 2, 3, 4, 2);
  EXPECT_EQ(shared.member, 1);
  EXPECT_EQ(shared.first_rank, 2);
  EXPECT_EQ(shared.group_heads, 4);
  EXPECT_EQ(shared.group_kv_heads, 1);
  // 4 heads, 4 KV heads over 4 ranks, groups of 2: the group's KV heads are both members'.
  const ContextParallelPlan united = plan_context_parallel(4, 4, 2, 4, 2);
  EXPECT_EQ(united.group_kv_heads, 2);
  ASSERT_EQ(united.kv_source.size(), 2u);
  EXPECT_EQ(united.kv_source[1], (std::pair{1, 0}));
  // 4 heads, 2 KV heads, -tp 4 -dcp 4: KV head 0 from member 0, KV head 1 from member 2.
  const ContextParallelPlan all = plan_context_parallel(4, 2, 0, 4, 4);
  EXPECT_EQ(all.group_kv_heads, 2);
  EXPECT_EQ(all.kv_source[1], (std::pair{2, 0}));
  try {
    (void)plan_context_parallel(8, 2, 0, 4, 3);
    FAIL() << "-dcp 3 of -tp 4 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "--decode-context-parallel-size 3: must divide --tensor-parallel-size 4");
  }
  EXPECT_THROW(check_context_parallel(12, 3, 12, 3), InvalidArgument);  // ranks 3-5: KV 0, 1, 1
  EXPECT_NO_THROW(check_context_parallel(12, 3, 12, 4));
}

TEST(ContextParallelPlan, TokenTOnMemberTModD) {
  ContextParallelPlan p;
  p.size = 2;
  p.member = 1;
  // Block size 4 per rank, engine blocks of 8: the header's example, position 13 of a sequence
  // whose block 1 is block 7 (engine slot 61) -> member 1, slot 7 * 4 + 6 % 4 = 30.
  EXPECT_EQ(local_slot(61, 8, p), 30);
  EXPECT_EQ(local_slot(60, 8, p), -1);
  EXPECT_EQ(local_slot(-1, 8, p), -1);
  p.member = 0;
  EXPECT_EQ(local_slot(60, 8, p), 30);
  EXPECT_EQ(local_slot(56, 8, p), 28);
}

TEST(ContextParallelMerge, WeightsEachPartialByItsSum) {
  // The header's example: (1 * 1 + 3 * 3) / (1 + 3); a member without keys (lse -inf) counts 0.
  const float o0[] = {1.0f}, o1[] = {3.0f}, o2[] = {0.0f};
  const float l0[] = {0.0f}, l1[] = {std::log(3.0f)}, l2[] = {-INFINITY};
  const float* outs[] = {o0, o1, o2};
  const float* lses[] = {l0, l1, l2};
  float out = 0;
  merge_attention_partials(outs, lses, 1, 1, 1, 0, 1, &out);
  EXPECT_NEAR(out, 2.5f, 1e-6f);
}

/// One rank over every position, and D members over theirs merged, on the same random data.
void expect_merge_matches_one_rank(int D, int sliding_window, float softcap) {
  constexpr int kBlock = 4, kHeads = 4, kKvHeads = 2, kDim = 20;  // kDim: a SIMD tail
  const int B = kBlock * D;                                       // the engine's block
  // Sequences: (cached length before the step, new tokens): decodes and prefill chunks, with
  // lengths that leave blocks part full and a first token that only member 0 holds.
  const std::vector<std::pair<int, int>> seqs = {{0, 1}, {6, 1}, {0, 13}, {29, 7}, {40, 1}};
  std::mt19937 rng(1234 + D);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<int32_t> positions, query_start{0}, seq_lens, tables;
  int max_blocks = 0;
  for (const auto& [cached, fresh] : seqs)
    max_blocks = std::max(max_blocks, (cached + fresh + B - 1) / B);
  int next_block = 1;
  std::vector<int64_t> slots;  // the engine's, of every position of every sequence
  for (const auto& [cached, fresh] : seqs) {
    const int len = cached + fresh;
    std::vector<int32_t> table(static_cast<size_t>(max_blocks), 0);
    for (int b = 0; b < (len + B - 1) / B; ++b) table[static_cast<size_t>(b)] = next_block++;
    tables.insert(tables.end(), table.begin(), table.end());
    for (int pos = 0; pos < len; ++pos)
      slots.push_back(int64_t{table[static_cast<size_t>(pos / B)]} * B + pos % B);
    for (int pos = cached; pos < len; ++pos) positions.push_back(pos);
    query_start.push_back(static_cast<int32_t>(positions.size()));
    seq_lens.push_back(len);
  }
  const auto T = static_cast<int64_t>(positions.size());
  const auto all = static_cast<int64_t>(slots.size());
  const int num_blocks = next_block;
  auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng);
    return v;
  };
  const std::vector<float> k = random(all * kKvHeads * kDim), v = random(all * kKvHeads * kDim);
  const std::vector<float> q = random(T * kHeads * kDim);
  ThreadPool pool(1);

  cpu::PagedAttentionParams p;
  p.q = q.data();
  p.positions = positions.data();
  p.query_start_loc = query_start.data();
  p.seq_lens = seq_lens.data();
  p.block_tables = tables.data();
  p.num_tokens = T;
  p.num_seqs = static_cast<int>(seqs.size());
  p.num_heads = kHeads;
  p.max_blocks_per_seq = max_blocks;
  p.sliding_window = sliding_window;
  p.scale = 1.0f / std::sqrt(float{kDim});
  p.softcap = softcap;
  p.layout = {num_blocks, B, kKvHeads, kDim, DType::kF32};
  // One rank: blocks of B tokens.
  std::vector<float> key_cache(static_cast<size_t>(num_blocks * B * kKvHeads * kDim));
  std::vector<float> value_cache(key_cache.size());
  cpu::reshape_and_cache(k.data(), v.data(), slots.data(), all, key_cache.data(),
                         value_cache.data(), p.layout, pool);
  std::vector<float> reference(static_cast<size_t>(T * kHeads * kDim));
  p.key_cache = key_cache.data();
  p.value_cache = value_cache.data();
  p.out = reference.data();
  cpu::paged_attention(p, pool);

  // D members: blocks of kBlock tokens, each holding the positions local_slot gives it.
  std::vector<std::vector<float>> outs(static_cast<size_t>(D)), lses(static_cast<size_t>(D));
  for (int m = 0; m < D; ++m) {
    ContextParallelPlan plan;
    plan.size = D;
    plan.member = m;
    std::vector<int64_t> local(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) local[i] = local_slot(slots[i], B, plan);
    cpu::PagedAttentionParams pm = p;
    pm.layout.block_size = kBlock;
    std::vector<float> keys(static_cast<size_t>(num_blocks * kBlock * kKvHeads * kDim));
    std::vector<float> values(keys.size());
    cpu::reshape_and_cache(k.data(), v.data(), local.data(), all, keys.data(), values.data(),
                           pm.layout, pool);
    outs[static_cast<size_t>(m)].resize(reference.size());
    lses[static_cast<size_t>(m)].resize(static_cast<size_t>(T * kHeads));
    pm.key_cache = keys.data();
    pm.value_cache = values.data();
    pm.out = outs[static_cast<size_t>(m)].data();
    pm.lse = lses[static_cast<size_t>(m)].data();
    pm.cp_size = D;
    pm.cp_rank = m;
    cpu::paged_attention(pm, pool);
  }
  // Decode of position 0 (sequence 0): only member 0 has a key; the others' lse is -inf.
  for (int m = 1; m < D; ++m) EXPECT_EQ(lses[static_cast<size_t>(m)][0], -INFINITY);
  std::vector<const float*> out_ptrs, lse_ptrs;
  for (int m = 0; m < D; ++m) {
    out_ptrs.push_back(outs[static_cast<size_t>(m)].data());
    lse_ptrs.push_back(lses[static_cast<size_t>(m)].data());
  }
  // Each member merges its own heads in the engine; here heads [1, 4) and [0, 1) separately.
  std::vector<float> merged(reference.size()), head0(static_cast<size_t>(T * kDim));
  std::vector<float> rest(static_cast<size_t>(T * (kHeads - 1) * kDim));
  merge_attention_partials(out_ptrs, lse_ptrs, T, kHeads, kDim, 0, 1, head0.data());
  merge_attention_partials(out_ptrs, lse_ptrs, T, kHeads, kDim, 1, kHeads - 1, rest.data());
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < kHeads; ++h) {
      for (int i = 0; i < kDim; ++i) {
        merged[static_cast<size_t>((t * kHeads + h) * kDim + i)] =
            h == 0 ? head0[static_cast<size_t>(t * kDim + i)]
                   : rest[static_cast<size_t>((t * (kHeads - 1) + h - 1) * kDim + i)];
      }
    }
  }
  double worst = 0;
  for (size_t i = 0; i < reference.size(); ++i)
    worst = std::max(worst, double{std::abs(reference[i] - merged[i])});
  EXPECT_LT(worst, 2e-6) << "D " << D << " window " << sliding_window << " softcap " << softcap;
}

TEST(ContextParallelMerge, MatchesOneRankAttention) {
  for (const int D : {2, 3, 4}) {
    expect_merge_matches_one_rank(D, 0, 0.0f);
    expect_merge_matches_one_rank(D, 9, 0.0f);   // a sliding window
    expect_merge_matches_one_rank(D, 0, 30.0f);  // soft-capped scores
  }
}

}  // namespace
}  // namespace pagoda
