#include "test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace pagoda::http::testing {

TestClient::TestClient(uint16_t port, std::chrono::milliseconds timeout) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(std::string("connect: ") + std::strerror(err));
  }
}

TestClient::~TestClient() { close(); }

TestClient::TestClient(TestClient&& other) noexcept
    : fd_(other.fd_), pending_(std::move(other.pending_)) {
  other.fd_ = -1;
}

void TestClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TestClient::set_receive_buffer(int bytes) {
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

void TestClient::send(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error(std::string("send: ") + std::strerror(errno));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void TestClient::send_request(std::string_view method, std::string_view target,
                              std::string_view body, std::string_view extra) {
  std::string request;
  request.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: test\r\n");
  if (!body.empty() || method == "POST") {
    request.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  }
  request.append(extra).append("\r\n").append(body);
  send(request);
}

void TestClient::fill() {
  char buffer[16384];
  ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
  if (n == 0) throw std::runtime_error("connection closed by the server");
  if (n < 0) throw std::runtime_error(std::string("recv: ") + std::strerror(errno));
  pending_.append(buffer, static_cast<size_t>(n));
}

std::string TestClient::read_line() {
  size_t end;
  while ((end = pending_.find("\r\n")) == std::string::npos) fill();
  std::string line = pending_.substr(0, end);
  pending_.erase(0, end + 2);
  return line;
}

std::string TestClient::read_exact(size_t n) {
  while (pending_.size() < n) fill();
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

ClientResponse TestClient::read_head() {
  ClientResponse response;
  std::string status_line = read_line();
  if (status_line.rfind("HTTP/1.", 0) != 0) throw std::runtime_error("bad status: " + status_line);
  response.status = std::stoi(status_line.substr(9, 3));
  for (std::string line = read_line(); !line.empty(); line = read_line()) {
    auto colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    response.headers[name] = value;
  }
  auto te = response.headers.find("transfer-encoding");
  response.chunked = te != response.headers.end() && te->second == "chunked";
  return response;
}

std::optional<std::string> TestClient::read_chunk() {
  const size_t size = std::stoul(read_line(), nullptr, 16);
  std::string data = read_exact(size);
  if (read_line() != "") throw std::runtime_error("bad chunk framing");
  if (size == 0) return std::nullopt;
  return data;
}

ClientResponse TestClient::read_response() {
  ClientResponse response = read_head();
  if (response.status == 100) return read_response();
  if (response.chunked) {
    while (auto chunk = read_chunk()) response.body += *chunk;
  } else {
    auto length = response.headers.find("content-length");
    if (length != response.headers.end()) response.body = read_exact(std::stoul(length->second));
  }
  return response;
}

bool TestClient::wait_closed(std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd_, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
    char buffer[4096];
    ssize_t n = ::recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return true;  // reset
  }
  return false;
}

ClientResponse fetch(uint16_t port, std::string_view method, std::string_view target,
                     std::string_view body) {
  TestClient client(port);
  client.send_request(method, target, body);
  return client.read_response();
}

}  // namespace pagoda::http::testing
