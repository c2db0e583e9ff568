// Each exchange runs Beast's asynchronous operations on a private io_context, one at a time
// (start the operation, run the context until it completes): the tcp_stream's deadline then
// bounds every connect, handshake, write and read, which blocking calls could not.
#include "hub/http_client.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <limits>
#include <optional>

namespace pagoda::hub {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

// Not boost::none: Beast 1.74 compares a Content-Length against the optional limit with `>`.
constexpr uint64_t kNoBodyLimit = std::numeric_limits<uint64_t>::max();

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

/// Runs the io_context until the operation started just before completes.
void drive(asio::io_context& io) {
  io.restart();
  io.run();
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

bool is_ip_literal(const std::string& host) {
  beast::error_code ec;
  (void)asio::ip::make_address(host, ec);
  return !ec;
}

/// Reads the response of a request already written: the header, then the body (unless HEAD or
/// on_headers declines it) in chunks.
template <class Stream>
void read_response(asio::io_context& io, Stream& stream, const std::string& what, bool head,
                   const HttpOptions& options,
                   const std::function<bool(const HttpResponse&)>& on_headers,
                   const std::function<void(const char*, size_t)>& on_data) {
  auto& tcp_layer = beast::get_lowest_layer(stream);
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(kNoBodyLimit);
  if (head) parser.skip(true);
  beast::error_code ec;
  tcp_layer.expires_after(seconds(options.read_timeout_s));
  http::async_read_header(stream, buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
  drive(io);
  if (ec) throw NetworkError(fmt::format("{}: reading the response: {}", what, ec.message()));
  HttpResponse response;
  response.status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get()) {
    response.headers[lower(std::string(field.name_string()))] = std::string(field.value());
  }
  if (!on_headers(response) || head || parser.is_done()) return;
  std::vector<char> chunk(1 << 16);
  uint64_t received = 0;
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    tcp_layer.expires_after(seconds(options.read_timeout_s));
    http::async_read_some(stream, buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
    drive(io);
    if (ec == http::error::need_buffer) ec = {};
    const size_t n = chunk.size() - parser.get().body().size;
    if (n > 0) on_data(chunk.data(), n);
    received += n;
    if (ec) {
      const auto length = parser.content_length();
      throw NetworkError(length ? fmt::format("{}: the connection ended after {} of {} bytes: {}",
                                              what, received, *length, ec.message())
                                : fmt::format("{}: the connection ended after {} bytes: {}", what,
                                              received, ec.message()));
    }
  }
}

template <class Stream>
void write_request(asio::io_context& io, Stream& stream, const std::string& what,
                   const http::request<http::empty_body>& request, const HttpOptions& options) {
  beast::error_code ec;
  beast::get_lowest_layer(stream).expires_after(seconds(options.read_timeout_s));
  http::async_write(stream, request, [&](beast::error_code e, size_t) { ec = e; });
  drive(io);
  if (ec) throw NetworkError(fmt::format("{}: sending the request: {}", what, ec.message()));
}

}  // namespace

std::string HttpResponse::header(const std::string& lower_name) const {
  const auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

struct HttpClient::Impl {
  HttpOptions options;
  asio::io_context io;
  std::optional<ssl::context> tls;

  ssl::context& tls_context() {
    if (tls) return *tls;
    tls.emplace(ssl::context::tls_client);
    beast::error_code ec;
    if (options.ca_file.empty()) {
      tls->set_default_verify_paths(ec);  // /etc/ssl/certs through OpenSSL's default paths
    } else {
      tls->load_verify_file(options.ca_file, ec);
    }
    if (ec) {
      const std::string from = options.ca_file.empty() ? "the system store" : options.ca_file;
      tls.reset();
      throw InvalidArgument(fmt::format("cannot load the TLS certificate authorities from {}: {}",
                                        from, ec.message()));
    }
    tls->set_verify_mode(ssl::verify_peer);
    SSL_CTX_set_min_proto_version(tls->native_handle(), TLS1_2_VERSION);
    return *tls;
  }

  /// Resolves and connects the TCP layer of `stream` to the URL's host.
  void connect(beast::tcp_stream& stream, const Url& url, const std::string& what) {
    tcp::resolver resolver(io);
    beast::error_code ec;
    tcp::resolver::results_type endpoints;
    resolver.async_resolve(url.host, url.port,
                           [&](beast::error_code e, tcp::resolver::results_type r) {
                             ec = e;
                             endpoints = std::move(r);
                           });
    drive(io);
    if (ec) {
      throw NetworkError(
          fmt::format("{}: cannot resolve the host {}: {}", what, url.host, ec.message()));
    }
    stream.expires_after(seconds(options.connect_timeout_s));
    stream.async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
    drive(io);
    if (ec) {
      throw NetworkError(
          fmt::format("{}: cannot connect to {}:{}: {}", what, url.host, url.port, ec.message()));
    }
  }

  void exchange(const std::string& method, const Url& url, const Headers& headers,
                const std::function<bool(const HttpResponse&)>& on_headers,
                const std::function<void(const char*, size_t)>& on_data) {
    const std::string what = fmt::format("{} {}", method, url.str());
    const bool head = method == "HEAD";
    http::request<http::empty_body> request{head ? http::verb::head : http::verb::get, url.target,
                                            11};
    request.set(http::field::host, url.host_header());
    request.set(http::field::user_agent, options.user_agent);
    request.set(http::field::accept_encoding, "identity");
    for (const auto& [name, value] : headers) request.set(name, value);
    if (url.scheme == "https") {
      beast::ssl_stream<beast::tcp_stream> stream(io, tls_context());
      if (!is_ip_literal(url.host) &&
          !SSL_set_tlsext_host_name(stream.native_handle(), url.host.c_str())) {
        throw NetworkError(fmt::format("{}: cannot set the TLS server name", what));
      }
      // OpenSSL checks the name (X509_V_ERR_HOSTNAME_MISMATCH / IP_ADDRESS_MISMATCH on failure).
      X509_VERIFY_PARAM* param = SSL_get0_param(stream.native_handle());
      const int named = is_ip_literal(url.host)
                            ? X509_VERIFY_PARAM_set1_ip_asc(param, url.host.c_str())
                            : X509_VERIFY_PARAM_set1_host(param, url.host.c_str(), 0);
      if (named != 1) throw NetworkError(fmt::format("{}: cannot check the host name", what));
      connect(beast::get_lowest_layer(stream), url, what);
      beast::error_code ec;
      beast::get_lowest_layer(stream).expires_after(seconds(options.connect_timeout_s));
      stream.async_handshake(ssl::stream_base::client, [&](beast::error_code e) { ec = e; });
      drive(io);
      if (ec) {
        std::string why = ec.message();
        const long verify = SSL_get_verify_result(stream.native_handle());
        if (verify != X509_V_OK) {
          why += fmt::format(" ({})", X509_verify_cert_error_string(verify));
        }
        throw NetworkError(fmt::format(
            "{}: TLS handshake with {} failed: {}; certificates are checked against {}", what,
            url.host, why,
            options.ca_file.empty() ? "the system store (/etc/ssl/certs, or SSL_CERT_FILE / "
                                      "SSL_CERT_DIR)"
                                    : options.ca_file));
      }
      write_request(io, stream, what, request, options);
      read_response(io, stream, what, head, options, on_headers, on_data);
      beast::get_lowest_layer(stream).close();  // no close_notify: the exchange is complete
    } else {
      beast::tcp_stream stream(io);
      connect(stream, url, what);
      write_request(io, stream, what, request, options);
      read_response(io, stream, what, head, options, on_headers, on_data);
      beast::error_code ignored;
      stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    }
  }
};

HttpClient::HttpClient(HttpOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

HttpClient::~HttpClient() = default;

HttpResponse HttpClient::request(const std::string& method, const Url& url, const Headers& headers,
                                 uint64_t max_body) {
  HttpResponse out;
  impl_->exchange(
      method, url, headers,
      [&](const HttpResponse& r) {
        out = r;
        return true;
      },
      [&](const char* data, size_t n) {
        if (out.body.size() + n > max_body) {
          throw NetworkError(fmt::format("{} {}: the response is larger than {} bytes", method,
                                         url.str(), max_body));
        }
        out.body.append(data, n);
      });
  return out;
}

void HttpClient::stream(const Url& url, const Headers& headers,
                        const std::function<bool(const HttpResponse&)>& on_headers,
                        const std::function<void(const char*, size_t)>& on_data) {
  impl_->exchange("GET", url, headers, on_headers, on_data);
}

}  // namespace pagoda::hub
