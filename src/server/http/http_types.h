#pragma once
// The HTTP layer's vocabulary, free of Boost: a parsed request, a complete response, and the
// Responder through which a handler answers (once, or as a stream of chunks) from any thread.
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

/// One request as read from the wire: method, target, headers (names lower-cased) and body.
struct HttpRequest {
  std::string method;  // as sent: "GET", "POST", ...
  std::string target;  // path and query
  std::string path;    // target up to '?'
  std::string query;   // after '?', undecoded
  Headers headers;
  std::string body;
  std::string remote;                               // "address:port" of the peer
  std::chrono::steady_clock::time_point arrival{};  // when the whole request had been read

  /// The first header of this name (case-insensitive), if any.
  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const;
};

/// A complete response; Content-Length is added by the server.
struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  Headers headers;  // extra headers
};

/// The answering side of one request. Thread-safe: every call may come from any thread; the
/// session applies them in call order. Answer exactly once: send(), or start_stream() then
/// write()* then end(). A Responder dropped without an answer sends 500 (or ends its stream).
class Responder {
 public:
  virtual ~Responder() = default;

  /// Sends a complete response. Ignored (with a warning) if an answer was already begun.
  virtual void send(HttpResponse response) = 0;
  /// Starts a chunked streaming response (server-sent events by default).
  virtual void start_stream(int status = 200, std::string content_type = "text/event-stream",
                            Headers headers = {}) = 0;
  /// Queues one chunk of a stream; empty data is skipped (an empty chunk would end the stream).
  virtual void write(std::string data) = 0;
  /// Queues one server-sent event: "data: <data>\n\n".
  void write_event(std::string_view data) {
    std::string event;
    event.reserve(data.size() + 8);
    event.append("data: ").append(data).append("\n\n");
    write(std::move(event));
  }
  /// Ends the stream; the connection then serves its next request (keep-alive) or closes.
  virtual void end() = 0;
  /// Registers a callback for the client going away (closed, reset, stopped reading, or the
  /// server forcing connections shut) before the answer was fully written. Called at most once,
  /// on an io thread, so it must not block; called at once if the client is already gone.
  virtual void on_disconnect(std::function<void()> callback) = 0;
  /// Whether the client went away before the answer was fully written.
  [[nodiscard]] virtual bool disconnected() const = 0;
  /// Whether send() or start_stream() has been called (an error can then no longer be sent).
  [[nodiscard]] virtual bool answered() const = 0;
};

/// Handles one request. Runs on an io thread: it may answer at once or keep the Responder and
/// answer later from another thread, but must never block. Exceptions it throws become error
/// responses (InvalidArgument 400, NotFound 404, Unavailable 503, anything else 500).
using Handler = std::function<void(HttpRequest request, std::shared_ptr<Responder> responder)>;

/// Builds the body of an error response (status and message) and its content type.
using ErrorBodyFn = std::function<HttpResponse(int status, std::string_view message)>;

/// The status of an exception caught at the HTTP boundary: InvalidArgument 400, NotFound 404,
/// Unavailable 503, anything else 500.
[[nodiscard]] int http_status_of(const std::exception& e);

/// The default error body, in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
[[nodiscard]] HttpResponse openai_style_error(int status, std::string_view message);

}  // namespace pagoda::http
