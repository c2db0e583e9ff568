#pragma once
// A compiled PCRE2 pattern (UTF + Unicode properties, JIT) used by Split pre-tokenizers and the
// Replace normalizer/decoder. HF `tokenizers` uses Oniguruma; PCRE2 accepts the same syntax for
// every pattern the supported models ship.
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda {

/// An immutable compiled regex; find_all is thread-safe.
class Regex {
 public:
  /// Compiles pattern; throws InvalidArgument naming `context` (file and field) on a bad pattern.
  Regex(const std::string& pattern, const std::string& context);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Appends the [begin, end) byte ranges of all non-overlapping matches in valid UTF-8 text.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so the header does not pull in pcre2.h
};

}  // namespace pagoda
