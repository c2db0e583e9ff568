// The HTTP transport against a real server on a free loopback port, driven by raw-socket clients.
// To add a case: build a server with make_server(options) after adding routes to it, then talk to
// server->port() with TestClient (one connection) or fetch() (one request on a new connection).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "server/http/http_server.h"
#include "server/http/wire.h"
#include "test_client.h"

namespace pagoda::http {
namespace {

using namespace std::chrono_literals;
using testing::ClientResponse;
using testing::TestClient;

/// Runs `fn` on its own thread, joined at the end of the test (after the server stopped).
class Threads {
 public:
  ~Threads() {
    for (auto& t : threads_) t.join();
  }
  template <typename Fn>
  void spawn(Fn fn) {
    std::lock_guard lock(mutex_);
    threads_.emplace_back(std::move(fn));
  }

 private:
  std::mutex mutex_;
  std::vector<std::thread> threads_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  HttpServerOptions options() {
    HttpServerOptions o;
    o.port = 0;
    return o;
  }
  HttpServer& make_server(HttpServerOptions o) {
    server_ = std::make_unique<HttpServer>(std::move(o));
    server_->route("GET", "/hello", [](HttpRequest, std::shared_ptr<Responder> r) {
      r->send({200, "text/plain", "hello", {}});
    });
    server_->route("POST", "/echo", [](HttpRequest request, std::shared_ptr<Responder> r) {
      r->send({200, "text/plain", request.method + " " + request.target + " " + request.body, {}});
    });
    return *server_;
  }
  void start() { server_->start(); }
  uint16_t port() const { return server_->port(); }
  void TearDown() override {
    if (server_) server_->shutdown(1s);
  }

  Threads threads_;  // declared first: joined after the server is gone
  std::unique_ptr<HttpServer> server_;
};

TEST(WireTest, ChunkFramingAndHeads) {
  EXPECT_EQ(frame_chunk("hello"), "5\r\nhello\r\n");
  EXPECT_EQ(frame_chunk(std::string(26, 'x')).substr(0, 4), "1a\r\n");
  EXPECT_EQ(frame_chunk(""), "0\r\n\r\n");
  Headers extra = {{"X-A", "b"}};
  std::string head = serialize_head({.status = 404,
                                     .content_type = "application/json",
                                     .headers = &extra,
                                     .content_length = 12,
                                     .keep_alive = false});
  EXPECT_EQ(head.substr(0, 24), "HTTP/1.1 404 Not Found\r\n");
  EXPECT_NE(head.find("Content-Length: 12\r\n"), std::string::npos);
  EXPECT_NE(head.find("Connection: close\r\n"), std::string::npos);
  EXPECT_NE(head.find("X-A: b\r\n"), std::string::npos);
  EXPECT_TRUE(head.ends_with("\r\n\r\n"));
  HeadSpec unknown_length;
  unknown_length.content_length = -1;
  std::string chunked = serialize_head(unknown_length);
  EXPECT_NE(chunked.find("Transfer-Encoding: chunked\r\n"), std::string::npos);
  EXPECT_EQ(chunked.find("Connection"), std::string::npos);
}

TEST(WireTest, KeepAliveHeader) {
  EXPECT_EQ(keep_alive_header_seconds(5s), 5);
  EXPECT_EQ(keep_alive_header_seconds(1999ms), 1);
  EXPECT_EQ(keep_alive_header_seconds(300ms), 0);
  HeadSpec kept;
  kept.keep_alive_seconds = 4;
  EXPECT_NE(serialize_head(kept).find("Keep-Alive: timeout=4\r\n"), std::string::npos);
  kept.http10 = true;
  EXPECT_NE(serialize_head(kept).find("Connection: keep-alive\r\nKeep-Alive: timeout=4\r\n"),
            std::string::npos);
  HeadSpec closing;
  closing.keep_alive = false;
  closing.keep_alive_seconds = 4;
  EXPECT_EQ(serialize_head(closing).find("Keep-Alive"), std::string::npos);
}

TEST(WireTest, ErrorBodyAndStatusOfExceptions) {
  HttpResponse r = openai_style_error(404, "no \"route\"");
  auto body = nlohmann::json::parse(r.body);
  EXPECT_EQ(body["error"]["message"], "no \"route\"");
  EXPECT_EQ(body["error"]["type"], "not_found_error");
  EXPECT_EQ(body["error"]["code"], 404);
  EXPECT_EQ(http_status_of(InvalidArgument("x")), 400);
  EXPECT_EQ(http_status_of(NotFound("x")), 404);
  EXPECT_EQ(http_status_of(Unavailable("x")), 503);
  EXPECT_EQ(http_status_of(std::runtime_error("x")), 500);
}

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  make_server(options());
  start();
  TestClient client(port());
  for (int i = 0; i < 3; ++i) {
    client.send_request("GET", "/hello");
    auto r = client.read_response();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "hello");
    EXPECT_EQ(r.headers["content-type"], "text/plain");
    client.send_request("POST", "/echo?x=1", "body " + std::to_string(i));
    r = client.read_response();
    EXPECT_EQ(r.body, "POST /echo?x=1 body " + std::to_string(i));
  }
  EXPECT_EQ(server_->num_connections(), 1u);
  // Pipelined: two requests in one write, answered in order.
  client.send(
      "GET /hello HTTP/1.1\r\nHost: a\r\n\r\nPOST /echo HTTP/1.1\r\nHost: a\r\n"
      "Content-Length: 3\r\n\r\nabc");
  EXPECT_EQ(client.read_response().body, "hello");
  EXPECT_EQ(client.read_response().body, "POST /echo abc");
  // Connection: close is honoured.
  client.send_request("GET", "/hello", "", "Connection: close\r\n");
  auto last = client.read_response();
  EXPECT_EQ(last.headers["connection"], "close");
  EXPECT_TRUE(client.wait_closed(2s));
}

TEST_F(HttpServerTest, OversizedBodyGets413WithAnErrorBody) {
  auto o = options();
  o.max_request_body = 1024;
  make_server(o);
  start();
  {
    TestClient client(port());
    client.send_request("POST", "/echo", std::string(4096, 'x'));
    auto r = client.read_response();
    EXPECT_EQ(r.status, 413);
    EXPECT_EQ(r.headers["connection"], "close");
    EXPECT_NE(nlohmann::json::parse(r.body)["error"]["message"].get<std::string>().find("1024"),
              std::string::npos);
  }
  {  // Chunked bodies are counted as they arrive.
    TestClient client(port());
    client.send("POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
    client.send(frame_chunk(std::string(800, 'a')));
    client.send(frame_chunk(std::string(800, 'b')));
    EXPECT_EQ(client.read_response().status, 413);
  }
  // At the limit is fine.
  EXPECT_EQ(testing::fetch(port(), "POST", "/echo", std::string(1024, 'y')).status, 200);
}

TEST_F(HttpServerTest, UnknownRoutes404WrongMethods405MalformedRequests400) {
  make_server(options());
  start();
  auto r = testing::fetch(port(), "GET", "/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["code"], 404);
  r = testing::fetch(port(), "POST", "/hello");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "GET");
  TestClient client(port());
  client.send("GARBAGE\r\n\r\n");
  EXPECT_EQ(client.read_response().status, 400);
}

TEST_F(HttpServerTest, HandlerExceptionsBecomeErrorsAndTheConnectionLivesOn) {
  auto& server = make_server(options());
  server.route("GET", "/bad", [](HttpRequest, std::shared_ptr<Responder>) {
    throw InvalidArgument("'model' is required");
  });
  server.route("GET", "/busy",
               [](HttpRequest, std::shared_ptr<Responder>) { throw Unavailable("full"); });
  server.route("GET", "/bug",
               [](HttpRequest, std::shared_ptr<Responder>) { throw std::logic_error("oops"); });
  server.route("GET", "/forgot", [](HttpRequest, std::shared_ptr<Responder>) {});
  start();
  TestClient client(port());
  client.send_request("GET", "/bad");
  auto r = client.read_response();
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["message"], "'model' is required");
  client.send_request("GET", "/busy");
  EXPECT_EQ(client.read_response().status, 503);
  client.send_request("GET", "/bug");
  EXPECT_EQ(client.read_response().status, 500);
  client.send_request("GET", "/forgot");  // dropped unanswered
  EXPECT_EQ(client.read_response().status, 500);
  client.send_request("GET", "/hello");
  EXPECT_EQ(client.read_response().status, 200);
}

TEST_F(HttpServerTest, StreamsEventsWrittenFromAnotherThreadInOrder) {
  auto& server = make_server(options());
  constexpr int kEvents = 500;
  server.route("POST", "/stream", [this](HttpRequest, std::shared_ptr<Responder> r) {
    r->start_stream();
    threads_.spawn([r] {
      for (int i = 0; i < kEvents; ++i) r->write_event(std::to_string(i));
      r->write_event("[DONE]");
      r->end();
      r->write_event("after the end: dropped");
    });
  });
  start();
  TestClient client(port());
  for (int round = 0; round < 2; ++round) {  // the connection is reused after a stream
    client.send_request("POST", "/stream", "{}");
    auto head = client.read_head();
    EXPECT_EQ(head.status, 200);
    EXPECT_EQ(head.headers["content-type"], "text/event-stream");
    EXPECT_EQ(head.headers["cache-control"], "no-cache");
    ASSERT_TRUE(head.chunked);
    std::string body;
    while (auto chunk = client.read_chunk()) body += *chunk;
    std::string expected;
    for (int i = 0; i < kEvents; ++i) expected += "data: " + std::to_string(i) + "\n\n";
    expected += "data: [DONE]\n\n";
    EXPECT_EQ(body, expected);
  }
  client.send_request("GET", "/hello");
  EXPECT_EQ(client.read_response().body, "hello");
}

TEST_F(HttpServerTest, ClientDisconnectFiresTheCallback) {
  auto& server = make_server(options());
  auto streamed = std::make_shared<std::promise<std::shared_ptr<Responder>>>();
  auto gone = std::make_shared<std::promise<void>>();
  server.route("GET", "/stream", [=](HttpRequest, std::shared_ptr<Responder> r) {
    r->start_stream();
    r->write_event("first");
    r->on_disconnect([gone] { gone->set_value(); });
    streamed->set_value(r);
  });
  auto waiting_gone = std::make_shared<std::promise<void>>();
  server.route("GET", "/wait", [=](HttpRequest, std::shared_ptr<Responder> r) {
    // Holds the request unanswered, as a slow engine would.
    r->on_disconnect([waiting_gone, r] { waiting_gone->set_value(); });
  });
  start();
  {
    TestClient client(port());
    client.send_request("GET", "/stream");
    auto head = client.read_head();
    EXPECT_EQ(client.read_chunk(), "data: first\n\n");
  }
  ASSERT_EQ(gone->get_future().wait_for(3s), std::future_status::ready);
  auto responder = streamed->get_future().get();
  EXPECT_TRUE(responder->disconnected());
  responder->write_event("to nobody");  // harmless
  responder->end();
  bool late_called = false;  // a callback registered after the fact runs at once
  responder->on_disconnect([&] { late_called = true; });
  EXPECT_TRUE(late_called);
  {
    TestClient client(port());
    client.send_request("GET", "/wait");
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(waiting_gone->get_future().wait_for(3s), std::future_status::ready);
  EXPECT_EQ(server.num_active_requests(), 0u);
}

TEST_F(HttpServerTest, SlowAndIdleClientsTimeOut) {
  auto o = options();
  o.request_timeout = 300ms;
  o.keep_alive_timeout = 300ms;
  o.keep_alive_grace = 0ms;
  make_server(o);
  start();
  const auto t0 = std::chrono::steady_clock::now();
  TestClient slow(port());
  slow.send("GET /hello HTTP/1.1\r\nHost: a\r\n");  // and never the blank line
  TestClient silent(port());                        // connects, sends nothing
  TestClient idle(port());
  idle.send_request("GET", "/hello");
  EXPECT_EQ(idle.read_response().status, 200);
  EXPECT_TRUE(slow.wait_closed(3s));
  EXPECT_TRUE(silent.wait_closed(3s));
  EXPECT_TRUE(idle.wait_closed(3s));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
}

// Clients such as Node's fetch retire an idle connection after their own timeout (4 s, on a
// coarse timer) unless the server advertises one, and a client whose event loop is busy retires
// it late. A server that closed idle connections at 5 s, unannounced, raced them: the client sent
// its request on a connection the server had just closed ("other side closed" in the load suite).
// Answers now advertise the timeout, and the server keeps idle connections for a grace after it.
TEST_F(HttpServerTest, KeptAliveAnswersAdvertiseTheirIdleTimeout) {
  auto o = options();
  o.keep_alive_timeout = 5s;
  auto& server = make_server(o);
  server.route("GET", "/stream", [](HttpRequest, std::shared_ptr<Responder> r) {
    r->start_stream();
    r->write_event("x");
    r->end();
  });
  start();
  TestClient client(port());
  client.send_request("GET", "/hello");
  EXPECT_EQ(client.read_response().headers["keep-alive"], "timeout=5");
  client.send_request("GET", "/stream");
  auto stream = client.read_head();
  EXPECT_EQ(stream.headers["keep-alive"], "timeout=5");
  while (client.read_chunk()) {
  }
  client.send_request("GET", "/hello", "", "Connection: close\r\n");
  auto last = client.read_response();
  EXPECT_EQ(last.headers.count("keep-alive"), 0u);
  EXPECT_EQ(last.headers["connection"], "close");
}

TEST_F(HttpServerTest, AnIdleConnectionOutlivesItsAdvertisedTimeoutByTheGrace) {
  auto o = options();
  o.keep_alive_timeout = 200ms;
  o.keep_alive_grace = 60s;
  make_server(o);
  start();
  TestClient client(port());
  client.send_request("GET", "/hello");
  EXPECT_EQ(client.read_response().headers["keep-alive"], "timeout=0");
  std::this_thread::sleep_for(600ms);  // a client late to retire it
  client.send_request("GET", "/hello");
  EXPECT_EQ(client.read_response().body, "hello");
}

// A request that has begun to arrive when the keep-alive time runs out is read and answered:
// closing then would drop it under the client.
TEST_F(HttpServerTest, ARequestBegunWithinTheKeepAliveTimeoutIsAnswered) {
  auto o = options();
  o.keep_alive_timeout = 200ms;
  o.keep_alive_grace = 0ms;
  o.request_timeout = 30s;
  make_server(o);
  start();
  TestClient client(port());
  // The second request's first bytes come with the first request, so they are there before the
  // keep-alive timer starts; the rest comes well after it expired.
  client.send("GET /hello HTTP/1.1\r\nHost: a\r\n\r\nGET /hel");
  EXPECT_EQ(client.read_response().status, 200);
  std::this_thread::sleep_for(600ms);
  client.send("lo HTTP/1.1\r\nHost: a\r\n\r\n");
  const auto second = client.read_response();
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.body, "hello");
  // An idle connection is still closed at the keep-alive timeout.
  EXPECT_TRUE(client.wait_closed(5s));
}

// RFC 9112 3.2: an HTTP/1.1 request without Host, or with two, is a 400 (HTTP/1.0 needs none).
TEST_F(HttpServerTest, RequestsWithoutExactlyOneHostAre400) {
  make_server(options());
  start();
  {
    TestClient client(port());
    client.send("GET /hello HTTP/1.1\r\n\r\n");
    auto r = client.read_response();
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(r.body.find("no Host header"), std::string::npos) << r.body;
    EXPECT_TRUE(client.wait_closed(5s));
  }
  {
    TestClient client(port());
    client.send("GET /hello HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
    EXPECT_EQ(client.read_response().status, 400);
  }
  TestClient old(port());
  old.send("GET /hello HTTP/1.0\r\n\r\n");
  EXPECT_EQ(old.read_response().body, "hello");
}

// A compressed body would be taken for its bytes: anything but identity is a 415.
TEST_F(HttpServerTest, ContentEncodingOtherThanIdentityIs415) {
  make_server(options());
  start();
  for (const char* encoding : {"gzip", "br", "gzip, identity"}) {
    TestClient client(port());
    client.send_request("POST", "/echo", "\x1f\x8b compressed",
                        std::string("Content-Encoding: ") + encoding + "\r\n");
    auto r = client.read_response();
    EXPECT_EQ(r.status, 415) << encoding;
    EXPECT_EQ(r.headers["accept-encoding"], "identity");
    EXPECT_NE(r.body.find(encoding), std::string::npos) << r.body;
  }
  TestClient client(port());
  client.send_request("POST", "/echo", "plain", "Content-Encoding: Identity\r\n");
  EXPECT_EQ(client.read_response().body, "POST /echo plain");
}

// The guard answers before routing, also for paths without a route.
TEST_F(HttpServerTest, TheGuardAnswersBeforeRouting) {
  auto o = options();
  o.guard = [](const HttpRequest& request) -> std::optional<HttpResponse> {
    if (!request.path.starts_with("/private/")) return std::nullopt;
    return HttpResponse{401, "text/plain", "key?", {}};
  };
  auto& server = make_server(o);
  server.route("GET", "/private/x", [](HttpRequest, std::shared_ptr<Responder> r) {
    r->send({200, "text/plain", "x", {}});
  });
  start();
  EXPECT_EQ(testing::fetch(port(), "GET", "/private/x").status, 401);
  EXPECT_EQ(testing::fetch(port(), "GET", "/private/nothing").status, 401);
  EXPECT_EQ(testing::fetch(port(), "GET", "/nothing").status, 404);
  EXPECT_EQ(testing::fetch(port(), "GET", "/hello").body, "hello");
}

/// Waits (polling, up to 10 s) until the server has at most `n` open connections.
bool wait_for_connections(const HttpServer& server, size_t n) {
  for (int i = 0; i < 1000 && server.num_connections() > n; ++i) std::this_thread::sleep_for(10ms);
  return server.num_connections() <= n;
}

TEST_F(HttpServerTest, PastMaxConnectionsNewConnectionsAre503) {
  auto o = options();
  o.max_connections = 2;
  auto& server = make_server(o);
  start();
  TestClient a(port());
  TestClient b(port());
  for (TestClient* c : {&a, &b}) {
    c->send_request("GET", "/hello");
    EXPECT_EQ(c->read_response().status, 200);
  }
  TestClient refused(port());
  refused.send_request("GET", "/hello");
  auto r = refused.read_response();
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.headers["retry-after"], "1");
  EXPECT_EQ(r.headers["connection"], "close");
  EXPECT_NE(r.body.find("limit of 2 open connections"), std::string::npos) << r.body;
  EXPECT_TRUE(refused.wait_closed(5s));
  refused.close();
  a.close();
  ASSERT_TRUE(wait_for_connections(server, 1));
  TestClient d(port());
  d.send_request("GET", "/hello");
  EXPECT_EQ(d.read_response().status, 200);
}

// Out of descriptors, a new connection is answered 503 through a descriptor kept in reserve
// (it used to wait in the backlog while the accept loop logged "accept failed" every 50 ms).
TEST_F(HttpServerTest, OutOfDescriptorsNewConnectionsAre503) {
  auto& server = make_server(options());
  start();
  // A first answer: the accept loop is waiting for connections (it starts on an io thread, and
  // must not take descriptors while this thread counts them out).
  EXPECT_EQ(testing::fetch(port(), "GET", "/hello").body, "hello");
  ASSERT_TRUE(wait_for_connections(server, 0));
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  size_t open_now = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++open_now;
  }
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, open_now + 32);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> fillers;
  for (int fd; (fd = ::open("/dev/null", O_RDONLY)) >= 0;) fillers.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  ::close(fillers.back());  // one descriptor: the client's socket
  fillers.pop_back();
  ClientResponse r;
  {
    TestClient client(port());
    client.send_request("GET", "/hello");
    r = client.read_response();
  }
  for (int fd : fillers) ::close(fd);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.headers["retry-after"], "1");
  EXPECT_NE(r.body.find("out of file descriptors"), std::string::npos) << r.body;
  ASSERT_TRUE(wait_for_connections(server, 0));
  EXPECT_EQ(testing::fetch(port(), "GET", "/hello").body, "hello");
}

TEST_F(HttpServerTest, ClientThatStopsReadingTimesOutAndDisconnects) {
  auto o = options();
  o.write_timeout = 300ms;
  auto& server = make_server(o);
  auto gone = std::make_shared<std::promise<void>>();
  server.route("GET", "/flood", [this, gone](HttpRequest, std::shared_ptr<Responder> r) {
    r->on_disconnect([gone] { gone->set_value(); });
    r->start_stream();
    threads_.spawn([r] {
      const std::string blob(64 * 1024, 'x');
      for (int i = 0; i < 4000 && !r->disconnected(); ++i) {
        r->write_event(blob);
        std::this_thread::sleep_for(1ms);
      }
      r->end();
    });
  });
  start();
  TestClient client(port());
  client.set_receive_buffer(4096);
  client.send_request("GET", "/flood");  // and never read
  ASSERT_EQ(gone->get_future().wait_for(10s), std::future_status::ready);
}

TEST_F(HttpServerTest, HoldsAThousandIdleConnectionsWhileServing) {
  make_server(options());
  start();
  std::vector<TestClient> idle;
  idle.reserve(1000);
  for (int i = 0; i < 1000; ++i) idle.emplace_back(port());
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server_->num_connections() < 1000 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GE(server_->num_connections(), 1000u);
  auto r = testing::fetch(port(), "GET", "/hello");
  EXPECT_EQ(r.status, 200);
  // Every idle connection is live, not just queued: each is served in turn.
  for (int i = 0; i < 1000; i += 97) {
    idle[i].send_request("GET", "/hello");
    EXPECT_EQ(idle[i].read_response().body, "hello");
  }
}

TEST_F(HttpServerTest, ShutdownFinishesStreamsInFlight) {
  auto& server = make_server(options());
  server.route("GET", "/slow", [this](HttpRequest, std::shared_ptr<Responder> r) {
    r->start_stream();
    threads_.spawn([r] {
      for (int i = 0; i < 10; ++i) {
        r->write_event(std::to_string(i));
        std::this_thread::sleep_for(30ms);
      }
      r->end();
    });
  });
  start();
  TestClient idle(port());  // between requests: closed at once
  TestClient client(port());
  client.send_request("GET", "/slow");
  auto head = client.read_head();
  EXPECT_EQ(client.read_chunk(), "data: 0\n\n");
  auto stopped = std::async(std::launch::async, [&] { server.shutdown(5s); });
  EXPECT_TRUE(idle.wait_closed(2s));
  std::string rest;
  while (auto chunk = client.read_chunk()) rest += *chunk;
  EXPECT_EQ(rest,
            "data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\ndata: 5\n\ndata: 6\n\n"
            "data: 7\n\ndata: 8\n\ndata: 9\n\n");
  EXPECT_TRUE(client.wait_closed(2s));  // no keep-alive while stopping
  ASSERT_EQ(stopped.wait_for(3s), std::future_status::ready);
  EXPECT_THROW(TestClient late(port()), std::runtime_error);  // no longer accepting
}

TEST_F(HttpServerTest, ShutdownTimeoutAbortsWhatIsLeft) {
  auto& server = make_server(options());
  auto aborted = std::make_shared<std::atomic<bool>>(false);
  auto kept = std::make_shared<std::promise<std::shared_ptr<Responder>>>();
  server.route("GET", "/forever", [aborted, kept](HttpRequest, std::shared_ptr<Responder> r) {
    kept->set_value(r);  // a dropped Responder would end its stream
    r->on_disconnect([aborted] { *aborted = true; });
    r->start_stream();
    r->write_event("never ends");
  });
  start();
  TestClient client(port());
  client.send_request("GET", "/forever");
  auto head = client.read_head();
  EXPECT_EQ(client.read_chunk(), "data: never ends\n\n");
  const auto t0 = std::chrono::steady_clock::now();
  server.shutdown(200ms);
  EXPECT_TRUE(*aborted);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_TRUE(client.wait_closed(1s));
}

TEST_F(HttpServerTest, ADroppedResponderEndsItsStreamAndPostRunsOnAnIoThread) {
  auto& server = make_server(options());
  server.route("GET", "/drop", [](HttpRequest, std::shared_ptr<Responder> r) {
    r->start_stream();
    r->write_event("only");
  });
  start();
  TestClient client(port());
  client.send_request("GET", "/drop");
  EXPECT_EQ(client.read_response().body, "data: only\n\n");
  std::promise<std::thread::id> ran;
  server.post([&] { ran.set_value(std::this_thread::get_id()); });
  auto id = ran.get_future();
  ASSERT_EQ(id.wait_for(2s), std::future_status::ready);
  EXPECT_NE(id.get(), std::this_thread::get_id());
}

TEST_F(HttpServerTest, ExpectContinueIsAnswered) {
  make_server(options());
  start();
  TestClient client(port());
  client.send(
      "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  auto interim = client.read_head();
  EXPECT_EQ(interim.status, 100);
  client.send("hello");
  EXPECT_EQ(client.read_response().body, "POST /echo hello");
}

TEST_F(HttpServerTest, StartFailsOnABusyPort) {
  make_server(options());
  start();
  HttpServerOptions o = options();
  o.port = port();
  HttpServer second(o);
  // SO_REUSEADDR does not allow two listeners on one port.
  EXPECT_THROW(second.start(), Unavailable);
}

}  // namespace
}  // namespace pagoda::http
