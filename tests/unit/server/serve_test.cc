// The whole server on the demo model (stories260K), over raw HTTP: authentication, a completion,
// a streamed chat, the small endpoints, and a client leaving mid-stream (its requests aborted).
// To add a case: use the fixture's port() with TestClient or fetch(); requests to /v1 need the
// Authorization line kAuth.
#include <gtest/gtest.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "engine/engine_core.h"
#include "http/test_client.h"
#include "server/server.h"

namespace pagoda::server {
namespace {

using namespace std::chrono_literals;
using http::testing::TestClient;
using nlohmann::json;

constexpr std::string_view kAuth = "Authorization: Bearer s3cret\r\n";

class ServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineArgs args;
    args.model = PAGODA_SOURCE_DIR "/models/stories260K";
    args.device = "cpu";  // exact CPU texts, also on the device machine
    args.kv_cache_memory_bytes = int64_t{64} << 20;
    args.num_threads = 2;
    engine_ = new EngineCore(args);
    ServerOptions options;
    options.http.port = 0;
    options.served_model_names = {"stories"};
    options.api_key = "s3cret";
    options.vocab_size = engine_->vocab_size();
    server_ = new Server(*engine_, options);
    server_->start();
  }
  static void TearDownTestSuite() {
    server_->shutdown(1s);
    engine_->shutdown();
    delete server_;
    delete engine_;
  }
  static uint16_t port() { return server_->port(); }

  /// The value of a counter line of /metrics ("name{labels} value"), or -1.
  static double metric(const std::string& series) {
    auto page = http::testing::fetch(port(), "GET", "/metrics").body;
    auto at = page.find(series + " ");
    return at == std::string::npos ? -1 : std::stod(page.substr(at + series.size() + 1));
  }

  static EngineCore* engine_;
  static Server* server_;
};
EngineCore* ServeTest::engine_ = nullptr;
Server* ServeTest::server_ = nullptr;

TEST_F(ServeTest, V1RoutesNeedTheApiKey) {
  TestClient client(port());
  client.send_request("GET", "/v1/models");
  auto r = client.read_response();
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], 401);
  client.send_request("GET", "/v1/models", "", "Authorization: Bearer s3creT\r\n");
  EXPECT_EQ(client.read_response().status, 401);
  client.send_request("GET", "/v1/models", "", kAuth);
  r = client.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["data"][0]["id"], "stories");
  // The operational routes stay open.
  EXPECT_EQ(http::testing::fetch(port(), "GET", "/health").status, 200);
  EXPECT_EQ(http::testing::fetch(port(), "GET", "/version").status, 200);
}

// Without the key, a path with no route (or the wrong method) is a 401 as well: the answer must
// not tell which paths exist. With the key it is the 404 (405).
TEST_F(ServeTest, UnknownV1PathsAre401BeforeTheyAre404) {
  TestClient client(port());
  client.send_request("GET", "/v1/no-such-thing");
  EXPECT_EQ(client.read_response().status, 401);
  client.send_request("DELETE", "/v1/models");
  EXPECT_EQ(client.read_response().status, 401);
  client.send_request("GET", "/v1/no-such-thing", "", kAuth);
  EXPECT_EQ(client.read_response().status, 404);
  client.send_request("DELETE", "/v1/models", "", kAuth);
  EXPECT_EQ(client.read_response().status, 405);
  // Every path but /health, /ping, /version and /metrics needs the key, unknown ones too.
  EXPECT_EQ(http::testing::fetch(port(), "GET", "/no-such-thing").status, 401);
  client.send_request("GET", "/no-such-thing", "", kAuth);
  EXPECT_EQ(client.read_response().status, 404);
}

TEST_F(ServeTest, CompletionAndErrors) {
  TestClient client(port());
  client.send_request("POST", "/v1/completions",
                      R"({"model": "stories", "prompt": "Once upon a time", "max_tokens": 8,
                          "temperature": 0})",
                      kAuth);
  auto r = client.read_response();
  ASSERT_EQ(r.status, 200) << r.body;
  auto body = json::parse(r.body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_FALSE(body["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 8);
  // Two prompts x n=2 map onto one response of four choices.
  client.send_request("POST", "/v1/completions",
                      R"({"prompt": ["a", "b"], "n": 2, "max_tokens": 2})", kAuth);
  r = client.read_response();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["choices"].size(), 4u);
  // Bad requests are a 400 naming the field, an unknown model a 404; the connection lives on.
  client.send_request("POST", "/v1/completions", R"({"prompt": "a", "max_tokens": -1})", kAuth);
  r = client.read_response();
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "max_tokens");
  client.send_request("POST", "/v1/completions", R"({"model": "gpt-4", "prompt": "a"})", kAuth);
  EXPECT_EQ(client.read_response().status, 404);
  client.send_request("POST", "/v1/completions", "{not json", kAuth);
  EXPECT_EQ(client.read_response().status, 400);
  client.send_request("GET", "/v1/completions", "", kAuth);
  EXPECT_EQ(client.read_response().status, 405);
}

TEST_F(ServeTest, StreamedChat) {
  TestClient client(port());
  client.send_request("POST", "/v1/chat/completions",
                      R"({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6,
                          "stream": true, "stream_options": {"include_usage": true}})",
                      kAuth);
  auto head = client.read_head();
  ASSERT_EQ(head.status, 200);
  EXPECT_EQ(head.headers["content-type"], "text/event-stream");
  std::string body;
  while (auto chunk = client.read_chunk()) body += *chunk;
  ASSERT_TRUE(body.ends_with("data: [DONE]\n\n")) << body;
  std::string text, finish;
  int events = 0;
  for (size_t at = 0; (at = body.find("data: {", at)) != std::string::npos;) {
    const size_t end = body.find("\n\n", at);
    auto event = json::parse(body.substr(at + 6, end - at - 6));
    ++events;
    EXPECT_EQ(event["object"], "chat.completion.chunk");
    if (!event["choices"].empty()) {
      const auto& choice = event["choices"][0];
      if (choice["delta"].contains("content")) text += choice["delta"]["content"];
      if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    } else {
      EXPECT_EQ(event["usage"]["completion_tokens"], 6);
    }
    at = end;
  }
  EXPECT_GE(events, 3);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(finish, "length");
  // Keep-alive after a stream.
  client.send_request("POST", "/tokenize", R"({"prompt": "Once upon"})", kAuth);
  auto r = client.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["count"], 3);
}

TEST_F(ServeTest, ClientLeavingMidStreamAbortsItsRequests) {
  const std::string aborted =
      R"(pagoda:request_success_total{model_name="stories",engine="0",finished_reason="abort"})";
  const double before = metric(aborted);
  {
    TestClient client(port());
    client.send_request("POST", "/v1/completions",
                        R"({"prompt": "Once", "max_tokens": 400, "n": 16, "ignore_eos": true,
                            "stream": true})",
                        kAuth);
    auto head = client.read_head();
    ASSERT_EQ(head.status, 200);
    ASSERT_TRUE(client.read_chunk().has_value());
  }  // closed after the first chunk
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (metric(aborted) < before + 16 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(metric(aborted), before + 16);
  EXPECT_EQ(engine_->stats().num_running, 0);
  EXPECT_EQ(engine_->stats().kv_cache_usage, 0);
}

TEST_F(ServeTest, MetricsPage) {
  auto r = http::testing::fetch(port(), "GET", "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(r.body.find("pagoda:time_to_first_token_seconds_bucket"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::server
