// Batch invariance of the CPU kernels a forward pass runs per row: a row's result has the same
// bits whatever other rows share the call (how many, which), however the pool splits the work, and
// however a sequence's query tokens are chunked into steps. The engine-level test is
// tests/unit/engine/batch_invariance_test.cc; docs/engine.md, "Batch invariance on the CPU", states
// the guarantee.
//
// How to add a case: a shape to kLinearShapes, or a window / batch layout to the attention test.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/paged_attention.h"

namespace pagoda::cpu {
namespace {

using testing::make_weights;
using testing::random_floats;

bool same_bits(const float* a, const float* b, int64_t count) {
  return std::memcmp(a, b, static_cast<size_t>(count) * sizeof(float)) == 0;
}

struct LinearShape {
  int64_t k, n;
  DType dtype;
  bool bias;
};

// k with and without a tail past the last 32 elements, n with and without a partial column block.
const LinearShape kLinearShapes[] = {
    {64, 172, DType::kF32, false},    {1400, 300, DType::kBF16, true},
    {2048, 130, DType::kBF16, false}, {333, 257, DType::kF16, true},
    {515, 96, DType::kF32, true},
};

TEST(KernelBatchInvariance, LinearRowsDoNotDependOnTheOtherRowsOrThreads) {
  constexpr int64_t kMaxRows = 300;
  constexpr int64_t kCheckedRows = 24;  // rows [0, 24) and the last one of each call
  const int64_t kRowCounts[] = {1, 2, 3, 4, 5, 8, 16, 17, 24, 25, 64, 65, 128, 300};
  ThreadPool one(1), two(2), three(3);
  uint32_t seed = 1;
  for (const LinearShape& s : kLinearShapes) {
    const auto x = random_floats(static_cast<size_t>(kMaxRows * s.k), seed += 3);
    const auto w = make_weights(static_cast<size_t>(s.n * s.k), s.dtype, seed + 1, 0.1f);
    const auto bias = random_floats(static_cast<size_t>(s.n), seed + 2);
    const float* b = s.bias ? bias.data() : nullptr;
    // Reference: each row alone (m = 1), on one thread.
    std::vector<float> ref(static_cast<size_t>(kMaxRows * s.n));
    for (int64_t r = 0; r < kMaxRows; ++r)
      linear(x.data() + r * s.k, 1, s.k, w.bytes.data(), s.dtype, s.n, b, ref.data() + r * s.n,
             one);
    for (ThreadPool* pool : {&one, &two, &three}) {
      for (int64_t m : kRowCounts) {
        // Rows [first, first + m) of x, so that the checked rows sit at different offsets.
        const int64_t first = (m * 7) % (kMaxRows - m + 1);
        std::vector<float> y(static_cast<size_t>(m * s.n));
        linear(x.data() + first * s.k, m, s.k, w.bytes.data(), s.dtype, s.n, b, y.data(), *pool);
        for (int64_t r = 0; r < m; ++r) {
          if (r >= kCheckedRows && r != m - 1) continue;
          EXPECT_TRUE(same_bits(y.data() + r * s.n, ref.data() + (first + r) * s.n, s.n))
              << "k=" << s.k << " n=" << s.n << " dtype=" << dtype_name(s.dtype) << " m=" << m
              << " row " << r << " threads " << pool->num_threads();
        }
      }
    }
  }
}

// Attention: logical sequences whose keys, values and queries depend only on (sequence, position),
// computed in batches of different layouts; each (sequence, position, head) output must have the
// same bits in every layout that computes it.
struct Chunk {
  int seq;     // logical sequence
  int prefix;  // positions [0, prefix) already cached
  int tokens;  // query positions [prefix, prefix + tokens)
};

constexpr int kHeadDim = 64, kHeads = 8, kKvHeads = 2, kBlock = 16;

using RowKey = std::pair<int, int>;  // (sequence, position)

std::map<RowKey, std::vector<float>> attend(const std::vector<Chunk>& batch, int window,
                                            float softcap, ThreadPool& pool) {
  const int num_seqs = static_cast<int>(batch.size());
  const int row = kKvHeads * kHeadDim, qrow = kHeads * kHeadDim;
  std::vector<int32_t> seq_lens, starts = {0}, positions;
  int max_blocks = 0;
  for (const Chunk& c : batch) {
    seq_lens.push_back(c.prefix + c.tokens);
    starts.push_back(starts.back() + c.tokens);
    max_blocks = std::max(max_blocks, (seq_lens.back() + kBlock - 1) / kBlock);
    for (int i = 0; i < c.tokens; ++i) positions.push_back(c.prefix + i);
  }
  const int num_blocks = num_seqs * max_blocks;
  std::vector<int32_t> physical(static_cast<size_t>(num_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), std::mt19937(static_cast<uint32_t>(num_seqs)));
  std::vector<int32_t> tables(static_cast<size_t>(num_seqs * max_blocks));
  for (int i = 0; i < num_seqs * max_blocks; ++i) tables[static_cast<size_t>(i)] = physical[i];
  const PagedKVLayout layout{num_blocks, kBlock, kKvHeads, kHeadDim};
  std::vector<float> key_cache(static_cast<size_t>(num_blocks) * kBlock * row);
  std::vector<float> value_cache(key_cache.size());
  std::vector<float> q(positions.size() * qrow);
  for (int s = 0; s < num_seqs; ++s) {
    const Chunk& c = batch[static_cast<size_t>(s)];
    for (int pos = 0; pos < seq_lens[s]; ++pos) {
      const auto seed = static_cast<uint32_t>(c.seq * 100000 + pos * 4);
      const auto k = random_floats(row, seed), v = random_floats(row, seed + 1);
      const int64_t slot =
          int64_t{tables[static_cast<size_t>(s * max_blocks + pos / kBlock)]} * kBlock +
          pos % kBlock;
      std::copy(k.begin(), k.end(), key_cache.begin() + slot * row);
      std::copy(v.begin(), v.end(), value_cache.begin() + slot * row);
      if (pos >= c.prefix) {
        const auto qv = random_floats(qrow, seed + 2, -2, 2);
        std::copy(qv.begin(), qv.end(), q.begin() + (starts[s] + pos - c.prefix) * qrow);
      }
    }
  }
  std::vector<float> out(q.size());
  PagedAttentionParams p;
  p.q = q.data();
  p.positions = positions.data();
  p.query_start_loc = starts.data();
  p.seq_lens = seq_lens.data();
  p.block_tables = tables.data();
  p.key_cache = key_cache.data();
  p.value_cache = value_cache.data();
  p.out = out.data();
  p.num_tokens = static_cast<int64_t>(positions.size());
  p.num_seqs = num_seqs;
  p.num_heads = kHeads;
  p.max_blocks_per_seq = max_blocks;
  p.sliding_window = window;
  p.scale = 0.125f;
  p.softcap = softcap;
  p.layout = layout;
  paged_attention(p, pool);
  std::map<RowKey, std::vector<float>> rows;
  for (int s = 0; s < num_seqs; ++s) {
    for (int t = starts[s]; t < starts[s + 1]; ++t) {
      rows[{batch[static_cast<size_t>(s)].seq, positions[static_cast<size_t>(t)]}] =
          std::vector<float>(out.begin() + t * qrow, out.begin() + (t + 1) * qrow);
    }
  }
  return rows;
}

TEST(KernelBatchInvariance, AttentionRowsDoNotDependOnChunkingOrTheBatch) {
  // Each layout computes some positions of logical sequences 0-3 (lengths up to 150).
  const std::vector<std::vector<Chunk>> layouts = {
      {{0, 0, 150}},                                       // sequence 0 in one prefill
      {{0, 0, 37}, {1, 0, 100}},                           // its first 37 with another
      {{0, 37, 50}, {2, 0, 5}, {3, 10, 1}},                // a chunk after a cached prefix
      {{0, 86, 1}, {0, 87, 63}},                           // a decode and the rest
      {{3, 0, 11}, {0, 120, 1}, {1, 99, 1}, {0, 149, 1}},  // decodes among a prefill
      {{0, 5, 3}, {0, 8, 29}, {0, 37, 64}, {0, 101, 49}},  // odd chunk boundaries
      {{1, 0, 64}, {1, 64, 36}, {2, 0, 1}, {2, 1, 4}, {3, 0, 10}},
  };
  ThreadPool one(1), two(2), three(3);
  for (int window : {0, 5, 40}) {
    for (float softcap : {0.0f, 20.0f}) {
      std::map<RowKey, std::vector<float>> seen;
      int compared = 0;
      for (size_t l = 0; l < layouts.size(); ++l) {
        for (ThreadPool* pool : {&one, &two, &three}) {
          for (const auto& [key, out] : attend(layouts[l], window, softcap, *pool)) {
            const auto [it, inserted] = seen.emplace(key, out);
            if (inserted) continue;
            ++compared;
            EXPECT_TRUE(same_bits(out.data(), it->second.data(), static_cast<int64_t>(out.size())))
                << "sequence " << key.first << " position " << key.second << " layout " << l
                << " window " << window << " softcap " << softcap << " threads "
                << pool->num_threads();
          }
        }
      }
      EXPECT_GT(compared, 500);
    }
  }
}

}  // namespace
}  // namespace pagoda::cpu
