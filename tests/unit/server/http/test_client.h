#pragma once
// A blocking HTTP/1.1 client on a raw socket, for driving the server byte by byte in tests.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace pagoda::http::testing {

/// One response as read: status, headers (names lower-cased) and the body (chunks joined).
struct ClientResponse {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;
  bool chunked = false;
};

/// A client connection to 127.0.0.1:port. Reads time out (throwing) after `timeout`.
class TestClient {
 public:
  explicit TestClient(uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~TestClient();
  TestClient(TestClient&& other) noexcept;
  TestClient(const TestClient&) = delete;
  TestClient& operator=(const TestClient&) = delete;

  void send(std::string_view bytes);
  /// Sends a request with Host and Content-Length headers (and `extra` lines, each ending CRLF).
  void send_request(std::string_view method, std::string_view target, std::string_view body = "",
                    std::string_view extra = "");
  /// Reads one whole response (Content-Length or chunked).
  [[nodiscard]] ClientResponse read_response();
  /// Reads a response's status line and headers only; read_chunk() then reads its body.
  [[nodiscard]] ClientResponse read_head();
  /// The next chunk's data; nullopt at the last chunk.
  [[nodiscard]] std::optional<std::string> read_chunk();
  /// Waits for the server to close the connection: true if it did within `wait`.
  [[nodiscard]] bool wait_closed(std::chrono::milliseconds wait);
  void set_receive_buffer(int bytes);
  void close();
  [[nodiscard]] int fd() const { return fd_; }

 private:
  std::string read_line();
  std::string read_exact(size_t n);
  void fill();  // reads more bytes into pending_, throwing on timeout or close

  int fd_ = -1;
  std::string pending_;
};

/// A request written on a fresh connection, its response read: the common one-shot case.
[[nodiscard]] ClientResponse fetch(uint16_t port, std::string_view method, std::string_view target,
                                   std::string_view body = "");

}  // namespace pagoda::http::testing
