// The bench serve client's pure parts: SSE framing, stream chunks, /metrics parsing, base URLs, and
// the statistics and report of vLLM's benchmark. To add a case, add a TEST with its input and the
// value vLLM (numpy, Python formatting) gives for it.
#include <gtest/gtest.h>

#include <cmath>

#include "core/status.h"
#include "server/client/bench_metrics.h"
#include "server/client/http_client.h"
#include "server/client/prometheus.h"
#include "server/client/sse.h"

namespace pagoda::client {
namespace {

TEST(SseParserTest, SplitsEventsAcrossArbitraryFeeds) {
  const std::string stream =
      "data: {\"a\":1}\n\n: keep-alive comment\n\ndata:{\"b\":2}\r\n\r\n"
      "event: x\ndata: line1\ndata: line2\n\nid: 7\n\ndata: [DONE]\r\r";
  const std::vector<std::string> expected = {"{\"a\":1}", "{\"b\":2}", "line1\nline2", "[DONE]"};
  for (size_t split = 1; split <= stream.size(); ++split) {  // every chunking, down to 1 byte
    SseParser p;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); i += split) {
      for (auto& e : p.feed(std::string_view(stream).substr(i, split))) got.push_back(e);
    }
    EXPECT_EQ(got, expected) << "split " << split;
  }
}

TEST(SseParserTest, HoldsAnUnfinishedEvent) {
  SseParser p;
  EXPECT_TRUE(p.feed("data: partial").empty());
  EXPECT_TRUE(p.feed("\n").empty());
  EXPECT_EQ(p.feed("\n"), std::vector<std::string>{"partial"});
}

TEST(StreamChunkTest, CompletionChunksTimeTokensAndReadUsage) {
  StreamResult r;
  r.start_time = 1.0;
  double last = 0;
  EXPECT_TRUE(apply_stream_chunk(R"({"choices":[{"index":0,"text":"Hel"}]})", 1.5, r, last));
  EXPECT_TRUE(apply_stream_chunk(R"({"choices":[{"index":0,"text":"lo"}]})", 1.75, r, last));
  EXPECT_TRUE(apply_stream_chunk(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})",
                                 2.0, r, last));
  EXPECT_TRUE(apply_stream_chunk(
      R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}})", 2.5,
      r, last));
  EXPECT_DOUBLE_EQ(r.ttft, 0.5);
  EXPECT_EQ(r.itl, (std::vector<double>{0.25, 0.25}));
  EXPECT_DOUBLE_EQ(last, 2.0);  // the usage chunk does not count as a token
  EXPECT_EQ(r.generated_text, "Hello");
  EXPECT_EQ(r.prompt_tokens, 5);
  EXPECT_EQ(r.output_tokens, 3);
}

TEST(StreamChunkTest, ChatChunksReadTheDelta) {
  StreamResult r;
  double last = 0;
  // The opening role delta carries no token: TTFT starts at the first content.
  EXPECT_TRUE(apply_stream_chunk(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})",
                                 0.1, r, last));
  EXPECT_EQ(last, 0);
  EXPECT_TRUE(apply_stream_chunk(R"({"choices":[{"delta":{"content":"Hi"}}]})", 0.3, r, last));
  EXPECT_TRUE(apply_stream_chunk(R"({"choices":[{"delta":{"content":null},"finish_reason":null}]})",
                                 0.35, r, last));
  EXPECT_TRUE(
      apply_stream_chunk(R"({"choices":[{"delta":{},"finish_reason":"stop"}]})", 0.4, r, last));
  EXPECT_DOUBLE_EQ(r.ttft, 0.3);
  ASSERT_EQ(r.itl.size(), 1u);  // the finish chunk
  EXPECT_NEAR(r.itl[0], 0.1, 1e-12);
  EXPECT_EQ(r.generated_text, "Hi");
  EXPECT_EQ(r.output_tokens, -1);
}

TEST(StreamChunkTest, ErrorEventsAndGarbageFail) {
  StreamResult r;
  double last = 0;
  EXPECT_FALSE(apply_stream_chunk(R"({"error":{"message":"boom","code":500}})", 0.1, r, last));
  EXPECT_NE(r.error.find("boom"), std::string::npos);
  StreamResult g;
  EXPECT_FALSE(apply_stream_chunk("not json", 0.1, g, last));
  EXPECT_FALSE(g.error.empty());
}

TEST(PrometheusTest, ParsesLabelsEscapesAndSpecialValues) {
  const auto samples = parse_prometheus_text(
      "# HELP x help\n# TYPE x counter\n"
      "pagoda:prefix_cache_hits_total{model_name=\"a\\\"b\\\\c\\nd\",engine=\"0\"} 12.0\n"
      "pagoda:prefix_cache_hits_total{model_name=\"other\"} 3\n"
      "h_bucket{le=\"+Inf\"} 4 1700000000\n"
      "g NaN\n\n");
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_EQ(samples[0].labels[0].second, "a\"b\\c\nd");
  EXPECT_EQ(samples[0].labels[1], (std::pair<std::string, std::string>{"engine", "0"}));
  EXPECT_EQ(samples[2].labels[0].second, "+Inf");
  EXPECT_EQ(samples[2].value, 4);
  EXPECT_TRUE(std::isnan(samples[3].value));
  bool found = false;
  EXPECT_EQ(sum_samples(samples, "pagoda:prefix_cache_hits_total", &found), 15);
  EXPECT_TRUE(found);
  EXPECT_EQ(sum_samples(samples, "vllm:prefix_cache_hits_total", &found), 0);
  EXPECT_FALSE(found);
  EXPECT_THROW((void)parse_prometheus_text("x{a=\"1} 2\n"), InvalidArgument);
  EXPECT_THROW((void)parse_prometheus_text("x 2abc\n"), InvalidArgument);
  EXPECT_THROW((void)parse_prometheus_text("x\n"), InvalidArgument);
}

TEST(BaseUrlTest, SplitsHostPortAndPath) {
  Endpoint e = parse_base_url("http://127.0.0.1:8000");
  EXPECT_EQ(e.host, "127.0.0.1");
  EXPECT_EQ(e.port, "8000");
  EXPECT_EQ(e.base_path, "");
  e = parse_base_url("http://example.com/api/");
  EXPECT_EQ(e.host, "example.com");
  EXPECT_EQ(e.port, "80");
  EXPECT_EQ(e.base_path, "/api");
  e = parse_base_url("http://[::1]:9000");
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, "9000");
  EXPECT_THROW((void)parse_base_url("https://x:1"), InvalidArgument);
  EXPECT_THROW((void)parse_base_url("http://:80"), InvalidArgument);
  EXPECT_THROW((void)parse_base_url("http://x:8a"), InvalidArgument);
}

TEST(BenchMetricsTest, PercentilesAndStdAreNumpys) {
  // numpy.percentile([1, 2, 3, 4], 99) == 3.97, median 2.5, std (ddof=0) sqrt(1.25).
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  const Summary s = summarize_seconds({0.001, 0.002, 0.003, 0.004});
  EXPECT_DOUBLE_EQ(s.mean_ms, 2.5);
  EXPECT_NEAR(s.std_ms, std::sqrt(1.25), 1e-12);
  ASSERT_EQ(s.percentiles_ms.size(), 1u);  // vLLM's default: 99
  EXPECT_EQ(s.percentiles_ms[0].first, 99);
  EXPECT_NEAR(s.percentiles_ms[0].second, 3.97, 1e-12);
  const Summary empty = summarize_seconds({});
  EXPECT_EQ(empty.mean_ms, 0);
  EXPECT_EQ(empty.percentiles_ms, (std::vector<std::pair<double, double>>{{99, 0}}));
}

TEST(BenchMetricsTest, ChosenPercentilesAreNumpys) {
  // numpy.percentile([10, 20, 30, 40, 50], [25, 50, 99, 99.9]) = 20, 30, 49.6, 49.96 (ms here).
  const Summary s = summarize_seconds({0.05, 0.01, 0.04, 0.02, 0.03}, {25, 50, 99, 99.9});
  ASSERT_EQ(s.percentiles_ms.size(), 4u);
  const double expected[] = {20, 30, 49.6, 49.96};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(s.percentiles_ms[i].second, expected[i], 1e-9) << i;
  EXPECT_EQ(s.percentiles_ms[3].first, 99.9);
  EXPECT_EQ(percentile_word(99), "99");
  EXPECT_EQ(percentile_word(25.0), "25");
  EXPECT_EQ(percentile_word(99.9), "99.9");
  EXPECT_EQ(percentile_word(0), "0");
}

TEST(BenchMetricsTest, ParsesTheReportFlagsAndNamesThemWhenWrong) {
  EXPECT_EQ(parse_percentile_metrics("ttft,tpot,itl"),
            (std::vector<std::string>{"ttft", "tpot", "itl"}));
  EXPECT_EQ(parse_percentile_metrics("e2el,ttft"), (std::vector<std::string>{"e2el", "ttft"}));
  EXPECT_EQ(parse_metric_percentiles("25,50,99"), (std::vector<double>{25, 50, 99}));
  EXPECT_EQ(parse_metric_percentiles("0,99.9,100"), (std::vector<double>{0, 99.9, 100}));
  const GoodputSlos g = parse_goodput({"ttft:500", "tpot:50", "e2el:1000.5"});
  EXPECT_EQ(g.ttft_ms, 500);
  EXPECT_EQ(g.tpot_ms, 50);
  EXPECT_EQ(g.e2el_ms, 1000.5);
  EXPECT_TRUE(parse_goodput({}).empty());
  auto names = [](auto parse, const std::string& flag) {
    try {
      parse();
    } catch (const InvalidArgument& e) {
      return std::string(e.what()).starts_with(flag);
    }
    return false;
  };
  for (const char* bad : {"ttft,xyz", "", "ttft,", "ttft,ttft", "TTFT"}) {
    EXPECT_TRUE(names([&] { (void)parse_percentile_metrics(bad); }, "--percentile-metrics")) << bad;
  }
  for (const char* bad : {"101", "-1", "x", "50,", "", "nan", "99%"}) {
    EXPECT_TRUE(names([&] { (void)parse_metric_percentiles(bad); }, "--metric-percentiles")) << bad;
  }
  for (const char* bad : {"ttft", "ttft:", "ttft:x", "itl:5", "ttft:-1", ":5"}) {
    EXPECT_TRUE(names([&] { (void)parse_goodput({bad}); }, "--goodput")) << bad;
  }
  EXPECT_TRUE(names([&] { (void)parse_goodput({"ttft:1", "ttft:2"}); }, "--goodput"));
}

StreamResult ok(double start, double ttft, std::vector<double> itl, int64_t out, int64_t in) {
  StreamResult r;
  r.success = true;
  r.start_time = start;
  r.ttft = ttft;
  r.itl = std::move(itl);
  double latency = ttft;
  for (double g : r.itl) latency += g;
  r.latency = latency;
  r.output_tokens = out;
  r.prompt_tokens = in;
  return r;
}

TEST(BenchMetricsTest, ThroughputTpotAndPeaks) {
  std::vector<StreamResult> rs = {
      ok(0.0, 0.5, {0.25, 0.25}, 3, 10),  // [0, 1.0): tokens at 0.5, 0.75, 1.0
      ok(0.5, 0.5, {1.0}, 2, 20),         // [0.5, 2.0): tokens at 1.0, 2.0
      ok(1.0, 0.2, {}, 1, -1),            // [1.0, 1.2): its prompt length comes from the request
  };
  StreamResult failed;
  failed.error = "HTTP 500";
  rs.push_back(failed);
  const BenchmarkMetrics m = calculate_metrics(rs, {10, 20, 30, 40}, 4.0);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 60);
  EXPECT_EQ(m.total_output, 6);
  EXPECT_DOUBLE_EQ(m.request_throughput, 0.75);
  EXPECT_DOUBLE_EQ(m.output_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 16.5);
  EXPECT_EQ(m.output_lens, (std::vector<int64_t>{3, 2, 1, 0}));
  // TPOT only for requests with more than one token: (1.0-0.5)/2 and (1.5-0.5)/1.
  EXPECT_DOUBLE_EQ(m.tpot.mean_ms, (250.0 + 1000.0) / 2);
  EXPECT_DOUBLE_EQ(m.ttft.median_ms, 500);
  EXPECT_DOUBLE_EQ(m.e2el.mean_ms, (1000.0 + 1500.0 + 200.0) / 3);
  EXPECT_DOUBLE_EQ(m.itl.mean_ms, (250.0 + 250.0 + 1000.0) / 3);
  // Second 0 holds tokens at 0.5 and 0.75; second 1 those at 1.0 (twice) and 1.2; second 2: 2.0.
  EXPECT_EQ(m.max_output_tokens_per_s, 3);
  // [0,1) and [0.5,2) overlap; [1.0,1.2) starts when the first ends (half-open): peak 2.
  EXPECT_EQ(m.max_concurrent_requests, 2);
}

TEST(BenchMetricsTest, GoodputCountsTheRequestsThatMeetEveryObjective) {
  // (ttft, gaps): TTFT ms, TPOT ms = (latency - ttft) / (tokens - 1), E2EL ms.
  std::vector<StreamResult> rs = {
      ok(0, 0.1, {0.02, 0.02}, 3, 8),  // 100, 20, 140: good
      ok(0, 0.6, {0.02, 0.02}, 3, 8),  // 600: TTFT too long
      ok(0, 0.1, {0.08, 0.08}, 3, 8),  // TPOT 80: too slow
      ok(0, 0.3, {}, 1, 8),            // one token: TPOT 0, 300: good
      ok(0, 0.5, {0.02}, 2, 8),        // exactly at the objectives (500, 20): good
  };
  MetricsConfig config;
  config.goodput = parse_goodput({"ttft:500", "tpot:50"});
  BenchmarkMetrics m = calculate_metrics(rs, {}, 2.0, config);
  EXPECT_EQ(m.good_completed, 3);
  EXPECT_DOUBLE_EQ(m.request_goodput, 1.5);
  config.goodput = parse_goodput({"e2el:200"});
  m = calculate_metrics(rs, {}, 2.0, config);
  EXPECT_EQ(m.good_completed, 1);  // only the first ends within 200 ms
  config.goodput = {};
  EXPECT_EQ(calculate_metrics(rs, {}, 2.0, config).good_completed, 0);
  // Failures are never good.
  StreamResult failed;
  rs = {failed};
  config.goodput = parse_goodput({"ttft:1000000"});
  EXPECT_EQ(calculate_metrics(rs, {0}, 1.0, config).good_completed, 0);
}

TEST(BenchMetricsTest, ReportPrintsTheChosenMetricsAndPercentiles) {
  std::vector<StreamResult> rs = {ok(0, 0.1, {0.01, 0.01}, 3, 8), ok(0, 0.3, {0.01}, 2, 8)};
  MetricsConfig config;
  config.percentiles = {25, 99.9};
  config.goodput = parse_goodput({"ttft:200"});
  const BenchmarkMetrics m = calculate_metrics(rs, {8, 8}, 2.0, config);
  ReportHeader h;
  h.request_rate = INFINITY;
  h.duration_s = 2.0;
  h.goodput = true;
  h.percentile_metrics = {"e2el", "ttft"};  // printed in vLLM's order: TTFT first
  const std::string report = format_report(m, h, std::nullopt);
  EXPECT_NE(report.find("Request throughput (req/s):              1.00      \n"
                        "Request goodput (req/s):                 0.50      \n"),
            std::string::npos)
      << report;
  EXPECT_LT(report.find("Time to First Token"), report.find("End-to-end Latency"));
  EXPECT_EQ(report.find("TPOT"), std::string::npos);
  EXPECT_EQ(report.find("ITL"), std::string::npos);
  EXPECT_NE(report.find("P25 TTFT (ms):                           150.00    \n"),
            std::string::npos);
  EXPECT_NE(report.find("P99.9 TTFT (ms):"), std::string::npos);
  EXPECT_NE(report.find("P25 E2EL (ms):"), std::string::npos);
  EXPECT_EQ(report.find("P99 "), std::string::npos);
  h.goodput = false;
  EXPECT_EQ(format_report(m, h, std::nullopt).find("goodput"), std::string::npos);
}

TEST(BenchMetricsTest, ReportHasVllmsLayout) {
  std::vector<StreamResult> rs = {ok(0, 0.1, {0.01, 0.01}, 3, 8)};
  const BenchmarkMetrics m = calculate_metrics(rs, {8}, 1.0);
  ReportHeader h;
  h.request_rate = INFINITY;
  h.duration_s = 1.0;
  const std::string plain = format_report(m, h, std::nullopt);
  EXPECT_EQ(plain.substr(0, 51), "============ Serving Benchmark Result ============\n");
  EXPECT_NE(plain.find("Successful requests:                     1         \n"), std::string::npos);
  EXPECT_NE(plain.find("Benchmark duration (s):                  1.00      \n"), std::string::npos);
  EXPECT_NE(plain.find("---------------Time to First Token----------------\n"), std::string::npos);
  EXPECT_NE(plain.find("-----Time per Output Token (excl. 1st token)------\n"), std::string::npos);
  EXPECT_NE(plain.find("Mean TTFT (ms):                          100.00    \n"), std::string::npos);
  EXPECT_NE(plain.find("P99 ITL (ms):                            10.00     \n"), std::string::npos)
      << plain;
  EXPECT_EQ(plain.find("E2EL"), std::string::npos) << "vLLM's default: ttft,tpot,itl";
  h.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  EXPECT_NE(format_report(m, h, std::nullopt)
                .find("P99 E2EL (ms):                           120.00    \n"),
            std::string::npos);
  EXPECT_EQ(plain.find("Request rate configured"), std::string::npos);
  EXPECT_EQ(plain.find("Prefix cache"), std::string::npos);
  EXPECT_EQ(plain.substr(plain.size() - 51), std::string(50, '=') + "\n");

  h.request_rate = 4;
  h.max_concurrency = 8;
  const std::string full = format_report(m, h, PrefixCacheDelta{200, 50});
  EXPECT_NE(full.find("Maximum request concurrency:             8         \n"), std::string::npos);
  EXPECT_NE(full.find("Request rate configured (RPS):           4.00      \n"), std::string::npos);
  EXPECT_NE(full.find("Prefix cache hit rate (%):               25.00     \n"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::client
