#pragma once
// The chained hash that names a full KV block for prefix caching.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kv/types.h"

namespace pagoda::kv {

/// A 128-bit block hash: XXH3_128 of (parent hash, the block's token ids, extra keys).
///
/// Why 128 bits: a hit is trusted without comparing tokens, so a collision silently serves one
/// request another's KV (wrong output, and across tenants a leak). A pool sees ~1e6 blocks and a
/// long-running server hashes ~1e12 over its life; at 64 bits the birthday bound for 1e6 live
/// hashes is ~3e-8 per cache lifetime, at 128 bits it is ~1e-27, which is "never" at any scale.
struct BlockHash {
  uint64_t low = 0;
  uint64_t high = 0;

  friend bool operator==(const BlockHash&, const BlockHash&) = default;
  [[nodiscard]] std::string to_string() const;  // 32 hex digits, high word first
};

/// Hashes one full block, chained to the hash of the block before it.
///
/// Why chained: a block's KV depends on every token before it, not only on its own tokens, so a
/// block is only reusable when its whole prefix matches. Folding the parent's hash in makes one
/// lookup per block enough to prove that.
/// `parent`: nullopt for a sequence's first block. `extra_keys`: opaque bytes that must also
/// match (the request's cache_salt on the first block; later LoRA or multimodal keys). Each part
/// is length-prefixed, so no two different inputs serialize to the same bytes.
[[nodiscard]] BlockHash hash_block_tokens(const std::optional<BlockHash>& parent,
                                          std::span<const TokenId> token_ids,
                                          std::string_view extra_keys = {});

}  // namespace pagoda::kv

template <>
struct std::hash<pagoda::kv::BlockHash> {
  size_t operator()(const pagoda::kv::BlockHash& h) const noexcept {
    return static_cast<size_t>(h.low);  // already uniformly mixed by XXH3
  }
};
