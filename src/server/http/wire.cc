#include "server/http/wire.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/status.h"

namespace pagoda::http {

std::optional<std::string_view> HttpRequest::header(std::string_view name) const {
  auto equal = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  };
  for (const auto& [key, value] : headers) {
    if (equal(key, name)) return std::string_view(value);
  }
  return std::nullopt;
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string serialize_head(const HeadSpec& spec) {
  std::string out;
  out.reserve(256);
  fmt::format_to(std::back_inserter(out), "HTTP/1.{} {} {}\r\n", spec.http10 ? 0 : 1, spec.status,
                 reason_phrase(spec.status));
  out += "Server: pagoda\r\n";
  if (!spec.content_type.empty()) {
    out.append("Content-Type: ").append(spec.content_type).append("\r\n");
  }
  if (spec.headers != nullptr) {
    for (const auto& [name, value] : *spec.headers) {
      out.append(name).append(": ").append(value).append("\r\n");
    }
  }
  if (spec.content_length >= 0) {
    fmt::format_to(std::back_inserter(out), "Content-Length: {}\r\n", spec.content_length);
  } else if (!spec.http10) {
    out += "Transfer-Encoding: chunked\r\n";
  }
  if (!spec.keep_alive) {
    out += "Connection: close\r\n";
  } else {
    if (spec.http10) out += "Connection: keep-alive\r\n";
    if (spec.keep_alive_seconds >= 0) {
      fmt::format_to(std::back_inserter(out), "Keep-Alive: timeout={}\r\n",
                     spec.keep_alive_seconds);
    }
  }
  out += "\r\n";
  return out;
}

int keep_alive_header_seconds(std::chrono::milliseconds timeout) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout).count();
  return static_cast<int>(std::clamp<int64_t>(seconds, 0, 86400));
}

std::string frame_chunk(std::string_view data) {
  if (data.empty()) return std::string(kLastChunk);
  std::string out = fmt::format("{:x}\r\n", data.size());
  out.reserve(out.size() + data.size() + 2);
  out.append(data).append("\r\n");
  return out;
}

int http_status_of(const std::exception& e) {
  if (dynamic_cast<const InvalidArgument*>(&e) != nullptr) return 400;
  if (dynamic_cast<const NotFound*>(&e) != nullptr) return 404;
  if (dynamic_cast<const Unavailable*>(&e) != nullptr) return 503;
  return 500;
}

HttpResponse openai_style_error(int status, std::string_view message) {
  // OpenAI's error types by status, as its SDKs map them back to exception classes.
  std::string_view type = status == 401   ? "authentication_error"
                          : status == 403 ? "permission_error"
                          : status == 404 ? "not_found_error"
                          : status == 429 ? "rate_limit_error"
                          : status >= 500 ? "server_error"
                                          : "invalid_request_error";
  nlohmann::json body = {{"error",
                          {{"message", std::string(message)},
                           {"type", std::string(type)},
                           {"param", nullptr},
                           {"code", status}}}};
  HttpResponse response;
  response.status = status;
  response.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return response;
}

}  // namespace pagoda::http
