#pragma once
// Parsing of comma-separated token id lists given on the command line ("1,2,3").
#include <cstdint>
#include <string>
#include <vector>

namespace pagoda::cli {

/// Parses "1,2,3" (spaces allowed); throws InvalidArgument naming the flag on anything else.
[[nodiscard]] std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag);

}  // namespace pagoda::cli
