// HttpServer: the acceptor, the io threads and the shutdown sequence; sessions live in session.cc.
#include "server/http/http_server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <boost/asio/post.hpp>
#include <boost/asio/socket_base.hpp>

#include "core/logging.h"
#include "core/status.h"
#include "server/http/server_impl.h"
#include "server/http/wire.h"

namespace pagoda::http {

using boost::system::error_code;

HttpServer::Impl::Impl(HttpServerOptions opts)
    : options(std::move(opts)),
      accept_strand(net::make_strand(ioc)),
      acceptor(accept_strand),
      accept_retry(accept_strand) {
  if (!options.error_body) options.error_body = openai_style_error;
}

HttpResponse HttpServer::Impl::error_response(int status, std::string_view message) const {
  HttpResponse response = options.error_body(status, message);
  response.status = status;
  return response;
}

void HttpServer::Impl::dispatch(HttpRequest request,
                                const std::shared_ptr<Responder>& responder) const {
  if (options.guard) {
    std::optional<HttpResponse> refused;
    try {
      refused = options.guard(request);
    } catch (const std::exception& e) {
      spdlog::error("http: the request guard threw: {}", e.what());
      refused = error_response(500, "internal error");
    }
    if (refused) {
      responder->send(std::move(*refused));
      return;
    }
  }
  Router::Match match = router.find(request.method, request.path);
  if (match.handler == nullptr) {
    HttpResponse response =
        match.status == 405
            ? error_response(405, "method " + request.method + " is not allowed on " + request.path)
            : error_response(404, "no route " + request.path);
    if (!match.allow.empty()) response.headers.emplace_back("Allow", match.allow);
    responder->send(std::move(response));
    return;
  }
  // A handler's failure fails its request only: map it to a status and answer, if it had not.
  try {
    (*match.handler)(std::move(request), responder);
  } catch (const std::exception& e) {
    const int status = http_status_of(e);
    if (status >= 500) spdlog::error("http: handler failed: {}", e.what());
    if (!responder->answered()) {
      responder->send(error_response(status, e.what()));
    } else {
      responder->end();
    }
  } catch (...) {
    spdlog::error("http: handler threw a non-exception");
    if (!responder->answered()) {
      responder->send(error_response(500, "internal error"));
    } else {
      responder->end();
    }
  }
}

void HttpServer::Impl::do_accept() {
  Strand strand = net::make_strand(ioc);
  acceptor.async_accept(strand,
                        [self = shared_from_this(), strand](error_code ec, tcp::socket socket) {
                          if (!self->acceptor.is_open() || ec == net::error::operation_aborted)
                            return;
                          if (ec == net::error::no_descriptors || ec.value() == ENFILE) {
                            self->accept_without_descriptors();
                          } else if (ec) {
                            self->retry_accept_later(ec);
                          } else {
                            self->start_session(std::move(socket), strand);
                            self->do_accept();
                          }
                        });
}

void HttpServer::Impl::start_session(tcp::socket socket, const Strand& strand) {
  error_code ignored;
  if (draining.load()) {
    socket.close(ignored);
    return;
  }
  socket.set_option(tcp::no_delay(true), ignored);
  uint64_t id = 0;
  {
    std::lock_guard lock(sessions_mutex);
    id = next_session_id++;
  }
  // Past max_connections the connection is still read, to answer it 503 and close.
  const bool refuse = options.max_connections > 0 && num_open.load() >= options.max_connections;
  auto session =
      std::make_shared<Session>(std::move(socket), strand, shared_from_this(), id, refuse);
  add_session(session);
  net::post(session->strand(), [session] { session->start(); });
}

void HttpServer::Impl::retry_accept_later(error_code ec) {
  // A transient error, or no descriptor to spare: back off a little instead of spinning; pending
  // connections wait in the backlog.
  warn_rarely(fmt::format("http: accept failed: {}", ec.message()));
  accept_retry.expires_after(std::chrono::milliseconds(50));
  accept_retry.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec) self->do_accept();
  });
}

void HttpServer::Impl::accept_without_descriptors() {
  auto is_out = [](error_code ec) {
    return ec == net::error::no_descriptors || ec.value() == ENFILE;
  };
  auto is_empty = [](error_code ec) {
    return ec == net::error::would_block || ec == net::error::try_again;
  };
  auto wait_for_connection = [this] {
    acceptor.async_wait(tcp::acceptor::wait_read, [self = shared_from_this()](error_code ec) {
      if (!ec) self->do_accept();
    });
  };
  error_code ec;
  acceptor.non_blocking(true, ec);
  // Linux fails accept when the descriptors are out even with no connection pending, and the
  // failure may be stale: descriptors may have been freed since. Try again first.
  Strand strand = net::make_strand(ioc);
  tcp::socket socket(strand);
  acceptor.accept(socket, ec);
  if (!ec) {
    start_session(std::move(socket), strand);
    do_accept();
    return;
  }
  if (is_empty(ec)) return wait_for_connection();
  if (!is_out(ec) || reserve_fd < 0) return retry_accept_later(ec);
  // Still out: answer the pending connection 503 through the reserve descriptor, then close it
  // at once (the descriptor is needed for the next one). What the client sent is read first, so
  // that closing does not reset the connection under the answer.
  ::close(reserve_fd);
  tcp::socket refused(ioc);
  acceptor.accept(refused, ec);
  if (!ec) {
    const int fd = refused.native_handle();
    char sink[4096];
    while (::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    const std::string answer = refusal_bytes();
    (void)::send(fd, answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);
    error_code ignored;
    refused.close(ignored);
  }
  reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (!ec) {
    warn_rarely(
        "http: out of file descriptors: new connections are answered 503 (raise the open file "
        "limit or lower --max-connections)");
    do_accept();
  } else if (is_empty(ec)) {
    wait_for_connection();
  } else {
    retry_accept_later(ec);
  }
}

void HttpServer::Impl::warn_rarely(const std::string& message) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_warning < std::chrono::seconds(10)) return;
  last_warning = now;
  spdlog::warn("{}", message);
}

std::string HttpServer::Impl::refusal_bytes() const {
  HttpResponse response = error_response(503, "the server is out of file descriptors; retry later");
  response.headers.emplace_back("Retry-After", "1");
  HeadSpec head;
  head.status = 503;
  head.content_type = response.content_type;
  head.headers = &response.headers;
  head.content_length = static_cast<long long>(response.body.size());
  head.keep_alive = false;
  return serialize_head(head) + response.body;
}

void HttpServer::Impl::add_session(const std::shared_ptr<Session>& session) {
  std::lock_guard lock(sessions_mutex);
  sessions.emplace(session->id(), session);
}

void HttpServer::Impl::remove_session(uint64_t id) {
  std::lock_guard lock(sessions_mutex);
  sessions.erase(id);
}

std::vector<std::shared_ptr<Session>> HttpServer::Impl::sessions_snapshot() {
  std::vector<std::shared_ptr<Session>> out;
  std::lock_guard lock(sessions_mutex);
  out.reserve(sessions.size());
  for (const auto& [id, weak] : sessions) {
    if (auto s = weak.lock()) out.push_back(std::move(s));
  }
  return out;
}

HttpServer::HttpServer(HttpServerOptions options)
    : impl_(std::make_shared<Impl>(std::move(options))) {}

HttpServer::~HttpServer() { shutdown(std::chrono::milliseconds(0)); }

void HttpServer::route(std::string method, std::string path, Handler handler) {
  PAGODA_CHECK(!impl_->started, "routes are added before start()");
  impl_->router.add(std::move(method), std::move(path), std::move(handler));
}

uint16_t HttpServer::start() {
  PAGODA_CHECK(!impl_->started, "start() called twice");
  Impl& s = *impl_;
  const std::string where = s.options.host + ":" + std::to_string(s.options.port);
  error_code ec;
  tcp::resolver resolver(s.ioc);
  auto endpoints =
      resolver.resolve(s.options.host, std::to_string(s.options.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    throw InvalidArgument(fmt::format("cannot resolve host {}: {}", s.options.host, ec.message()));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  auto fail = [&](const char* step) {
    throw Unavailable(fmt::format("cannot listen on {} ({}): {}", where, step, ec.message()));
  };
  s.acceptor.open(endpoint.protocol(), ec);
  if (ec) fail("open");
  s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (ec) fail("reuse_address");
  s.acceptor.bind(endpoint, ec);
  if (ec) fail("bind");
  s.acceptor.listen(s.options.backlog, ec);
  if (ec) fail("listen");
  s.port = s.acceptor.local_endpoint().port();
  s.reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  s.started = true;

  s.work.emplace(s.ioc.get_executor());
  net::post(s.accept_strand, [impl = impl_] { impl->do_accept(); });
  const int num_threads = std::max(1, s.options.num_io_threads);
  for (int i = 0; i < num_threads; ++i) {
    s.threads.emplace_back([impl = impl_.get()] {
      // A handler that escapes its own try/catch must not take the server down.
      for (;;) {
        try {
          impl->ioc.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("http: io thread caught: {}", e.what());
        }
      }
    });
  }
  return s.port;
}

void HttpServer::shutdown(std::chrono::milliseconds grace) {
  Impl& s = *impl_;
  if (!s.started || s.stopped.exchange(true)) return;
  using Clock = std::chrono::steady_clock;
  auto wait_until = [](Clock::time_point deadline, auto done) {
    while (!done() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return done();
  };

  // 1. Stop accepting; close connections that are between requests.
  s.draining = true;
  net::post(s.accept_strand, [impl = impl_] {
    error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_retry.cancel();
  });
  for (auto& session : s.sessions_snapshot()) {
    net::post(session->strand(), [session] { session->drain(); });
  }
  // 2. Let requests in flight finish.
  const size_t in_flight = s.num_active.load();
  if (in_flight > 0) spdlog::info("http: waiting for {} requests in flight", in_flight);
  if (!wait_until(Clock::now() + grace, [&] { return s.num_active.load() == 0; })) {
    spdlog::warn("http: shutdown timeout; aborting {} requests", s.num_active.load());
  }
  // 3. Close whatever is left; disconnect callbacks abort the unfinished requests.
  for (auto& session : s.sessions_snapshot()) {
    net::post(session->strand(), [session] { session->force_close(); });
  }
  wait_until(Clock::now() + std::chrono::seconds(2), [&] { return s.num_open.load() == 0; });
  // 4. Without work the io threads return; stop them anyway if something lingers.
  s.work.reset();
  if (!wait_until(Clock::now() + std::chrono::seconds(2), [&] { return s.ioc.stopped(); })) {
    s.ioc.stop();
  }
  for (auto& thread : s.threads) thread.join();
  s.threads.clear();
  if (s.reserve_fd >= 0) ::close(s.reserve_fd);
  s.reserve_fd = -1;
}

void HttpServer::post(std::function<void()> fn) {
  if (!fn) return;
  net::post(impl_->ioc, [fn = std::move(fn)] {
    try {
      fn();
    } catch (const std::exception& e) {
      spdlog::error("http: posted work threw: {}", e.what());
    }
  });
}

uint16_t HttpServer::port() const { return impl_->port; }
size_t HttpServer::num_connections() const { return impl_->num_open.load(); }
size_t HttpServer::num_active_requests() const { return impl_->num_active.load(); }

size_t raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return static_cast<size_t>(limit.rlim_cur);
}

}  // namespace pagoda::http
