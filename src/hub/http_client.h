#pragma once
// A small blocking HTTP/1.1 client for the Hub (Boost.Beast; OpenSSL for https, with the
// certificate checked against the system store and the host name, SNI set). One connection per
// exchange; no redirects are followed here (the caller decides, see download.cc). Every
// operation has a deadline of `read_timeout_s` of silence, so a stalled server fails instead of
// hanging.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "hub/url.h"

namespace pagoda::hub {

/// The server could not be reached, or the connection failed or timed out mid-exchange.
class NetworkError : public Unavailable {
 public:
  using Unavailable::Unavailable;
};

struct HttpOptions {
  double connect_timeout_s = 20;
  double read_timeout_s = 60;  // the longest silence while reading a response
  std::string ca_file;         // PEM bundle; "" = the system store (OpenSSL's default paths)
  std::string user_agent = "pagoda";
};

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;                            // empty for HEAD and streamed bodies

  /// The header's value, "" when absent.
  [[nodiscard]] std::string header(const std::string& lower_name) const;
};

class HttpClient {
 public:
  explicit HttpClient(HttpOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// One GET or HEAD; the body (GET) is read into the response up to `max_body` bytes.
  [[nodiscard]] HttpResponse request(const std::string& method, const Url& url,
                                     const Headers& headers, uint64_t max_body = 64 << 20);

  /// A GET whose body goes to `on_headers` (called once with the status and headers, before any
  /// byte; it returns whether to read the body) and then `on_data` as it arrives. Throws
  /// NetworkError when the connection ends before the body does; the bytes already passed to
  /// on_data stay delivered.
  void stream(const Url& url, const Headers& headers,
              const std::function<bool(const HttpResponse&)>& on_headers,
              const std::function<void(const char*, size_t)>& on_data);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::hub
