#pragma once
// The memory of the CPU's paged KV cache: per layer one key and one value cache in the layout the
// attention kernels read (kernels/cpu/paged_attention.h), as the KVCacheSpec describes it. Block
// ids come from kv/'s BlockPool; this class only owns the bytes.
#include <span>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/paged_attention.h"
#include "kv/kv_cache_spec.h"

namespace pagoda {

/// Key and value caches of every layer: [num_blocks, block_size, num_kv_heads, head_dim] elements
/// of spec.dtype each (fp32, or the codes of kernels/cpu/kv_cache_codes.h; their scales live with
/// the model's weights). Every byte count comes from the spec.
class KVCacheStorage {
 public:
  /// spec: token-major (the CPU kernels' layout), a dtype of cpu::kv_cache_dtype_supported.
  KVCacheStorage(const kv::KVCacheSpec& spec, int64_t num_blocks, int block_size);

  [[nodiscard]] const cpu::PagedKVLayout& layout() const { return layout_; }
  [[nodiscard]] Tensor key_cache(int layer) const;
  [[nodiscard]] Tensor value_cache(int layer) const;
  /// Copies one block's K/V in every layer (copy-on-write for forked sequences).
  void copy_block(int64_t src_block, int64_t dst_block);
  /// A block's K and V of every layer as bytes ([layer][K, V][block_size, heads, head_dim]), and
  /// back: what the host tier and KV transfers move. out/in: spec.block_bytes(block_size) bytes.
  void export_block(int64_t block, std::span<std::byte> out) const;
  void import_block(int64_t block, std::span<const std::byte> in);

 private:
  kv::KVCacheSpec spec_;
  cpu::PagedKVLayout layout_;
  std::vector<Buffer> keys_;
  std::vector<Buffer> values_;
};

}  // namespace pagoda
