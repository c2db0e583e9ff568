#pragma once
// Internals of RouterServer shared by router_server.cc (routes, lifecycle), proxy.cc (forwarding
// one request) and health.cc (the probes). Includes Boost: include it only from this folder's .cc
// files.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "router/backend_pool.h"
#include "router/router_metrics.h"
#include "router/router_server.h"

namespace pagoda::router {

namespace net = boost::asio;

/// An error answer in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
[[nodiscard]] http::HttpResponse error_response(int status, std::string_view message);
/// The end of a server-sent event stream that failed: an error event, then [DONE] (as vLLM ends
/// one).
[[nodiscard]] std::string sse_error_tail(int status, std::string_view message);

struct RouterServer::Impl {
  explicit Impl(RouterOptions opts);

  /// Forwards one request (proxy.cc): chooses a backend, sends the request, streams or sends the
  /// answer back through `responder`, retries on another backend while none answered.
  void forward(http::HttpRequest request, std::shared_ptr<http::Responder> responder,
               std::vector<uint64_t> hashes);
  /// Starts the periodic probes of every backend (health.cc); returns once each has been probed
  /// once.
  void start_health_checks();

  // Declaration order is destruction order reversed: the pool and metrics outlive the
  // io_context, whose destruction may destroy suspended coroutines that hold leases.
  RouterOptions options;
  BackendPool pool;  // the engines requests are answered by (P/D mode: the decoders)
  /// P/D mode: the producers; null otherwise. Their metrics indices follow pool's.
  std::unique_ptr<BackendPool> prefill_pool;
  RouterMetrics metrics;
  /// Both pools' state, pool's backends first (what /metrics renders).
  [[nodiscard]] PoolSnapshot snapshot() const;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  // One per backend, pool's then prefill_pool's.
  std::vector<std::unique_ptr<net::steady_timer>> health_timers;
  std::atomic<bool> stopping{false};

  // The first round of probes (start() waits for it).
  std::mutex first_round_mutex;
  std::condition_variable first_round_done;
  size_t first_round_left = 0;

  std::unique_ptr<http::HttpServer> http;
  bool started = false;
  bool stopped = false;
};

}  // namespace pagoda::router
