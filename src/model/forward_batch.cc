#include "model/forward_batch.h"

#include "core/status.h"

namespace pagoda {

void validate_forward_batch(const ForwardBatch& b, int64_t num_blocks, int block_size) {
  const int64_t T = b.num_tokens();
  const int S = b.num_seqs();
  PAGODA_CHECK(static_cast<int64_t>(b.positions.size()) == T &&
                   static_cast<int64_t>(b.slot_mapping.size()) == T,
               "positions/slot_mapping sizes do not match {} tokens", T);
  PAGODA_CHECK(static_cast<int>(b.query_start_loc.size()) == S + 1 && b.query_start_loc[0] == 0 &&
                   b.query_start_loc[static_cast<size_t>(S)] == T,
               "query_start_loc does not cover the {} tokens", T);
  PAGODA_CHECK(
      static_cast<int64_t>(b.block_tables.size()) == static_cast<int64_t>(S) * b.max_blocks_per_seq,
      "block_tables size");
  for (int s = 0; s < S; ++s) {
    const int32_t begin = b.query_start_loc[static_cast<size_t>(s)];
    const int32_t end = b.query_start_loc[static_cast<size_t>(s) + 1];
    PAGODA_CHECK(begin <= end, "query_start_loc not increasing");
    const int32_t len = b.seq_lens[static_cast<size_t>(s)];
    PAGODA_CHECK(
        len >= end - begin && len <= static_cast<int64_t>(b.max_blocks_per_seq) * block_size,
        "seq_len {} of sequence {} does not fit its block table", len, s);
    for (int32_t t = begin; t < end; ++t) {
      PAGODA_CHECK(
          b.positions[static_cast<size_t>(t)] >= 0 && b.positions[static_cast<size_t>(t)] < len,
          "position {} of token {} outside its sequence of length {}",
          b.positions[static_cast<size_t>(t)], t, len);
    }
    const int32_t used_blocks = (len + block_size - 1) / block_size;
    for (int32_t j = 0; j < used_blocks; ++j) {
      const int32_t block =
          b.block_tables[static_cast<size_t>(s) * static_cast<size_t>(b.max_blocks_per_seq) +
                         static_cast<size_t>(j)];
      PAGODA_CHECK(block >= 0 && block < num_blocks, "block {} outside the pool", block);
    }
  }
  for (int32_t row : b.logits_indices)
    PAGODA_CHECK(row >= 0 && row < T, "logits index {} of {} tokens", row, T);
}

}  // namespace pagoda
