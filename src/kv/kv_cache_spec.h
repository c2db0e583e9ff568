#pragma once
// KVCacheSpec: the one description of what the paged KV cache holds per token, in which element
// type and memory layout. The model reports it (from its definition and its device), the engine
// sizes the block pool from it, and each backend allocates and addresses its cache by it: the
// byte counts below are computed nowhere else.
#include <cstdint>

#include "core/dtype.h"

namespace pagoda::kv {

/// How one layer's key (or value) cache is laid out in memory (block b, token slot o of the block,
/// KV head h, element i of the head).
enum class KVLayout : uint8_t {
  kTokenMajor,  // [num_blocks, block_size, num_kv_heads, head_dim] (the CPU cache)
  kHeadMajor,   // [num_blocks, num_kv_heads, block_size, head_dim] (the GPU cache)
};

/// The KV cache of one model (on one tensor-parallel rank).
struct KVCacheSpec {
  int num_layers = 0;
  int num_kv_heads = 0;  // on this rank
  int head_dim = 0;
  DType dtype = DType::kF32;  // the cache's element type (f32 on the CPU, the activation dtype on
                              // the GPU; room for fp8/int8 with per-layer scales)
  KVLayout layout = KVLayout::kTokenMajor;

  /// Bytes of one element.
  [[nodiscard]] int64_t element_bytes() const;
  /// Bytes of one token's K or V in one layer: num_kv_heads * head_dim elements.
  [[nodiscard]] int64_t token_bytes_per_layer() const;
  /// Bytes of one token's K and V in every layer (what sizes the pool from a memory budget).
  /// InvalidArgument on a non-positive field or on overflow.
  [[nodiscard]] int64_t bytes_per_token() const;
  /// Bytes of one block's K (or V) in one layer: the unit of copies and transfers.
  [[nodiscard]] int64_t layer_block_bytes(int block_size) const;
  /// Bytes of one block's K and V in every layer.
  [[nodiscard]] int64_t block_bytes(int block_size) const;
  /// Element offset of (block, slot in block, kv head) in one layer's cache of this layout.
  /// Example (kHeadMajor, block_size 16, 8 heads, head_dim 128): block 3, slot 5, head 2 is at
  /// ((3 * 8 + 2) * 16 + 5) * 128 = 54,016.
  [[nodiscard]] int64_t offset(int64_t block, int slot, int head, int block_size) const;

  bool operator==(const KVCacheSpec&) const = default;
};

}  // namespace pagoda::kv
