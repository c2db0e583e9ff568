#pragma once
// The input of one forward pass: a flat batch of tokens from several sequences (the varlen layout),
// with the paged-KV metadata that tells attention where each sequence's context lives.
#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace pagoda {

/// Hidden states left where a model computed them (Model::device_hidden_states), for another
/// model on the same device to read (ForwardBatch::input_hidden_device): [layers, layer_stride /
/// hidden, hidden] in `dtype`, row t of layer l at element l * layer_stride + t * hidden.
/// Example: 3 layers of a step padded to 8 tokens, hidden 4096: layer_stride 8 * 4096; token 2
/// of layer 1 starts at element 8 * 4096 + 2 * 4096.
struct DeviceHidden {
  const void* data = nullptr;  // device memory (null before the first step that kept any)
  DType dtype = DType::kBF16;
  int device = -1;
  int layers = 0;
  int64_t layer_stride = 0;  // elements
  int64_t hidden = 0;

  /// The view of layers [first, layers). Example: a step that kept layers [3, 2, 16, 29] (the
  /// plan's 3, then an EAGLE-3 head's three) viewed from 1 is the head's [2, 16, 29].
  [[nodiscard]] DeviceHidden from_layer(int first) const {
    DeviceHidden v = *this;
    v.layers = layers - first;
    if (data != nullptr) {
      v.data = static_cast<const char*>(data) +
               static_cast<size_t>(first) * static_cast<size_t>(layer_stride) * dtype_size(dtype);
    }
    return v;
  }
};

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
  // ... or, on a device (a model whose device_hidden_states() names the source's device and
  // dtype), gathered there: token t's input is the concatenation over the source's layers of
  // its row input_hidden_rows[t] (-1: zeros), input_hidden_width = layers x hidden. The source
  // must be complete (its model's step collected) and stay untouched until this forward
  // returns. Example: rows [4, 5, -1] over an EAGLE-3 head's three target layers of hidden 4096
  // give three inputs of 12,288, the last one zeros.
  const DeviceHidden* input_hidden_device = nullptr;
  std::span<const int32_t> input_hidden_rows = {};  // [num_tokens]
  // How many of hidden_layers (the first ones) hidden_states() must return on the host; -1:
  // all. A model with device_hidden_states() may keep the others on its device only; a model
  // without returns them all.
  int host_hidden_layers = -1;

  [[nodiscard]] int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  [[nodiscard]] int num_seqs() const { return static_cast<int>(seq_lens.size()); }
};

/// Checks a batch's consistency against a cache of num_blocks blocks of block_size tokens: array
/// sizes, query_start_loc covering the tokens, positions inside their sequences, block ids inside
/// the pool for every block a sequence uses, logits rows inside the batch. PAGODA_CHECK failures.
void validate_forward_batch(const ForwardBatch& batch, int64_t num_blocks, int block_size);

}  // namespace pagoda
