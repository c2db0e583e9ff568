#pragma once
// The small value types every kv/ file and its callers share.
#include <cstdint>

namespace pagoda::kv {

/// A token id as the tokenizer hands it out.
using TokenId = int32_t;

/// A physical KV block, an index into the pool: [0, num_blocks). Block 0 is the null block.
using BlockId = int32_t;

/// The engine's internal request id. An integer, not the API's string id ("cmpl-..."): the engine
/// maps string ids to integers once at admission, so the per-step hash lookups here stay cheap
/// and allocation-free.
using RequestId = uint64_t;

/// Block 0 is reserved: never handed out, never freed. The model runner may point padding entries
/// of a block table at it.
inline constexpr BlockId kNullBlockId = 0;

}  // namespace pagoda::kv
