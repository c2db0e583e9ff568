#include "cli/parse_ids.h"

#include <charconv>

#include "core/status.h"

namespace pagoda::cli {

std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  const char* p = text.data();
  const char* end = p + text.size();
  auto skip_spaces = [&] {
    while (p < end && *p == ' ') ++p;
  };
  skip_spaces();
  if (p == end) return ids;
  for (;;) {
    skip_spaces();
    int32_t id = 0;
    const auto [next, ec] = std::from_chars(p, end, id);
    if (ec != std::errc() || id < 0) {
      throw InvalidArgument(
          fmt::format("{} must be comma-separated non-negative token ids, got '{}'", flag, text));
    }
    ids.push_back(id);
    p = next;
    skip_spaces();
    if (p == end) break;
    if (*p != ',')
      throw InvalidArgument(
          fmt::format("{} must be comma-separated non-negative token ids, got '{}'", flag, text));
    ++p;
  }
  return ids;
}

}  // namespace pagoda::cli
