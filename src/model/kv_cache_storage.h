#pragma once
// The memory of the paged KV cache: per layer one key and one value cache in the layout the
// attention kernels read (kernels/cpu/paged_attention.h). Block ids come from kv/'s BlockPool; this
// class only owns the bytes.
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/paged_attention.h"
#include "model/config.h"

namespace pagoda {

/// Key and value caches of every layer: [num_blocks, block_size, num_kv_heads, head_dim] fp32 each.
class KVCacheStorage {
 public:
  KVCacheStorage(const ModelConfig& config, int64_t num_blocks, int block_size);

  /// Bytes one token's K and V take over all layers (for sizing the pool from a memory budget).
  [[nodiscard]] static int64_t bytes_per_token(const ModelConfig& config);

  [[nodiscard]] const cpu::PagedKVLayout& layout() const { return layout_; }
  [[nodiscard]] Tensor key_cache(int layer) const;
  [[nodiscard]] Tensor value_cache(int layer) const;
  /// Copies one block's K/V in every layer (copy-on-write for forked sequences).
  void copy_block(int64_t src_block, int64_t dst_block);

 private:
  cpu::PagedKVLayout layout_;
  std::vector<Buffer> keys_;
  std::vector<Buffer> values_;
};

}  // namespace pagoda
