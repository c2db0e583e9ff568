#include "server/openai/tool_call_stream.h"

#include <algorithm>

#include "core/status.h"

namespace pagoda::openai {

std::string ToolCallStream::add(std::string_view text) {
  text_ += text;
  const size_t certain = std::max(released_, parser_->content_prefix(text_));
  std::string out = text_.substr(released_, certain - released_);
  released_ = certain;
  return out;
}

ExtractedToolCalls ToolCallStream::finish() {
  ExtractedToolCalls result = parser_->extract(text_);
  const std::string content = result.calls.empty() ? text_ : result.content.value_or("");
  // content_prefix() promises never to release past the content's end.
  PAGODA_CHECK(
      released_ <= content.size() && content.compare(0, released_, text_, 0, released_) == 0,
      "tool call stream released {} bytes that are not content", released_);
  result.content = content.substr(released_);
  return result;
}

}  // namespace pagoda::openai
