#pragma once
// Attention over a paged KV cache for a flat, variable-length batch of sequences: prefill chunks
// (many query tokens, possibly after a cached prefix) and decodes (one query token) in one call.
#include <cstdint>

#include "core/thread_pool.h"

namespace pagoda::cpu {

/// The shape of one layer's key (or value) cache on the CPU:
/// [num_blocks, block_size, num_kv_heads, head_dim] fp32, row-major. Slot s = block * block_size +
/// offset addresses one token's [num_kv_heads, head_dim] row. The token-major block keeps one
/// token's heads together, so writing a new token is one contiguous store, and a head's keys within
/// a block are a fixed stride apart for the dot-product loop.
struct PagedKVLayout {
  int64_t num_blocks = 0;
  int block_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;
};

/// Writes each token's key and value into the cache at slot_mapping[t]; a negative slot skips the
/// token. k, v: [num_tokens, num_kv_heads, head_dim] fp32.
void reshape_and_cache(const float* k, const float* v, const int64_t* slot_mapping,
                       int64_t num_tokens, float* key_cache, float* value_cache,
                       const PagedKVLayout& layout, ThreadPool& pool);

/// Inputs of paged_attention. The tokens of sequence s are rows [query_start_loc[s],
/// query_start_loc[s + 1]) of q and out. Query token t of sequence s attends, causally, to the
/// cached keys at positions [max(0, positions[t] - sliding_window + 1), positions[t]] of that
/// sequence (its own key included: reshape_and_cache runs first). Logical block j of sequence s is
/// physical block block_tables[s * max_blocks_per_seq + j].
struct PagedAttentionParams {
  const float* q = nullptr;                  // [num_tokens, num_heads, head_dim]
  const int32_t* positions = nullptr;        // [num_tokens]
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs], tokens in the cache after this step
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  const float* key_cache = nullptr;          // see PagedKVLayout
  const float* value_cache = nullptr;        // see PagedKVLayout
  float* out = nullptr;                      // [num_tokens, num_heads, head_dim]
  int64_t num_tokens = 0;
  int num_seqs = 0;
  int num_heads = 0;  // query heads; a multiple of layout.num_kv_heads (GQA/MQA)
  int max_blocks_per_seq = 0;
  int sliding_window = 0;  // 0: unlimited
  float scale = 1.0f;      // usually 1/sqrt(head_dim)
  float softcap = 0.0f;    // > 0: each score s = scale * q.k becomes softcap * tanh(s / softcap)
  PagedKVLayout layout;
};

/// Softmax(q k^T * scale) v per query token and head (scores soft-capped when softcap > 0),
/// online-softmax in fp32.
void paged_attention(const PagedAttentionParams& params, ThreadPool& pool);

}  // namespace pagoda::cpu
