// The health probes: one coroutine per backend that sends GET /health on a fresh connection every
// health interval. A 200 makes the backend healthy (again); anything else, a timeout or a
// connection error makes it unhealthy. Each probe is bounded by the interval, within 1 to 10 s.
#include <utility>  // before Asio 1.18, whose awaitable.hpp uses std::exchange unincluded

#include <algorithm>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/logging.h"
#include "router/router_impl.h"

namespace pagoda::router {
namespace {

namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

// A backend's /health answer is small; a larger one is not a health answer.
constexpr uint64_t kMaxHealthBody = 64 * 1024;

std::chrono::milliseconds probe_timeout(const RouterOptions& options) {
  return std::clamp(options.health_interval, std::chrono::milliseconds(1000),
                    std::chrono::milliseconds(10'000));
}

/// One probe: "" when the backend answered 200, else what went wrong.
net::awaitable<std::string> probe(RouterServer::Impl& router, const BackendPool& pool, size_t b) {
  const client::Endpoint& endpoint = pool.endpoint(b);
  auto executor = co_await net::this_coro::executor;
  error_code ec;
  auto on_error = net::redirect_error(net::use_awaitable, ec);
  tcp::resolver resolver(executor);
  const auto addresses = co_await resolver.async_resolve(endpoint.host, endpoint.port, on_error);
  if (ec) co_return "cannot resolve its host: " + ec.message();
  beast::tcp_stream stream(executor);
  stream.expires_after(probe_timeout(router.options));  // the whole probe
  co_await stream.async_connect(addresses, on_error);
  if (ec) co_return "cannot connect: " + ec.message();
  bhttp::request<bhttp::empty_body> req{bhttp::verb::get, endpoint.base_path + "/health", 11};
  req.set(bhttp::field::host, endpoint.host + ":" + endpoint.port);
  req.set(bhttp::field::user_agent, "pagoda-router");
  req.keep_alive(false);
  co_await bhttp::async_write(stream, req, on_error);
  if (ec) co_return "sending GET /health failed: " + ec.message();
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(kMaxHealthBody);
  co_await bhttp::async_read(stream, buffer, parser, on_error);
  if (ec) co_return "reading the answer to GET /health failed: " + ec.message();
  error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  const unsigned status = parser.get().result_int();
  if (status != 200) co_return fmt::format("GET /health answered {}", status);
  co_return "";
}

// Probes backend b of `pool`, whose metrics (and timer) index is `index`.
net::awaitable<void> health_loop(RouterServer::Impl& router, BackendPool& pool, size_t b,
                                 size_t index) {
  net::steady_timer& timer = *router.health_timers[index];
  bool first = true;
  while (!router.stopping.load()) {
    std::string problem;
    try {
      problem = co_await probe(router, pool, b);
    } catch (const std::exception& e) {
      problem = e.what();
    }
    const bool ok = problem.empty();
    const bool was = pool.set_healthy(b, ok);
    router.metrics.count_health_check(index, ok);
    if (ok && !was) {
      spdlog::info("router: backend {} is healthy", pool.url(b));
    } else if (!ok && (was || first)) {
      spdlog::warn("router: backend {} is unhealthy: {}", pool.url(b), problem);
    }
    if (first) {
      first = false;
      std::lock_guard lock(router.first_round_mutex);
      if (--router.first_round_left == 0) router.first_round_done.notify_all();
    }
    timer.expires_after(router.options.health_interval);
    error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
}

}  // namespace

void RouterServer::Impl::start_health_checks() {
  const size_t num_prefill = prefill_pool ? prefill_pool->size() : 0;
  {
    std::lock_guard lock(first_round_mutex);
    first_round_left = pool.size() + num_prefill;
  }
  for (size_t b = 0; b < pool.size() + num_prefill; ++b) {
    health_timers.push_back(std::make_unique<net::steady_timer>(ioc));
  }
  for (size_t b = 0; b < pool.size(); ++b) {
    net::co_spawn(ioc, health_loop(*this, pool, b, b), net::detached);
  }
  for (size_t b = 0; b < num_prefill; ++b) {
    net::co_spawn(ioc, health_loop(*this, *prefill_pool, b, pool.size() + b), net::detached);
  }
  std::unique_lock lock(first_round_mutex);
  first_round_done.wait(lock, [this] { return first_round_left == 0; });
}

}  // namespace pagoda::router
