#pragma once
// KV cache sizing: how many blocks a memory budget buys, and the pool's configuration.
#include <cstdint>

namespace pagoda::kv {

/// The pool's shape and policy, as the engine builds it from its flags.
struct KVCacheConfig {
  /// Blocks in the pool, the reserved null block included (so num_blocks - 1 are usable).
  int num_blocks = 0;
  /// Tokens per block (`--block-size`).
  int block_size = 16;
  /// Reuse full blocks across requests by their chained hash (on unless turned off).
  bool enable_prefix_caching = true;

  /// Throws InvalidArgument naming the bad field: num_blocks < 2 or block_size < 1.
  void validate() const;
};

/// How many blocks of `block_size` tokens fit in `memory_bytes` (rounded down), the null block
/// included in the count. InvalidArgument on non-positive sizes or when not even 2 blocks fit,
/// naming what would be needed.
[[nodiscard]] int num_blocks_for_memory(int64_t memory_bytes, int block_size,
                                        int64_t bytes_per_token);

}  // namespace pagoda::kv
