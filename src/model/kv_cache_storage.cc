#include "model/kv_cache_storage.h"

#include <cstring>

namespace pagoda {

KVCacheStorage::KVCacheStorage(const ModelConfig& config, int64_t num_blocks, int block_size) {
  PAGODA_CHECK(num_blocks > 0 && block_size > 0, "num_blocks {} block_size {}", num_blocks,
               block_size);
  layout_ = cpu::PagedKVLayout{num_blocks, block_size, config.num_kv_heads, config.head_dim};
  const size_t bytes = static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size) *
                       static_cast<size_t>(config.kv_size()) * sizeof(float);
  for (int l = 0; l < config.num_layers; ++l) {
    keys_.emplace_back(bytes);
    values_.emplace_back(bytes);
  }
}

int64_t KVCacheStorage::bytes_per_token(const ModelConfig& config) {
  return 2 * static_cast<int64_t>(config.num_layers) * config.kv_size() *
         static_cast<int64_t>(sizeof(float));
}

Tensor KVCacheStorage::key_cache(int layer) const {
  return Tensor{
      keys_.at(static_cast<size_t>(layer)).data(), DType::kF32,
      Shape{layout_.num_blocks, layout_.block_size, layout_.num_kv_heads, layout_.head_dim}};
}

Tensor KVCacheStorage::value_cache(int layer) const {
  return Tensor{
      values_.at(static_cast<size_t>(layer)).data(), DType::kF32,
      Shape{layout_.num_blocks, layout_.block_size, layout_.num_kv_heads, layout_.head_dim}};
}

void KVCacheStorage::copy_block(int64_t src_block, int64_t dst_block) {
  PAGODA_CHECK(src_block >= 0 && src_block < layout_.num_blocks && dst_block >= 0 &&
               dst_block < layout_.num_blocks);
  const size_t block_floats = static_cast<size_t>(layout_.block_size) *
                              static_cast<size_t>(layout_.num_kv_heads * layout_.head_dim);
  for (size_t l = 0; l < keys_.size(); ++l) {
    for (Buffer* b : {&keys_[l], &values_[l]}) {
      float* base = b->as<float>();
      std::memcpy(base + static_cast<size_t>(dst_block) * block_floats,
                  base + static_cast<size_t>(src_block) * block_floats,
                  block_floats * sizeof(float));
    }
  }
}

}  // namespace pagoda
