#include "server/http/cors.h"

#include <algorithm>
#include <cctype>

namespace pagoda::http {
namespace {

constexpr std::string_view kAllMethods = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT";

bool contains(const std::vector<std::string>& list, std::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

bool any(const std::vector<std::string>& list) { return contains(list, "*"); }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string join(const std::vector<std::string>& list) {
  std::string out;
  for (const std::string& item : list) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
}

bool origin_allowed(const CorsOptions& o, std::string_view origin) {
  return any(o.origins) || contains(o.origins, origin);
}

/// Access-Control-Allow-Origin (and Vary when it depends on the origin).
void add_allow_origin(const CorsOptions& o, std::string_view origin, Headers& headers) {
  // With credentials a browser refuses "*": name the origin.
  if (any(o.origins) && !o.credentials) {
    headers.emplace_back("Access-Control-Allow-Origin", "*");
  } else {
    headers.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    headers.emplace_back("Vary", "Origin");
  }
  if (o.credentials) headers.emplace_back("Access-Control-Allow-Credentials", "true");
}

}  // namespace

std::optional<HttpResponse> cors_preflight(const CorsOptions& options, const HttpRequest& request) {
  if (!options.enabled || request.method != "OPTIONS") return std::nullopt;
  const auto origin = request.header("origin");
  const auto method = request.header("access-control-request-method");
  if (!origin || !method) return std::nullopt;
  std::vector<std::string> failures;
  if (!origin_allowed(options, *origin)) failures.emplace_back("origin");
  if (!any(options.methods) && !contains(options.methods, *method)) {
    failures.emplace_back("method");
  }
  const std::string requested =
      std::string(request.header("access-control-request-headers").value_or(std::string_view()));
  if (!any(options.headers)) {
    std::vector<std::string> allowed;
    for (const std::string& h : options.headers) allowed.push_back(lower(h));
    size_t at = 0;
    while (at < requested.size()) {
      size_t end = requested.find(',', at);
      if (end == std::string::npos) end = requested.size();
      std::string name = lower(requested.substr(at, end - at));
      name.erase(0, name.find_first_not_of(" \t"));
      name.erase(name.find_last_not_of(" \t") + 1);
      // Starlette's safelisted headers need no permission.
      const bool safelisted = name == "accept" || name == "accept-language" ||
                              name == "content-language" || name == "content-type";
      if (!name.empty() && !safelisted && !contains(allowed, name)) {
        failures.emplace_back("headers");
        break;
      }
      at = end + 1;
    }
  }
  HttpResponse response;
  response.content_type = "text/plain; charset=utf-8";
  if (!failures.empty()) {
    response.status = 400;
    response.body = "Disallowed CORS " + join(failures);
    return response;
  }
  response.status = 200;
  response.body = "OK";
  add_allow_origin(options, *origin, response.headers);
  response.headers.emplace_back("Access-Control-Allow-Methods", any(options.methods)
                                                                    ? std::string(kAllMethods)
                                                                    : join(options.methods));
  const std::string allow_headers = any(options.headers) ? requested : join(options.headers);
  if (!allow_headers.empty()) {
    response.headers.emplace_back("Access-Control-Allow-Headers", allow_headers);
  }
  response.headers.emplace_back("Access-Control-Max-Age", "600");
  return response;
}

Headers cors_headers(const CorsOptions& options, std::string_view origin) {
  Headers headers;
  if (!options.enabled || origin.empty() || !origin_allowed(options, origin)) return headers;
  add_allow_origin(options, origin, headers);
  return headers;
}

}  // namespace pagoda::http
