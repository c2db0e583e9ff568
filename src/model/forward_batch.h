#pragma once
// The input of one forward pass: a flat batch of tokens from several sequences (the varlen layout),
// with the paged-KV metadata that tells attention where each sequence's context lives.
#include <cstdint>
#include <span>

namespace pagoda {

/// One step's tokens. Sequence s owns the contiguous rows [query_start_loc[s],
/// query_start_loc[s+1]) of the flat batch, so every token has a position and (implicitly) a
/// sequence id. A prefill chunk, a whole prompt and a single decode token are all just rows.
struct ForwardBatch {
  std::span<const int32_t> token_ids;        // [num_tokens]
  std::span<const int32_t> positions;        // [num_tokens], position of each token in its sequence
  std::span<const int32_t> query_start_loc;  // [num_seqs + 1], row offsets of each sequence
  std::span<const int32_t> seq_lens;         // [num_seqs], context length after this step
  std::span<const int32_t> block_tables;     // [num_seqs, max_blocks_per_seq], physical block ids
  int max_blocks_per_seq = 0;
  std::span<const int64_t>
      slot_mapping;  // [num_tokens], cache slot for each token's K/V (-1: skip)
  std::span<const int32_t> logits_indices;  // rows whose next-token logits are wanted
  // Layers whose output hidden states Model::hidden_states() returns for every token (-1: the
  // embeddings, l: the residual stream after layer l, the layer count: the final-normed output).
  std::span<const int32_t> hidden_layers = {};
  // EAGLE heads only (ModelDefinition::eagle): each token's input hidden state, [num_tokens,
  // input_hidden_width] fp32 (the target's, or the head's own previous output).
  std::span<const float> input_hidden = {};
  int64_t input_hidden_width = 0;

  [[nodiscard]] int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  [[nodiscard]] int num_seqs() const { return static_cast<int>(seq_lens.size()); }
};

/// Checks a batch's consistency against a cache of num_blocks blocks of block_size tokens: array
/// sizes, query_start_loc covering the tokens, positions inside their sequences, block ids inside
/// the pool for every block a sequence uses, logits rows inside the batch. PAGODA_CHECK failures.
void validate_forward_batch(const ForwardBatch& batch, int64_t num_blocks, int block_size);

}  // namespace pagoda
