#pragma once
// Parses human memory sizes for flags such as --kv-cache-memory.
#include <cstdint>
#include <string_view>

namespace pagoda::kv {

/// Parses "4G", "512M", "1.5G", "64K", "2T" or plain bytes ("1048576") into bytes.
/// Suffixes are binary (K = 1024) and case-insensitive, optionally followed by "B" or "iB"
/// ("4GB", "4GiB" are 4 * 2^30 too); a fraction is allowed with a suffix and rounds down to whole
/// bytes. Throws InvalidArgument naming the value for anything else (empty, negative, spaces,
/// unknown suffix, more than 64 bits).
[[nodiscard]] int64_t parse_memory_size(std::string_view text);

}  // namespace pagoda::kv
