#pragma once
// The paged KV cache as the CUDA kernels store it.
#include <cuda_runtime.h>

#include <cstdint>

namespace pagoda::cuda {

/// The shape of one layer's key (or value) cache on the GPU:
/// [num_blocks, num_kv_heads, block_size, head_dim] in the activation dtype (bf16 or f16),
/// row-major. Slot s = block * block_size + offset addresses one token; the keys of one head within
/// a block are one contiguous block_size * head_dim run (4 KiB for 16 x 128 bf16), so an attention
/// tile of keys is a few long coalesced reads. (The CPU cache is token-major:
/// [num_blocks, block_size, num_kv_heads, head_dim] fp32; tests convert between the two.)
struct KVCacheLayout {
  int64_t num_blocks = 0;
  int block_size = 16;  // any size >= 1 (the fast attention kernel: a multiple of 16)
  int num_kv_heads = 0;
  int head_dim = 0;  // even, at most 256 (the fast attention kernel: 64 or 128)
};

/// Element offset of (slot, kv head) in a cache of this layout.
__host__ __device__ inline int64_t kv_cache_offset(const KVCacheLayout& l, int64_t slot, int head) {
  const int64_t block = slot / l.block_size, offset = slot % l.block_size;
  return ((block * l.num_kv_heads + head) * l.block_size + offset) * l.head_dim;
}

}  // namespace pagoda::cuda
