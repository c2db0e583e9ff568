#include "model/kv_cache_storage.h"

#include <cstring>

#include "kernels/cpu/kv_cache_codes.h"

namespace pagoda {

KVCacheStorage::KVCacheStorage(const kv::KVCacheSpec& spec, int64_t num_blocks, int block_size)
    : spec_(spec) {
  PAGODA_CHECK(num_blocks > 0 && block_size > 0, "num_blocks {} block_size {}", num_blocks,
               block_size);
  PAGODA_CHECK(
      cpu::kv_cache_dtype_supported(spec.dtype) && spec.layout == kv::KVLayout::kTokenMajor,
      "the CPU KV cache is token-major in f32, bf16, f16, fp8 or int8, not {}",
      dtype_name(spec.dtype));
  layout_ =
      cpu::PagedKVLayout{num_blocks, block_size, spec.num_kv_heads, spec.head_dim, spec.dtype};
  const size_t bytes =
      static_cast<size_t>(num_blocks) * static_cast<size_t>(spec.layer_block_bytes(block_size));
  for (int l = 0; l < spec.num_layers; ++l) {
    keys_.emplace_back(bytes);
    values_.emplace_back(bytes);
  }
}

Tensor KVCacheStorage::key_cache(int layer) const {
  return Tensor{
      keys_.at(static_cast<size_t>(layer)).data(), spec_.dtype,
      Shape{layout_.num_blocks, layout_.block_size, layout_.num_kv_heads, layout_.head_dim}};
}

Tensor KVCacheStorage::value_cache(int layer) const {
  return Tensor{
      values_.at(static_cast<size_t>(layer)).data(), spec_.dtype,
      Shape{layout_.num_blocks, layout_.block_size, layout_.num_kv_heads, layout_.head_dim}};
}

void KVCacheStorage::copy_block(int64_t src_block, int64_t dst_block) {
  PAGODA_CHECK(src_block >= 0 && src_block < layout_.num_blocks && dst_block >= 0 &&
               dst_block < layout_.num_blocks);
  const auto block_bytes = static_cast<size_t>(spec_.layer_block_bytes(layout_.block_size));
  for (size_t l = 0; l < keys_.size(); ++l) {
    for (Buffer* b : {&keys_[l], &values_[l]}) {
      char* base = b->as<char>();
      std::memcpy(base + static_cast<size_t>(dst_block) * block_bytes,
                  base + static_cast<size_t>(src_block) * block_bytes, block_bytes);
    }
  }
}

void KVCacheStorage::export_block(int64_t block, std::span<std::byte> out) const {
  const auto layer_bytes = static_cast<size_t>(spec_.layer_block_bytes(layout_.block_size));
  PAGODA_CHECK(
      block >= 0 && block < layout_.num_blocks && out.size() == 2 * layer_bytes * keys_.size(),
      "export_block {}: {} bytes", block, out.size());
  std::byte* dst = out.data();
  for (size_t l = 0; l < keys_.size(); ++l) {
    for (const Buffer* b : {&keys_[l], &values_[l]}) {
      std::memcpy(dst, b->as<char>() + static_cast<size_t>(block) * layer_bytes, layer_bytes);
      dst += layer_bytes;
    }
  }
}

void KVCacheStorage::import_block(int64_t block, std::span<const std::byte> in) {
  const auto layer_bytes = static_cast<size_t>(spec_.layer_block_bytes(layout_.block_size));
  PAGODA_CHECK(
      block >= 0 && block < layout_.num_blocks && in.size() == 2 * layer_bytes * keys_.size(),
      "import_block {}: {} bytes", block, in.size());
  const std::byte* src = in.data();
  for (size_t l = 0; l < keys_.size(); ++l) {
    for (Buffer* b : {&keys_[l], &values_[l]}) {
      std::memcpy(b->as<char>() + static_cast<size_t>(block) * layer_bytes, src, layer_bytes);
      src += layer_bytes;
    }
  }
}

}  // namespace pagoda
