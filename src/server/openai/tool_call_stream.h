#pragma once
// Tool calls in a streamed chat completion: content is released as it comes, text that may be a
// call is held back, and the calls are parsed when the completion ends.
#include <string>
#include <string_view>

#include "server/openai/tool_parser.h"

namespace pagoda::openai {

/// One choice's streaming state. Why hold back instead of parsing calls as they arrive: the
/// non-streamed answer turns the whole output into content when any call is malformed, and only
/// a parse of the finished text can agree with it. So streamed and whole answers carry the same
/// content and calls; the calls arrive together at the end.
class ToolCallStream {
 public:
  explicit ToolCallStream(const ToolParser& parser) : parser_(&parser) {}

  /// Takes the completion's next text; returns the content that is now certain (maybe empty).
  [[nodiscard]] std::string add(std::string_view text);

  /// The completion has ended: the calls, and as content what was held back and is content after
  /// all ("" when nothing is left).
  [[nodiscard]] ExtractedToolCalls finish();

 private:
  const ToolParser* parser_;
  std::string text_;     // the completion so far
  size_t released_ = 0;  // bytes of text_ already returned as content
};

}  // namespace pagoda::openai
