// run_streaming_load against a small fake OpenAI server on loopback (one thread per connection,
// chunked SSE with pauses between events): timing, concurrency limit, arrival rate and failures.
// To add a case, give the fake server a new path and assert on the StreamResults.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "server/client/http_client.h"

namespace pagoda::client {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

/// Streams max_tokens one-character chunks 5 ms apart after a 30 ms "prefill"; /fail answers 500
/// and /truncate drops the connection after two chunks.
class FakeServer {
 public:
  FakeServer() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    thread_ = std::thread([this] { accept_loop(); });
  }
  ~FakeServer() {
    stopping_ = true;
    boost::system::error_code ec;
    tcp::socket poke(io_);
    poke.connect(acceptor_.local_endpoint(), ec);  // wakes accept()
    thread_.join();
    for (auto& t : sessions_) t.join();
  }
  [[nodiscard]] Endpoint endpoint() const {
    return {"127.0.0.1", std::to_string(acceptor_.local_endpoint().port()), ""};
  }
  [[nodiscard]] int peak() const { return peak_; }

 private:
  void accept_loop() {
    while (true) {
      tcp::socket s(io_);
      boost::system::error_code ec;
      acceptor_.accept(s, ec);
      if (stopping_ || ec) return;
      sessions_.emplace_back([this, s = std::move(s)]() mutable { serve(std::move(s)); });
    }
  }
  static void write_chunk(tcp::socket& s, const std::string& data) {
    const std::string event = "data: " + data + "\n\n";
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", event.size());
    asio::write(s, asio::buffer(std::string(size) + event + "\r\n"));
  }
  void serve(tcp::socket s) {
    // A request stops counting as in flight before its last bytes go out: the client may start
    // its next request as soon as it reads them, before this thread gets to run again.
    bool counted = true;
    auto done = [&] {
      if (std::exchange(counted, false)) --current_;
    };
    const int now = ++current_;
    for (int p = peak_; now > p && !peak_.compare_exchange_weak(p, now);) {
    }
    try {
      boost::beast::flat_buffer buffer;
      http::request<http::string_body> req;
      http::read(s, buffer, req);
      if (req.target() == "/fail") {
        done();
        asio::write(s, asio::buffer(std::string(
                           "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nboom")));
      } else {
        const int n = nlohmann::json::parse(req.body()).at("max_tokens").get<int>();
        asio::write(s, asio::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Type: "
                                                "text/event-stream\r\nTransfer-Encoding: "
                                                "chunked\r\n\r\n")));
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        for (int i = 0; i < n; ++i) {
          if (req.target() == "/truncate" && i == 2) throw std::runtime_error("drop");
          write_chunk(s, R"({"choices":[{"index":0,"text":"x"}]})");
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        write_chunk(s, R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})");
        write_chunk(s, R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":)" +
                           std::to_string(n) + "}}");
        done();
        write_chunk(s, "[DONE]");
        asio::write(s, asio::buffer(std::string("0\r\n\r\n")));
      }
    } catch (const std::exception&) {
    }
    boost::system::error_code ec;
    s.shutdown(tcp::socket::shutdown_both, ec);
    done();
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  std::vector<std::thread> sessions_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> current_{0}, peak_{0};
};

std::vector<StreamRequest> requests(int count, const std::string& path, int max_tokens) {
  const std::string body = R"({"stream":true,"max_tokens":)" + std::to_string(max_tokens) + "}";
  return std::vector<StreamRequest>(count, StreamRequest{path, body});
}

TEST(LoadTest, StreamsEveryRequestAndTimesItsChunks) {
  FakeServer server;
  LoadOptions o;
  o.num_threads = 2;
  const LoadResult r = run_streaming_load(server.endpoint(), requests(12, "/v1/completions", 6), o);
  ASSERT_EQ(r.results.size(), 12u);
  for (const StreamResult& s : r.results) {
    ASSERT_TRUE(s.success) << s.error;
    EXPECT_EQ(s.output_tokens, 6);
    EXPECT_EQ(s.prompt_tokens, 7);
    EXPECT_EQ(s.generated_text, "xxxxxx");
    EXPECT_GE(s.ttft, 0.025);                  // the fake prefill
    EXPECT_EQ(s.itl.size(), 6u);               // 5 gaps between tokens + the finish chunk
    EXPECT_GE(s.latency, s.ttft + 5 * 0.004);  // the pauses between tokens
  }
  EXPECT_GE(server.peak(), 6);  // inf rate, no limit: they overlap
  EXPECT_GT(r.duration_s, 0.05);
}

TEST(LoadTest, RespectsMaxConcurrency) {
  FakeServer server;
  LoadOptions o;
  o.max_concurrency = 3;
  o.num_threads = 2;
  const LoadResult r = run_streaming_load(server.endpoint(), requests(15, "/v1/completions", 3), o);
  for (const StreamResult& s : r.results) EXPECT_TRUE(s.success) << s.error;
  EXPECT_LE(server.peak(), 3);
  EXPECT_GE(server.peak(), 2);
}

TEST(LoadTest, PoissonArrivalsSpreadTheStarts) {
  FakeServer server;
  LoadOptions o;
  o.request_rate = 40;
  o.seed = 3;
  const LoadResult r = run_streaming_load(server.endpoint(), requests(10, "/v1/completions", 1), o);
  double last_start = 0;
  for (const StreamResult& s : r.results) {
    EXPECT_TRUE(s.success) << s.error;
    EXPECT_GE(s.start_time, last_start);  // released in order
    last_start = s.start_time;
  }
  // Nine gaps of mean 25 ms: far from an instant burst (the chance of < 40 ms is ~1e-5).
  EXPECT_GT(last_start, 0.04);
}

TEST(LoadTest, ReportsHttpErrorsAndTruncatedStreams) {
  FakeServer server;
  std::vector<StreamRequest> reqs = requests(1, "/fail", 3);
  reqs.push_back(requests(1, "/truncate", 5).front());
  reqs.push_back(requests(1, "/v1/completions", 2).front());
  const LoadResult r = run_streaming_load(server.endpoint(), reqs, LoadOptions{});
  EXPECT_FALSE(r.results[0].success);
  EXPECT_NE(r.results[0].error.find("HTTP 500"), std::string::npos) << r.results[0].error;
  EXPECT_NE(r.results[0].error.find("boom"), std::string::npos);
  EXPECT_FALSE(r.results[1].success);
  EXPECT_FALSE(r.results[1].error.empty());
  EXPECT_TRUE(r.results[2].success) << r.results[2].error;
}

TEST(LoadTest, FailsEveryRequestWhenNothingListens) {
  Endpoint dead;
  {
    FakeServer server;
    dead = server.endpoint();
  }
  const LoadResult r = run_streaming_load(dead, requests(3, "/v1/completions", 1), LoadOptions{});
  for (const StreamResult& s : r.results) {
    EXPECT_FALSE(s.success);
    EXPECT_FALSE(s.error.empty());
  }
}

}  // namespace
}  // namespace pagoda::client
