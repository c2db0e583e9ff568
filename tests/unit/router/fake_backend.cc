#include "fake_backend.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace pagoda::router::testing {
namespace {

http::HttpServerOptions loopback() {
  http::HttpServerOptions o;
  o.port = 0;
  return o;
}

std::string event(const nlohmann::json& data) { return "data: " + data.dump() + "\n\n"; }

}  // namespace

FakeBackend::FakeBackend(std::string name) : name_(std::move(name)), server_(loopback()) {
  server_.route("GET", "/health", [this](http::HttpRequest, std::shared_ptr<http::Responder> r) {
    r->send({health_status.load(), "text/plain", "", {}});
  });
  server_.route("GET", "/v1/models", [this](http::HttpRequest, std::shared_ptr<http::Responder> r) {
    r->send({200,
             "application/json",
             nlohmann::json{{"object", "list"}, {"data", {{{"id", name_}}}}}.dump(),
             {}});
  });
  server_.route("POST", "/v1/completions",
                [this](http::HttpRequest req, std::shared_ptr<http::Responder> r) {
                  ++posts;
                  nlohmann::json answer = {
                      {"backend", name_},
                      {"body", req.body},
                      {"authorization", std::string(req.header("authorization").value_or(""))}};
                  r->send({200, "application/json", answer.dump(), {}});
                });
  server_.route("POST", "/v1/chat/completions",
                [this](http::HttpRequest, std::shared_ptr<http::Responder> r) {
                  ++posts;
                  r->start_stream();
                  r->write(event({{"backend", name_}, {"n", 1}}));
                  if (hold.load()) {
                    r->on_disconnect([this] { ++disconnects; });
                    std::lock_guard lock(mutex_);
                    held_.push_back(r);
                    return;
                  }
                  r->write(event({{"backend", name_}, {"n", 2}}));
                  r->write("data: [DONE]\n\n");
                  r->end();
                });
  port_ = server_.start();
}

FakeBackend::~FakeBackend() { server_.shutdown(std::chrono::milliseconds(0)); }

std::string FakeBackend::url() const { return "http://127.0.0.1:" + std::to_string(port_); }

size_t FakeBackend::num_held() {
  std::lock_guard lock(mutex_);
  return held_.size();
}

void FakeBackend::release_all() {
  std::vector<std::shared_ptr<http::Responder>> held;
  {
    std::lock_guard lock(mutex_);
    held.swap(held_);
  }
  for (auto& r : held) {
    r->write(event({{"backend", name_}, {"n", 2}}));
    r->write("data: [DONE]\n\n");
    r->end();
  }
}

RawBackend::RawBackend(Mode mode) : mode_(mode) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("RawBackend: cannot listen on loopback");
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

RawBackend::~RawBackend() {
  stop_ = true;
  thread_.join();
  ::close(listen_fd_);
}

std::string RawBackend::url() const { return "http://127.0.0.1:" + std::to_string(port_); }

void RawBackend::serve() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    // One request per connection: read its head (the router sends small bodies with it).
    std::string head;
    char buffer[4096];
    while (head.find("\r\n\r\n") == std::string::npos) {
      pollfd c{fd, POLLIN, 0};
      if (::poll(&c, 1, 5000) <= 0) break;
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      head.append(buffer, static_cast<size_t>(n));
    }
    // And its body, so that closing with unread bytes does not reset the connection.
    const size_t end = head.find("\r\n\r\n");
    const size_t length_at = head.find("Content-Length: ");
    if (end != std::string::npos && length_at != std::string::npos && length_at < end) {
      const size_t want = end + 4 + std::stoul(head.substr(length_at + 16));
      while (head.size() < want) {
        pollfd c{fd, POLLIN, 0};
        if (::poll(&c, 1, 5000) <= 0) break;
        const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
        if (n <= 0) break;
        head.append(buffer, static_cast<size_t>(n));
      }
    }
    std::string reply;
    if (head.starts_with("GET /health ")) {
      reply = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    } else {
      ++requests;
      if (mode_ == Mode::kBreakMidStream) {
        const std::string data = "data: {\"n\":1}\n\n";
        reply =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: "
            "chunked\r\n\r\n";
        char size[16];
        std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
        reply += size + data + "\r\n";
      }
    }
    if (!reply.empty()) ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
  }
}

}  // namespace pagoda::router::testing
