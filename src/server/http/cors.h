#pragma once
// Cross-origin resource sharing, as vLLM configures Starlette's CORSMiddleware: a browser page on
// another origin may call the API when its origin is allowed. Preflights (OPTIONS with Origin and
// Access-Control-Request-Method) are answered here, before routing and the API key; every other
// response to a request with an allowed Origin carries Access-Control-Allow-Origin.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/http_types.h"

namespace pagoda::http {

/// vLLM's defaults: every origin, method and header, no credentials.
struct CorsOptions {
  bool enabled = true;
  std::vector<std::string> origins = {"*"};  // "*": any
  std::vector<std::string> methods = {"*"};  // "*": DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT
  std::vector<std::string> headers = {"*"};  // "*": whatever the preflight asks for
  bool credentials = false;                  // Access-Control-Allow-Credentials: true
};

/// The answer to a preflight, or nullopt when `request` is not one (then route it). A preflight
/// from a disallowed origin, or asking for a disallowed method or header, is a 400 naming it
/// ("Disallowed CORS origin, method"), as Starlette answers.
[[nodiscard]] std::optional<HttpResponse> cors_preflight(const CorsOptions& options,
                                                         const HttpRequest& request);

/// The headers to add to the response of a request that came with `origin` (empty: none, or a
/// disallowed origin).
[[nodiscard]] Headers cors_headers(const CorsOptions& options, std::string_view origin);

}  // namespace pagoda::http
