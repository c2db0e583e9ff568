#pragma once
// Bi-directional KV in the router (P/D mode with --bidirectional-kv): the decode engine's answer
// to a return_kv request names the finished turn's KV in its kv_transfer_params (the body of a
// whole answer, or the event that ends a stream); the router reads it there and asks the
// producer to import it (POST /v1/kv_transfer/import), so that the conversation's next turn
// prefills only its new tokens.
//
// How it works. KVReturnScanner sees the answer's bytes as they are forwarded: a whole body is
// parsed once; a stream is cut into server-sent events at their blank lines (only the
// unfinished event's bytes are kept), and a `data:` event that mentions kv_transfer_params is
// parsed. The last object found wins.
#include <optional>
#include <string>
#include <string_view>

namespace pagoda::router {

class KVReturnScanner {
 public:
  /// A whole JSON answer.
  void feed_body(std::string_view body);
  /// The next bytes of a server-sent event stream, as they arrive.
  void feed_stream(std::string_view bytes);
  /// The kv_transfer_params object found, as JSON text; nullopt when none was.
  [[nodiscard]] const std::optional<std::string>& params() const { return params_; }

 private:
  void scan_event(std::string_view event);
  std::string pending_;  // the bytes of the event not yet ended by a blank line
  std::optional<std::string> params_;
};

/// The body of an import request for `params` (a kv_transfer_params object as JSON text) and the
/// client's `cache_salt` (empty: none).
[[nodiscard]] std::string kv_import_body(const std::string& params, const std::string& cache_salt);

}  // namespace pagoda::router
