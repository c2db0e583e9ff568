#include "kv/kv_cache_config.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda::kv {

void KVCacheConfig::validate() const {
  if (block_size < 1) {
    throw InvalidArgument(fmt::format("KV cache block size must be >= 1, got {}", block_size));
  }
  if (num_blocks < 2) {
    throw InvalidArgument(fmt::format(
        "KV cache needs at least 2 blocks (one is the reserved null block), got {}", num_blocks));
  }
}

int num_blocks_for_memory(int64_t memory_bytes, int block_size, int64_t bytes_per_token) {
  if (memory_bytes <= 0 || block_size <= 0 || bytes_per_token <= 0) {
    throw InvalidArgument(
        fmt::format("KV cache sizing needs positive values: memory={} B, block_size={}, "
                    "bytes_per_token={}",
                    memory_bytes, block_size, bytes_per_token));
  }
  if (bytes_per_token > std::numeric_limits<int64_t>::max() / block_size) {
    throw InvalidArgument("KV cache bytes per block overflow 64 bits");
  }
  const int64_t bytes_per_block = bytes_per_token * block_size;
  const int64_t num_blocks = memory_bytes / bytes_per_block;
  if (num_blocks < 2) {
    throw InvalidArgument(fmt::format(
        "KV cache memory of {} bytes holds {} block(s) of {} bytes; at least 2 ({} bytes) are "
        "needed",
        memory_bytes, num_blocks, bytes_per_block, 2 * bytes_per_block));
  }
  return static_cast<int>(std::min<int64_t>(num_blocks, std::numeric_limits<int>::max()));
}

}  // namespace pagoda::kv
