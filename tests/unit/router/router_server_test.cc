// The whole RouterServer in front of in-process fake backends: every wait is on a condition the
// router or a backend reports (bounded by a generous deadline), never on time alone.
#include "router/router_server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "fake_backend.h"
#include "test_client.h"

namespace pagoda::router {
namespace {

using http::testing::ClientResponse;
using http::testing::TestClient;
using testing::FakeBackend;
using testing::RawBackend;
using Json = nlohmann::json;

/// Polls `done` until it holds; false after 20 s (a hang, not a slow machine).
bool eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

RouterOptions options_for(std::vector<std::string> backends) {
  RouterOptions o;
  o.http.port = 0;
  o.backends = std::move(backends);
  o.health_interval = std::chrono::hours(1);  // the first probe only, unless a test wants more
  o.prefix_block_chars = 16;
  return o;
}

ClientResponse post(uint16_t port, std::string_view path, const Json& body,
                    std::string_view extra = "") {
  TestClient client(port);
  client.send_request("POST", path, body.dump(), extra);
  return client.read_response();
}

Json completion(std::string prompt) { return {{"model", "m"}, {"prompt", std::move(prompt)}}; }
Json chat(std::string content) {
  return {{"model", "m"},
          {"stream", true},
          {"messages", {{{"role", "user"}, {"content", std::move(content)}}}}};
}

/// Reads a stream's chunks until its end (or until `until` appears, if given).
std::string read_stream(TestClient& client, std::string_view until = "") {
  std::string body;
  while (until.empty() || body.find(until) == std::string::npos) {
    auto chunk = client.read_chunk();
    if (!chunk) break;
    body += *chunk;
  }
  return body;
}

/// The value of one series on the router's /metrics page (0 when absent).
double metric(uint16_t port, const std::string& series) {
  const std::string page = http::testing::fetch(port, "GET", "/metrics").body;
  const size_t at = page.find("\n" + series + " ");
  if (at == std::string::npos) return 0;
  return std::stod(page.substr(at + series.size() + 2));
}

TEST(RouterServerTest, ForwardsAnswersWithTheAuthorizationHeaderBehindItsOwnKey) {
  FakeBackend a("a"), b("b");
  RouterOptions o = options_for({a.url(), b.url()});
  o.api_key = "secret";
  RouterServer router(o);
  const uint16_t port = router.start();
  EXPECT_EQ(router.num_healthy_backends(), 2u);

  EXPECT_EQ(post(port, "/v1/completions", completion("x")).status, 401);
  EXPECT_EQ(a.posts + b.posts, 0);
  const ClientResponse r =
      post(port, "/v1/completions", completion("hello"), "Authorization: Bearer secret\r\n");
  ASSERT_EQ(r.status, 200) << r.body;
  const Json answer = Json::parse(r.body);
  EXPECT_EQ(answer["authorization"], "Bearer secret");
  EXPECT_EQ(Json::parse(answer["body"].get<std::string>()), completion("hello"));

  TestClient models(port);
  models.send_request("GET", "/v1/models", "", "Authorization: Bearer secret\r\n");
  EXPECT_EQ(models.read_response().status, 200);
  EXPECT_EQ(http::testing::fetch(port, "GET", "/health").status, 200);
  EXPECT_EQ(http::testing::fetch(port, "GET", "/metrics").status, 200);
  for (const FakeBackend* backend : {&a, &b}) {
    EXPECT_EQ(metric(port, "pagoda_router:backend_healthy{backend=\"" + backend->url() + "\"}"), 1);
  }
}

TEST(RouterServerTest, StreamsEachChunkAsItArrives) {
  FakeBackend a("a");
  a.hold = true;
  RouterServer router(options_for({a.url()}));
  const uint16_t port = router.start();
  TestClient client(port);
  client.send_request("POST", "/v1/chat/completions", chat("hi").dump());
  const ClientResponse head = client.read_head();
  ASSERT_EQ(head.status, 200);
  EXPECT_EQ(head.headers.at("content-type"), "text/event-stream");
  // The backend has sent one event and holds the rest: it reaches the client now.
  EXPECT_NE(read_stream(client, "\"n\":1").find("\"n\":1"), std::string::npos);
  ASSERT_EQ(a.num_held(), 1u);
  a.release_all();
  const std::string rest = read_stream(client);
  EXPECT_NE(rest.find("\"n\":2"), std::string::npos);
  EXPECT_NE(rest.find("data: [DONE]"), std::string::npos);
}

TEST(RouterServerTest, AClientLeavingClosesTheBackendRequest) {
  FakeBackend a("a");
  a.hold = true;
  RouterServer router(options_for({a.url()}));
  const uint16_t port = router.start();
  {
    TestClient client(port);
    client.send_request("POST", "/v1/chat/completions", chat("hi").dump());
    ASSERT_EQ(client.read_head().status, 200);
    (void)read_stream(client, "\"n\":1");
  }  // closed mid-stream
  ASSERT_TRUE(eventually([&] { return a.disconnects.load() == 1; }));
  ASSERT_TRUE(eventually([&] {
    return metric(port, "pagoda_router:requests_total{backend=\"" + a.url() +
                            "\",outcome=\"cancelled\"}") == 1;
  }));
  EXPECT_TRUE(eventually([&] {
    return metric(port, "pagoda_router:requests_in_flight{backend=\"" + a.url() + "\"}") == 0;
  }));
}

TEST(RouterServerTest, RetriesAFailureBeforeTheStatusLineAndMarksTheBackendUnhealthy) {
  RawBackend broken(RawBackend::Mode::kCloseBeforeStatus);
  FakeBackend good("good");
  RouterServer router(options_for({broken.url(), good.url()}));
  const uint16_t port = router.start();
  ASSERT_EQ(router.num_healthy_backends(), 2u);  // the broken one passes /health
  for (int i = 0; i < 4; ++i) {
    const ClientResponse r = post(port, "/v1/completions", completion("p" + std::to_string(i)));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(Json::parse(r.body)["backend"], "good");
  }
  EXPECT_EQ(broken.requests, 1);  // then it was out until its next health check
  EXPECT_EQ(router.num_healthy_backends(), 1u);
  EXPECT_EQ(metric(port, "pagoda_router:retries_total{backend=\"" + broken.url() + "\"}"), 1);
  EXPECT_EQ(metric(port, "pagoda_router:backend_healthy{backend=\"" + broken.url() + "\"}"), 0);
  EXPECT_EQ(http::testing::fetch(port, "GET", "/health").status, 200);
}

TEST(RouterServerTest, WithoutRetriesOrBackendsLeftTheClientGetsAClearError) {
  RawBackend broken(RawBackend::Mode::kCloseBeforeStatus);
  RouterOptions o = options_for({broken.url()});
  o.max_retries = 0;
  RouterServer router(o);
  const uint16_t port = router.start();
  ClientResponse r = post(port, "/v1/completions", completion("x"));
  EXPECT_EQ(r.status, 502);
  EXPECT_NE(r.body.find("before any backend answered"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(broken.url()), std::string::npos) << r.body;
  // Marked unhealthy: nothing is left to send to.
  r = post(port, "/v1/completions", completion("x"));
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("no backend is healthy"), std::string::npos) << r.body;
  EXPECT_EQ(http::testing::fetch(port, "GET", "/health").status, 503);
  EXPECT_EQ(metric(port, "pagoda_router:requests_total{backend=\"none\",outcome=\"no_backend\"}"),
            1);
}

TEST(RouterServerTest, AFailureMidStreamEndsItWithAnErrorEventAndDone) {
  RawBackend broken(RawBackend::Mode::kBreakMidStream);
  RouterServer router(options_for({broken.url()}));
  const uint16_t port = router.start();
  TestClient client(port);
  client.send_request("POST", "/v1/chat/completions", chat("hi").dump());
  ASSERT_EQ(client.read_head().status, 200);
  const std::string body = read_stream(client);
  EXPECT_EQ(body.find("data: {\"n\":1}\n\n"), 0u) << body;
  EXPECT_NE(body.find("data: {\"error\""), std::string::npos) << body;
  EXPECT_TRUE(body.ends_with("data: [DONE]\n\n")) << body;
  EXPECT_EQ(metric(port, "pagoda_router:requests_total{backend=\"" + broken.url() +
                             "\",outcome=\"broken\"}"),
            1);
}

TEST(RouterServerTest, HealthChecksTakeABackendOutAndBringItBack) {
  FakeBackend a("a");
  a.health_status = 503;
  RouterOptions o = options_for({a.url()});
  o.health_interval = std::chrono::milliseconds(20);
  RouterServer router(o);
  const uint16_t port = router.start();
  EXPECT_EQ(router.num_healthy_backends(), 0u);
  EXPECT_EQ(http::testing::fetch(port, "GET", "/health").status, 503);
  EXPECT_EQ(post(port, "/v1/completions", completion("x")).status, 503);
  EXPECT_EQ(a.posts, 0);

  a.health_status = 200;
  ASSERT_TRUE(eventually([&] { return router.num_healthy_backends() == 1; }));
  EXPECT_EQ(http::testing::fetch(port, "GET", "/health").status, 200);
  EXPECT_EQ(post(port, "/v1/completions", completion("x")).status, 200);
  EXPECT_EQ(a.posts, 1);

  a.health_status = 500;
  ASSERT_TRUE(eventually([&] { return router.num_healthy_backends() == 0; }));
}

TEST(RouterServerTest, AHotPrefixStaysOnOneBackendUntilItsLoadExceedsTheThreshold) {
  FakeBackend a("a"), b("b");
  a.hold = b.hold = true;
  RouterOptions o = options_for({a.url(), b.url()});
  o.policy.balance_abs_threshold = 2;
  o.policy.balance_rel_threshold = 1;
  RouterServer router(o);
  const uint16_t port = router.start();
  const std::string prompt(64, 'p');  // 4 blocks of 16 characters
  // One at a time, each held open: the in-flight counts the router sees are exact.
  std::vector<TestClient> clients;
  std::vector<std::string> order;
  for (size_t i = 1; i <= 6; ++i) {
    clients.emplace_back(port);
    clients.back().send_request("POST", "/v1/chat/completions", chat(prompt).dump());
    ASSERT_TRUE(eventually([&] { return a.num_held() + b.num_held() == i; }));
  }
  // The first three share a backend (in flight 0, 1, 2: not more than 2 above the other's 0);
  // the fourth spills over, and the other backend then holds the prefix as well.
  EXPECT_EQ(a.num_held(), 3u);
  EXPECT_EQ(b.num_held(), 3u);
  EXPECT_EQ(metric(port, "pagoda_router:routed_requests_total{backend=\"" + a.url() +
                             "\",reason=\"load_balanced\"}") +
                metric(port, "pagoda_router:routed_requests_total{backend=\"" + b.url() +
                                 "\",reason=\"load_balanced\"}"),
            1);
  a.release_all();
  b.release_all();
  for (TestClient& c : clients) {
    ASSERT_EQ(c.read_head().status, 200);
    EXPECT_NE(read_stream(c).find("[DONE]"), std::string::npos);
  }
}

TEST(RouterServerTest, ThreeHundredStreamsAtOnce) {
  http::raise_open_file_limit();
  FakeBackend a("a");
  a.hold = true;
  RouterServer router(options_for({a.url()}));
  const uint16_t port = router.start();
  constexpr size_t kStreams = 300;
  std::vector<TestClient> clients;
  for (size_t i = 0; i < kStreams; ++i) {
    clients.emplace_back(port);
    clients.back().send_request("POST", "/v1/chat/completions", chat(std::to_string(i)).dump());
  }
  // All of them open at the backend at once: the router's threads wait on none of them.
  ASSERT_TRUE(eventually([&] { return a.num_held() == kStreams; })) << a.num_held();
  EXPECT_EQ(metric(port, "pagoda_router:requests_in_flight{backend=\"" + a.url() + "\"}"),
            kStreams);
  a.release_all();
  for (TestClient& c : clients) {
    ASSERT_EQ(c.read_head().status, 200);
    EXPECT_NE(read_stream(c).find("[DONE]"), std::string::npos);
  }
  EXPECT_TRUE(eventually([&] {
    return metric(port, "pagoda_router:requests_total{backend=\"" + a.url() +
                            "\",outcome=\"success\"}") == kStreams;
  }));
}

TEST(RouterServerTest, BadOptionsAreRefusedByName) {
  EXPECT_THROW(RouterServer(options_for({})), InvalidArgument);
  EXPECT_THROW(RouterServer(options_for({"https://a:1"})), InvalidArgument);
  EXPECT_THROW(RouterServer(options_for({"http://a:1", "http://a:1/"})), InvalidArgument);
  RouterOptions o = options_for({"http://a:1"});
  o.max_retries = -1;
  EXPECT_THROW(RouterServer{o}, InvalidArgument);
}

}  // namespace
}  // namespace pagoda::router
