#pragma once
// The {"String": ...} / {"Regex": ...} pattern object that Split, Replace and friends share.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"

namespace pagoda {

/// A literal string or a compiled regex; find_all is thread-safe.
class Pattern {
 public:
  /// Parses {"String": s} or {"Regex": r}; `where` names the field for errors.
  Pattern(const tokenizer_json::Json& j, const std::string& file, const std::string& where);

  /// Appends the [begin, end) byte ranges of all non-overlapping matches.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

  /// Replaces every match in text with content.
  [[nodiscard]] std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

}  // namespace pagoda
