#pragma once
// Attention over a paged KV cache for a flat, variable-length batch of sequences: prefill chunks
// (many query tokens, possibly after a cached prefix) and decodes (one query token) in one call.
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace pagoda::cpu {

/// The shape of one layer's key (or value) cache on the CPU:
/// [num_blocks, block_size, num_kv_heads, head_dim] elements of `dtype` (fp32, or the codes of
/// kernels/cpu/kv_cache_codes.h), row-major. Slot s = block * block_size + offset addresses one
/// token's [num_kv_heads, head_dim] row: element (s, h, i) is at (s * num_kv_heads + h) *
/// head_dim + i (block 2, offset 3, head 1 of 4 heads of 64, block_size 16: slot 35, element
/// (35 * 4 + 1) * 64 = 9,024). The token-major block keeps one
/// token's heads together, so writing a new token is one contiguous store, and a head's keys within
/// a block are a fixed stride apart for the dot-product loop.
struct PagedKVLayout {
  int64_t num_blocks = 0;
  int block_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::kF32;  // f32, bf16, f16, f8e4m3, f8e5m2 or i8
};

/// One layer's scales of a quantized cache (f8e4m3, f8e5m2, i8): a stored code c means c * k
/// (keys) or c * v (values). 1 for the other dtypes.
struct KVScales {
  float k = 1.0f;
  float v = 1.0f;
};

/// Inputs of reshape_and_cache.
struct KVCacheWrite {
  const float* k = nullptr;               // [num_tokens, num_kv_heads, head_dim]
  const float* v = nullptr;               // [num_tokens, num_kv_heads, head_dim]
  const int64_t* slot_mapping = nullptr;  // [num_tokens]; a negative slot skips the token
  int64_t num_tokens = 0;
  void* key_cache = nullptr;    // see PagedKVLayout
  void* value_cache = nullptr;  // see PagedKVLayout
  PagedKVLayout layout;
  KVScales scales;
};

/// Writes each token's key and value into the cache at slot_mapping[t], quantized to
/// layout.dtype with the layer's scales (kernels/cpu/kv_cache_codes.h).
void reshape_and_cache(const KVCacheWrite& write, ThreadPool& pool);

/// reshape_and_cache into an fp32 cache (layout.dtype f32).
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
  const void* key_cache = nullptr;           // see PagedKVLayout (elements of layout.dtype)
  const void* value_cache = nullptr;         // see PagedKVLayout
  float* out = nullptr;                      // [num_tokens, num_heads, head_dim]
  int64_t num_tokens = 0;
  int num_seqs = 0;
  int num_heads = 0;  // query heads; a multiple of layout.num_kv_heads (GQA/MQA)
  int max_blocks_per_seq = 0;
  int sliding_window = 0;  // 0: unlimited
  float scale = 1.0f;      // usually 1/sqrt(head_dim)
  float softcap = 0.0f;    // > 0: each score s = scale * q.k becomes softcap * tanh(s / softcap)
  PagedKVLayout layout;
  KVScales scales;  // of a quantized cache
  // Decode context parallelism (model/context_parallel.h): this rank's cache holds only the
  // positions pos with pos % cp_size == cp_rank, position pos at the rank's local index pos /
  // cp_size, so logical block j of the table holds block_size * cp_size positions of which
  // block_size are here. Example (block_size 4, cp_size 2, cp_rank 1): position 13 is local
  // index 6, slot table[6 / 4] * 4 + 6 % 4 = table[1] * 4 + 2; position 12 is another rank's.
  // A row attends to its window's positions on this rank only. 1 and 0: the whole sequence.
  int cp_size = 1;
  int cp_rank = 0;
  // [num_tokens, num_heads] or null: each row's log-sum-exp of its (scaled, capped) scores over
  // the keys it saw, max + log(sum exp(s - max)); -inf when it saw none (its out row is zeros).
  float* lse = nullptr;
};

/// Softmax(q k^T * scale) v per query token and head (scores soft-capped when softcap > 0),
/// online-softmax in fp32. A cache of another dtype than fp32 is read by dequantizing each chunk
/// of keys and values to fp32 (code * scale) first: the result equals, bit for bit, that of an
/// fp32 cache holding the dequantized values.
void paged_attention(const PagedAttentionParams& params, ThreadPool& pool);

}  // namespace pagoda::cpu
