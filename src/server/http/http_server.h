#pragma once
// HttpServer: an asynchronous HTTP/1.1 server (Boost.Beast) with keep-alive, streaming responses,
// timeouts for slow or stalled clients, and graceful shutdown. Boost stays out of this header.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/http/http_types.h"

namespace pagoda::http {

/// How the server listens and how long it waits for clients.
struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port (read it back from port())
  int num_io_threads = 2;
  int backlog = 4096;  // pending connections the kernel may queue
  // Open connections served at once; past it a new connection is answered 503 (Retry-After) and
  // closed. 0: no limit but the descriptors (when they run out, new connections get a 503 too).
  size_t max_connections = 0;
  size_t max_request_body = size_t{1} << 20;          // larger bodies get 413
  uint32_t max_header_bytes = 64 * 1024;              // larger headers get 431
  std::chrono::milliseconds request_timeout{30'000};  // to send a whole request
  // How long clients are told they may keep an idle connection (Keep-Alive: timeout=N). The
  // server closes it only keep_alive_grace later: a client whose timers run late (a busy event
  // loop) must never send a request on a connection that the server has just closed. A request
  // that has begun to arrive by then gets request_timeout.
  std::chrono::milliseconds keep_alive_timeout{5'000};
  std::chrono::milliseconds keep_alive_grace{60'000};
  std::chrono::milliseconds write_timeout{30'000};  // for one write to the client
  ErrorBodyFn error_body = openai_style_error;
  // Runs before routing: a response it returns answers the request (e.g. a 401 for a missing API
  // key, so that a path without a route is not told apart from one with a route before that).
  std::function<std::optional<HttpResponse>(const HttpRequest&)> guard;
};

/// The listening server: one acceptor, a few io threads on one io_context, one session per
/// connection. Routes are added before start(); handlers run on the io threads.
class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  /// Shuts down at once (no grace) if still running.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Adds the handler of `method` on the exact `path` (the query string is not matched).
  void route(std::string method, std::string path, Handler handler);

  /// Binds, listens and starts the io threads; returns the bound port. Throws Unavailable when
  /// the address cannot be bound.
  uint16_t start();

  /// Stops accepting, closes idle connections, lets requests in flight finish for up to `grace`,
  /// then closes the rest (their disconnect callbacks fire) and joins the io threads. Idempotent.
  void shutdown(std::chrono::milliseconds grace);

  /// Runs `fn` on an io thread soon (for work that engine-thread callbacks must not do there).
  /// `fn` must not block; it is dropped if the server has stopped.
  void post(std::function<void()> fn);

  [[nodiscard]] uint16_t port() const;
  /// Open connections.
  [[nodiscard]] size_t num_connections() const;
  /// Requests read and not yet fully answered.
  [[nodiscard]] size_t num_active_requests() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

/// Raises the soft limit on open files to the hard limit (each connection is a descriptor);
/// returns the new soft limit.
size_t raise_open_file_limit();

}  // namespace pagoda::http
