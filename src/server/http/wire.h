#pragma once
// The bytes of HTTP/1.1 responses: status line and headers, chunk framing. Kept apart from the
// session so that the framing is testable without sockets.
#include <chrono>
#include <string>
#include <string_view>

#include "server/http/http_types.h"

namespace pagoda::http {

/// The reason phrase of a status code ("Not Found"), or "Unknown".
[[nodiscard]] std::string_view reason_phrase(int status);

/// Status line and headers of a response, through the blank line. `content_length` < 0 means a
/// chunked body; `keep_alive` false adds "Connection: close", true with `keep_alive_seconds` >= 0
/// adds "Keep-Alive: timeout=N".
struct HeadSpec {
  int status = 200;
  std::string_view content_type;
  const Headers* headers = nullptr;
  long long content_length = 0;
  bool keep_alive = true;
  bool http10 = false;          // an HTTP/1.0 peer: no chunked encoding, the body ends at close
  int keep_alive_seconds = -1;  // the idle time a client may count on; < 0: not advertised
};
[[nodiscard]] std::string serialize_head(const HeadSpec& spec);

/// `timeout` in the whole seconds of a Keep-Alive header (rounded down).
[[nodiscard]] int keep_alive_header_seconds(std::chrono::milliseconds timeout);

/// One chunk of a chunked body: hex size, CRLF, data, CRLF. Empty data gives the last chunk.
[[nodiscard]] std::string frame_chunk(std::string_view data);
/// The last chunk that ends a chunked body.
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

}  // namespace pagoda::http
