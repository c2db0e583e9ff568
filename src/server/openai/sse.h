#pragma once
// Server-sent events framing for streamed responses.
#include <string>
#include <string_view>

#include "server/openai/json_body.h"

namespace pagoda::openai {

/// The stream's terminator, sent after the last chunk (and after an error event).
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

/// One event: "data: <compact JSON>\n\n". Invalid UTF-8 (which no builder produces) is replaced
/// rather than thrown on.
[[nodiscard]] inline std::string sse_event(const Json& data) {
  std::string event = "data: ";
  event += data.dump(-1, ' ', false, Json::error_handler_t::replace);
  event += "\n\n";
  return event;
}

/// A JSON body as the non-streaming responses send it.
[[nodiscard]] inline std::string json_body(const Json& data) {
  return data.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace pagoda::openai
