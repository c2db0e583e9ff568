#pragma once
// Backends for the router's tests, in-process on loopback ports of their own:
// - FakeBackend: an HttpServer that answers like an engine, whose /health status the test sets and
//   which can hold streams open until the test releases them;
// - RawBackend: a plain socket server that passes /health but breaks every other request, before
//   the status line or in the middle of a stream.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http/http_server.h"

namespace pagoda::router::testing {

class FakeBackend {
 public:
  /// `name` comes back in every answer ("backend" field) to tell the backends apart.
  explicit FakeBackend(std::string name);
  ~FakeBackend();

  [[nodiscard]] std::string url() const;
  [[nodiscard]] const std::string& name() const { return name_; }

  std::atomic<int> health_status{200};  // what GET /health answers
  std::atomic<bool> hold{false};        // streams stop after their first event until released
  std::atomic<int> posts{0};            // POST requests received
  std::atomic<int> disconnects{0};      // held streams whose client (the router) went away

  [[nodiscard]] size_t num_held();
  /// Ends every held stream: a second event, then [DONE].
  void release_all();

 private:
  std::string name_;
  http::HttpServer server_;
  uint16_t port_ = 0;
  std::mutex mutex_;
  std::vector<std::shared_ptr<http::Responder>> held_;
};

class RawBackend {
 public:
  enum class Mode {
    kCloseBeforeStatus,  // reads the request and closes without a byte
    kBreakMidStream,     // starts an event stream, sends one event, closes
  };
  explicit RawBackend(Mode mode);
  ~RawBackend();

  [[nodiscard]] std::string url() const;
  std::atomic<int> requests{0};  // requests other than GET /health

 private:
  void serve();

  Mode mode_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace pagoda::router::testing
