// Tests of cpu::reshape_and_cache and cpu::paged_attention against an fp64 reference.
//
// How to add a case: a Batch is a list of SeqSpec {cached prefix length, new query tokens}; add one
// to kBatches (prefill = {0, n}, decode = {ctx - 1, 1}, chunked prefill = {prefix, n}), or extend
// the head-dim / head-count / block-size / sliding-window lists in the grid TEST. The fixture fills
// the cache through reshape_and_cache into shuffled physical blocks, so every case also tests it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernel_test_util.h"
#include "kernels/cpu/paged_attention.h"

namespace pagoda::cpu {
namespace {

using testing::Batch;
using testing::make_paged_batch;
using testing::normalised_error;
using testing::PagedBatch;
using testing::random_floats;

// fp32 dot products of length <= 128 and an fp32 online softmax over <= a few hundred keys.
constexpr double kTolerance = 1e-5;

const std::vector<Batch> kBatches = {
    {{0, 37}},                            // prefill
    {{20, 13}},                           // chunked prefill after a cached prefix
    {{0, 33}, {49, 1}, {0, 1}, {17, 5}},  // mixed prefill + decodes + chunk
    {{0, 1}, {15, 1}, {16, 1}, {99, 1}},  // decode batch across block boundaries
};

struct Case {
  int head_dim, num_heads, num_kv_heads, block_size, sliding_window;
  Batch batch;
};

// Builds the cache and the batch of one case, runs the kernel, and returns the normalised error.
double run_case(const Case& c, ThreadPool& pool, uint32_t seed) {
  const int num_seqs = static_cast<int>(c.batch.size());
  const int d = c.head_dim, kvh = c.num_kv_heads, bs = c.block_size;
  // Physical blocks: a shuffled permutation plus spare blocks, so that tables are non-contiguous.
  const PagedBatch pb = make_paged_batch(c.batch, bs, /*spare_blocks=*/3, seed);
  const std::vector<int32_t>& seq_lens = pb.seq_lens;
  const std::vector<int32_t>& query_start_loc = pb.query_start_loc;
  const std::vector<int32_t>& positions = pb.positions;
  const std::vector<int32_t>& tables = pb.tables;
  const int max_blocks = pb.max_blocks, num_blocks = pb.num_blocks;
  PagedKVLayout layout{num_blocks, bs, kvh, d};
  const size_t cache_size = static_cast<size_t>(num_blocks) * bs * kvh * d;
  std::vector<float> key_cache(cache_size, NAN), value_cache(cache_size, NAN);
  // Every key/value of every sequence (prefix and new), written with reshape_and_cache. One extra
  // token with slot -1 must be skipped.
  std::vector<std::vector<float>> keys(num_seqs), values(num_seqs);
  for (int s = 0; s < num_seqs; ++s) {
    keys[s] = random_floats(static_cast<size_t>(seq_lens[s]) * kvh * d, seed + 10 + s);
    values[s] = random_floats(static_cast<size_t>(seq_lens[s]) * kvh * d, seed + 100 + s);
    std::vector<int64_t> slots;
    for (int pos = 0; pos < seq_lens[s]; ++pos)
      slots.push_back(static_cast<int64_t>(tables[s * max_blocks + pos / bs]) * bs + pos % bs);
    std::vector<float> k = keys[s], v = values[s];
    slots.push_back(-1);
    k.resize(k.size() + kvh * d, 1e30f);
    v.resize(v.size() + kvh * d, 1e30f);
    reshape_and_cache(k.data(), v.data(), slots.data(), static_cast<int64_t>(slots.size()),
                      key_cache.data(), value_cache.data(), layout, pool);
  }

  const int64_t num_tokens = query_start_loc.back();
  const auto q =
      random_floats(static_cast<size_t>(num_tokens) * c.num_heads * d, seed + 1000, -2, 2);
  std::vector<float> out(q.size(), NAN);
  PagedAttentionParams p;
  p.q = q.data();
  p.positions = positions.data();
  p.query_start_loc = query_start_loc.data();
  p.seq_lens = seq_lens.data();
  p.block_tables = tables.data();
  p.key_cache = key_cache.data();
  p.value_cache = value_cache.data();
  p.out = out.data();
  p.num_tokens = num_tokens;
  p.num_seqs = num_seqs;
  p.num_heads = c.num_heads;
  p.max_blocks_per_seq = max_blocks;
  p.sliding_window = c.sliding_window;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.layout = layout;
  paged_attention(p, pool);

  // Reference: plain softmax in fp64 over the logical keys.
  std::vector<double> ref(out.size());
  const int group = c.num_heads / kvh;
  for (int s = 0; s < num_seqs; ++s) {
    for (int t = query_start_loc[s]; t < query_start_loc[s + 1]; ++t) {
      const int pos = positions[t];
      const int lo = c.sliding_window > 0 ? std::max(0, pos - c.sliding_window + 1) : 0;
      for (int h = 0; h < c.num_heads; ++h) {
        const int kh = h / group;
        const float* qv = &q[(static_cast<size_t>(t) * c.num_heads + h) * d];
        std::vector<double> logits;
        for (int j = lo; j <= pos; ++j) {
          double dot = 0.0;
          for (int i = 0; i < d; ++i)
            dot +=
                static_cast<double>(qv[i]) * keys[s][(static_cast<size_t>(j) * kvh + kh) * d + i];
          logits.push_back(dot * p.scale);
        }
        const double mx = *std::max_element(logits.begin(), logits.end());
        double sum = 0.0;
        for (auto& l : logits) sum += (l = std::exp(l - mx));
        double* o = &ref[(static_cast<size_t>(t) * c.num_heads + h) * d];
        for (int i = 0; i < d; ++i) {
          double acc = 0.0;
          for (int j = lo; j <= pos; ++j)
            acc += logits[j - lo] * values[s][(static_cast<size_t>(j) * kvh + kh) * d + i];
          o[i] = acc / sum;
        }
      }
    }
  }
  return normalised_error(out, ref);
}

TEST(PagedAttentionTest, GridOfHeadsBlocksWindowsAndBatches) {
  ThreadPool pool(2);
  const std::pair<int, int> kHeads[] = {{4, 4}, {4, 2}, {8, 2}, {16, 2}, {8, 1}};  // G=1,2,4,8,MQA
  int cases = 0;
  uint32_t seed = 1;
  for (int head_dim : {8, 64, 128}) {
    for (auto [heads, kv_heads] : kHeads) {
      for (int block_size : {1, 16}) {
        for (int window : {0, 5, 40}) {
          for (size_t b = 0; b < kBatches.size(); ++b) {
            const Case c{head_dim, heads, kv_heads, block_size, window, kBatches[b]};
            EXPECT_LE(run_case(c, pool, seed += 7), kTolerance)
                << "d=" << head_dim << " heads=" << heads << "/" << kv_heads
                << " block=" << block_size << " window=" << window << " batch=" << b;
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 5 * 2 * 3 * 4);
}

TEST(PagedAttentionTest, LongContextAndOddHeadDimOnSeveralPoolSizes) {
  const std::vector<Case> cases = {
      {64, 32, 8, 16, 0, {{0, 200}}},                     // Llama-3.2-1B-like prefill
      {64, 32, 8, 16, 0, {{700, 1}, {1023, 1}, {5, 1}}},  // long decodes
      {128, 28, 4, 16, 0, {{300, 40}, {0, 64}}},          // G=7
      {40, 6, 3, 16, 64, {{150, 9}}},                     // head dim not a multiple of 16, window
      {96, 12, 12, 1, 0, {{33, 33}}},                     // head dim 96, block size 1
  };
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    uint32_t seed = 5000;
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_LE(run_case(cases[i], pool, seed += 11), kTolerance)
          << "case " << i << " threads " << threads;
    }
  }
}

}  // namespace
}  // namespace pagoda::cpu
