#include "kv/kv_cache_spec.h"

#include <limits>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda::kv {

int64_t KVCacheSpec::element_bytes() const { return static_cast<int64_t>(dtype_size(dtype)); }

int64_t KVCacheSpec::token_bytes_per_layer() const {
  return int64_t{num_kv_heads} * head_dim * element_bytes();
}

int64_t KVCacheSpec::bytes_per_token() const {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0 || element_bytes() <= 0) {
    throw InvalidArgument(fmt::format(
        "KV cache shape must be positive: num_layers={} num_kv_heads={} head_dim={} dtype={}",
        num_layers, num_kv_heads, head_dim, dtype_name(dtype)));
  }
  int64_t bytes = 2;  // K and V
  for (const int64_t factor :
       {int64_t{num_layers}, int64_t{num_kv_heads}, int64_t{head_dim}, element_bytes()}) {
    if (bytes > std::numeric_limits<int64_t>::max() / factor) {
      throw InvalidArgument("KV cache bytes per token overflow 64 bits");
    }
    bytes *= factor;
  }
  return bytes;
}

int64_t KVCacheSpec::layer_block_bytes(int block_size) const {
  return int64_t{block_size} * token_bytes_per_layer();
}

int64_t KVCacheSpec::block_bytes(int block_size) const {
  return int64_t{block_size} * bytes_per_token();
}

int64_t KVCacheSpec::offset(int64_t block, int slot, int head, int block_size) const {
  if (layout == KVLayout::kTokenMajor)
    return ((block * block_size + slot) * num_kv_heads + head) * int64_t{head_dim};
  return ((block * num_kv_heads + head) * block_size + slot) * int64_t{head_dim};
}

}  // namespace pagoda::kv
