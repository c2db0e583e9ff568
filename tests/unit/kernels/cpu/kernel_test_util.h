#pragma once
// Shared helpers of the CPU kernel tests: seeded random data and the normalised error bound.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace pagoda::cpu::testing {

/// Uniform floats in [lo, hi) from a fixed-seed generator; callers pass their own seed so that
/// every case is reproducible on its own.
inline std::vector<float> random_floats(size_t count, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(count);
  for (auto& v : out) v = dist(gen);
  return out;
}

/// Weights in one of the float weight dtypes, stored as raw bytes, plus their exact fp32 values.
struct Weights {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // value of each element after rounding to the dtype
};

inline Weights make_weights(size_t count, DType dtype, uint32_t seed, float scale = 1.0f) {
  Weights w;
  w.values = random_floats(count, seed, -scale, scale);
  w.bytes.resize(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(w.bytes.data())[i] = w.values[i];
    } else {
      auto* h = reinterpret_cast<uint16_t*>(w.bytes.data());
      h[i] = dtype == DType::kBF16 ? float_to_bf16(w.values[i]) : float_to_f16(w.values[i]);
      w.values[i] = dtype == DType::kBF16 ? bf16_to_float(h[i]) : f16_to_float(h[i]);
    }
  }
  return w;
}

/// max |got - ref| / max |ref|: scale-free, so one tolerance fits inputs of any magnitude.
inline double normalised_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    max_diff = std::max(max_diff, std::abs(static_cast<double>(got[i]) - ref[i]));
    max_ref = std::max(max_ref, std::abs(ref[i]));
  }
  return max_ref > 0.0 ? max_diff / max_ref : max_diff;
}

/// One sequence of a paged-attention batch.
struct SeqSpec {
  int prefix;      // tokens already in the cache before this step
  int new_tokens;  // query tokens of this step
};
using Batch = std::vector<SeqSpec>;

/// The step inputs of a batch over a paged cache whose physical blocks are a shuffled permutation
/// (plus `spare_blocks` unused ones), so that block tables are non-contiguous. Example (block size
/// 16, batch {{20, 13}}): seq_lens {33}, query_start_loc {0, 13}, positions 20..32, 3 blocks.
struct PagedBatch {
  std::vector<int32_t> seq_lens;         // [num_seqs]
  std::vector<int32_t> query_start_loc;  // [num_seqs + 1]
  std::vector<int32_t> positions;        // [num_tokens]
  std::vector<int32_t> tables;           // [num_seqs, max_blocks]; unused entries `unused`
  int max_blocks = 0;
  int num_blocks = 0;  // of the cache

  /// The cache slot of position `pos` of sequence s: block * block_size + offset.
  [[nodiscard]] int64_t slot(int s, int pos, int block_size) const {
    return static_cast<int64_t>(tables[static_cast<size_t>(s * max_blocks + pos / block_size)]) *
               block_size +
           pos % block_size;
  }
};

inline PagedBatch make_paged_batch(const Batch& batch, int block_size, int spare_blocks,
                                   uint32_t seed, int32_t unused = -1) {
  PagedBatch b;
  b.query_start_loc = {0};
  for (const SeqSpec& s : batch) {
    b.seq_lens.push_back(s.prefix + s.new_tokens);
    b.query_start_loc.push_back(b.query_start_loc.back() + s.new_tokens);
    b.max_blocks = std::max(b.max_blocks, (b.seq_lens.back() + block_size - 1) / block_size);
    for (int i = 0; i < s.new_tokens; ++i) b.positions.push_back(s.prefix + i);
  }
  const int num_seqs = static_cast<int>(batch.size());
  b.num_blocks = num_seqs * b.max_blocks + spare_blocks;
  std::vector<int32_t> physical(static_cast<size_t>(b.num_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), std::mt19937(seed));
  b.tables.assign(static_cast<size_t>(num_seqs) * b.max_blocks, unused);
  for (int s = 0, next = 0; s < num_seqs; ++s)
    for (int j = 0; j < (b.seq_lens[s] + block_size - 1) / block_size; ++j)
      b.tables[static_cast<size_t>(s * b.max_blocks + j)] = physical[static_cast<size_t>(next++)];
  return b;
}

}  // namespace pagoda::cpu::testing
