#pragma once
// Post-processors of tokenizer.json, for a single sequence: the ids added around the encoded text
// when add_special_tokens is true (TemplateProcessing, Bert/Roberta, ByteLevel, Sequence).
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/json_util.h"

namespace pagoda {

/// The special ids a post-processor puts before and after a single sequence.
struct PostProcessor {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;

  /// Wraps ids with prefix and suffix.
  void apply(std::vector<int32_t>& ids) const;
};

/// Reads the post_processor object (null gives an empty one); throws InvalidArgument naming the
/// type and the file for unsupported types.
[[nodiscard]] PostProcessor make_post_processor(const tokenizer_json::Json& j,
                                                const std::string& file);

}  // namespace pagoda
