// ServingMetrics: the rendered /metrics page, read back with a strict exposition parser. To add a
// case for a new series, extend kFamilies (name, type) and check its values in a test below.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "core/status.h"
#include "exposition_parser.h"

namespace pagoda::server {
namespace {

using testing::Family;
using testing::parse_exposition;

struct Expected {
  const char* name;
  const char* type;
};
constexpr Expected kFamilies[] = {
    {"num_requests_running", "gauge"},
    {"num_requests_waiting", "gauge"},
    {"kv_cache_usage_perc", "gauge"},
    {"prefix_cache_queries_total", "counter"},
    {"prefix_cache_hits_total", "counter"},
    {"num_preemptions_total", "counter"},
    {"prompt_tokens_total", "counter"},
    {"generation_tokens_total", "counter"},
    {"request_success_total", "counter"},
    {"time_to_first_token_seconds", "histogram"},
    {"inter_token_latency_seconds", "histogram"},
    {"e2e_request_latency_seconds", "histogram"},
    {"request_queue_time_seconds", "histogram"},
    {"request_prefill_time_seconds", "histogram"},
    {"request_decode_time_seconds", "histogram"},
};

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtft = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                   0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                   20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItl = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                  0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequest = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                      5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                      60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

const Family& family(const std::vector<Family>& fs, const std::string& name) {
  auto it = std::find_if(fs.begin(), fs.end(), [&](const Family& f) { return f.name == name; });
  if (it == fs.end()) throw std::runtime_error("no family " + name);
  return *it;
}

double scalar(const std::vector<Family>& fs, const std::string& name) {
  const Family& f = family(fs, name);
  EXPECT_EQ(f.samples.size(), 1u) << name;
  return f.samples.at(0).value;
}

/// Checks a histogram family's shape: the bounds, cumulative buckets, +Inf == _count, and returns
/// (per-bucket counts, sum, count).
struct HistogramValues {
  std::vector<double> cumulative;
  double sum = 0;
  double count = 0;
};
HistogramValues read_histogram(const std::vector<Family>& fs, const std::string& name,
                               const std::vector<double>& bounds, const std::string& model) {
  const Family& f = family(fs, name);
  EXPECT_EQ(f.type, "histogram");
  HistogramValues h;
  std::vector<std::string> les;
  bool has_sum = false, has_count = false;
  for (const auto& s : f.samples) {
    EXPECT_EQ(s.labels.at("model_name"), model) << s.name;
    if (s.name == name + "_bucket") {
      EXPECT_EQ(s.labels.size(), 2u);
      les.push_back(s.labels.at("le"));
      if (!h.cumulative.empty()) {
        EXPECT_GE(s.value, h.cumulative.back()) << "not cumulative";
      }
      h.cumulative.push_back(s.value);
    } else if (s.name == name + "_sum") {
      has_sum = true;
      h.sum = s.value;
    } else if (s.name == name + "_count") {
      has_count = true;
      h.count = s.value;
    }
  }
  EXPECT_TRUE(has_sum && has_count) << name;
  EXPECT_EQ(les.size(), bounds.size() + 1) << name;
  for (size_t i = 0; i < bounds.size() && i < les.size(); ++i) {
    EXPECT_DOUBLE_EQ(std::stod(les[i]), bounds[i]) << name << " bucket " << i;
    EXPECT_NE(les[i].find('.'), std::string::npos) << "le is written as a float: " << les[i];
  }
  if (!les.empty()) {
    EXPECT_EQ(les.back(), "+Inf");
  }
  if (!h.cumulative.empty()) {
    EXPECT_EQ(h.cumulative.back(), h.count) << name;
  }
  return h;
}

EngineStats sample_stats() {
  EngineStats s;
  s.num_running = 3;
  s.num_waiting = 7;
  s.kv_cache_usage = 0.25;
  s.num_preemptions = 2;
  s.prefix_cache_queries_tokens = 1000;
  s.prefix_cache_hits_tokens = 640;
  s.prompt_tokens = 12345;
  s.generation_tokens = 678;
  return s;
}

TEST(MetricsTest, EmptyPageHasEveryFamilyWithHelpTypeAndModelLabel) {
  ServingMetrics metrics("stories", "pagoda");
  const auto fs = parse_exposition(metrics.render(EngineStats{}));
  ASSERT_EQ(fs.size(), std::size(kFamilies));
  for (size_t i = 0; i < fs.size(); ++i) {
    EXPECT_EQ(fs[i].name, std::string("pagoda:") + kFamilies[i].name);
    EXPECT_EQ(fs[i].type, kFamilies[i].type) << fs[i].name;
    EXPECT_FALSE(fs[i].help.empty()) << fs[i].name;
    ASSERT_FALSE(fs[i].samples.empty()) << fs[i].name;
    for (const auto& s : fs[i].samples) {
      EXPECT_EQ(s.labels.at("model_name"), "stories") << s.name;
      EXPECT_EQ(s.value, 0) << s.name;
    }
  }
  // Every finish reason exists from the start, as in vLLM, so rate() has a series to work on.
  std::vector<std::string> reasons;
  for (const auto& s : family(fs, "pagoda:request_success_total").samples)
    reasons.push_back(s.labels.at("finished_reason"));
  std::sort(reasons.begin(), reasons.end());
  EXPECT_EQ(reasons, (std::vector<std::string>{"abort", "length", "stop"}));
}

TEST(MetricsTest, GaugesAndCountersComeFromEngineStats) {
  ServingMetrics metrics("m", "pagoda");
  const auto fs = parse_exposition(metrics.render(sample_stats()));
  EXPECT_EQ(scalar(fs, "pagoda:num_requests_running"), 3);
  EXPECT_EQ(scalar(fs, "pagoda:num_requests_waiting"), 7);
  EXPECT_EQ(scalar(fs, "pagoda:kv_cache_usage_perc"), 0.25);
  EXPECT_EQ(scalar(fs, "pagoda:num_preemptions_total"), 2);
  EXPECT_EQ(scalar(fs, "pagoda:prefix_cache_queries_total"), 1000);
  EXPECT_EQ(scalar(fs, "pagoda:prefix_cache_hits_total"), 640);
  EXPECT_EQ(scalar(fs, "pagoda:prompt_tokens_total"), 12345);
  EXPECT_EQ(scalar(fs, "pagoda:generation_tokens_total"), 678);
}

TEST(MetricsTest, SpecDecodeCountersWhenSpeculationIsConfigured) {
  ServingMetrics metrics("m", "vllm");
  EngineStats s = sample_stats();
  s.spec_decode_num_drafts = 10;
  s.spec_decode_num_draft_tokens = 40;
  s.spec_decode_num_accepted_tokens = 18;
  s.spec_decode_num_accepted_tokens_per_pos = {9, 5, 3, 1};
  const auto fs = parse_exposition(metrics.render(s));
  EXPECT_EQ(scalar(fs, "vllm:spec_decode_num_drafts_total"), 10);
  EXPECT_EQ(scalar(fs, "vllm:spec_decode_num_draft_tokens_total"), 40);
  EXPECT_EQ(scalar(fs, "vllm:spec_decode_num_accepted_tokens_total"), 18);
  const auto& per_pos = family(fs, "vllm:spec_decode_num_accepted_tokens_per_pos_total");
  EXPECT_EQ(per_pos.type, "counter");
  ASSERT_EQ(per_pos.samples.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(per_pos.samples[i].labels.at("position"), std::to_string(i));
    EXPECT_EQ(per_pos.samples[i].value, s.spec_decode_num_accepted_tokens_per_pos[i]);
  }
}

TEST(MetricsTest, RecordsFillHistogramsWithCumulativeBucketsSumsAndCounts) {
  ServingMetrics metrics("m", "pagoda");
  RequestRecord a;
  a.finished_reason = "length";
  a.ttft_seconds = 0.001;  // exactly a boundary: le is inclusive
  a.itl_seconds = {0.005, 0.03, 0.03, 100.0};
  a.e2e_seconds = 1.2;
  a.queue_seconds = 0.1;
  a.prefill_seconds = 0.05;
  a.decode_seconds = 1.1;
  RequestRecord b;
  b.finished_reason = "stop";
  b.ttft_seconds = 3000;  // past the last bound: only +Inf
  b.e2e_seconds = 0.3;
  b.queue_seconds = 0;
  b.prefill_seconds = 0.7;
  b.decode_seconds = 8000;
  metrics.record(a);
  metrics.record(b);
  metrics.record(b);
  const auto fs = parse_exposition(metrics.render(EngineStats{}));

  const auto ttft = read_histogram(fs, "pagoda:time_to_first_token_seconds", kTtft, "m");
  EXPECT_EQ(ttft.count, 3);
  EXPECT_DOUBLE_EQ(ttft.sum, 6000.001);
  EXPECT_EQ(ttft.cumulative.front(), 1);                      // le=0.001 holds a
  EXPECT_EQ(ttft.cumulative[ttft.cumulative.size() - 2], 1);  // le=2560 still only a
  EXPECT_EQ(ttft.cumulative.back(), 3);

  const auto itl = read_histogram(fs, "pagoda:inter_token_latency_seconds", kItl, "m");
  EXPECT_EQ(itl.count, 4);  // every gap is one observation
  EXPECT_DOUBLE_EQ(itl.sum, 100.065);
  EXPECT_EQ(itl.cumulative[0], 1);                // le=0.01: 0.005
  EXPECT_EQ(itl.cumulative[1], 1);                // le=0.025
  EXPECT_EQ(itl.cumulative[2], 3);                // le=0.05: + 0.03 twice
  EXPECT_EQ(itl.cumulative[kItl.size() - 1], 3);  // le=80
  EXPECT_EQ(itl.cumulative.back(), 4);

  const auto e2e = read_histogram(fs, "pagoda:e2e_request_latency_seconds", kRequest, "m");
  EXPECT_EQ(e2e.count, 3);
  EXPECT_DOUBLE_EQ(e2e.sum, 1.8);
  EXPECT_EQ(e2e.cumulative[0], 2);  // le=0.3: b twice (inclusive)
  EXPECT_EQ(e2e.cumulative[4], 3);  // le=1.5: + a
  const auto queue = read_histogram(fs, "pagoda:request_queue_time_seconds", kRequest, "m");
  EXPECT_EQ(queue.cumulative[0], 3);
  EXPECT_DOUBLE_EQ(queue.sum, 0.1);
  const auto prefill = read_histogram(fs, "pagoda:request_prefill_time_seconds", kRequest, "m");
  EXPECT_EQ(prefill.cumulative[0], 1);
  EXPECT_EQ(prefill.cumulative[2], 3);  // le=0.8
  EXPECT_DOUBLE_EQ(prefill.sum, 1.45);
  const auto decode = read_histogram(fs, "pagoda:request_decode_time_seconds", kRequest, "m");
  EXPECT_EQ(decode.cumulative[kRequest.size() - 1], 1);  // le=7680: only a
  EXPECT_EQ(decode.cumulative.back(), 3);
  EXPECT_DOUBLE_EQ(decode.sum, 16001.1);

  std::map<std::string, double> success;
  for (const auto& s : family(fs, "pagoda:request_success_total").samples)
    success[s.labels.at("finished_reason")] = s.value;
  EXPECT_EQ(success["stop"], 2);
  EXPECT_EQ(success["length"], 1);
  EXPECT_EQ(success["abort"], 0);
}

TEST(MetricsTest, VllmPrefixRenamesEverySeries) {
  for (const char* prefix : {"vllm", "vllm:"}) {
    ServingMetrics metrics("m", prefix);
    const std::string page = metrics.render(sample_stats());
    EXPECT_EQ(page.find("pagoda:"), std::string::npos);
    const auto fs = parse_exposition(page);
    ASSERT_EQ(fs.size(), std::size(kFamilies));
    for (size_t i = 0; i < fs.size(); ++i)
      EXPECT_EQ(fs[i].name, std::string("vllm:") + kFamilies[i].name);
    EXPECT_EQ(scalar(fs, "vllm:kv_cache_usage_perc"), 0.25);
  }
}

TEST(MetricsTest, RejectsPrefixesThatAreNotMetricNames) {
  EXPECT_THROW(ServingMetrics("m", ""), InvalidArgument);
  EXPECT_THROW(ServingMetrics("m", "9lives"), InvalidArgument);
  EXPECT_THROW(ServingMetrics("m", "has space"), InvalidArgument);
  EXPECT_THROW(ServingMetrics("m", "dash-ed"), InvalidArgument);
  EXPECT_NO_THROW(ServingMetrics("m", "my_engine2"));
}

TEST(MetricsTest, ModelNameIsEscapedInEveryLabel) {
  const std::string name = "org/\"quoted\" \\path\\\nline2";
  ServingMetrics metrics(name, "pagoda");
  RequestRecord r;
  r.finished_reason = "stop";
  metrics.record(r);
  const std::string page = metrics.render(EngineStats{});
  const auto fs = parse_exposition(page);  // a raw newline or quote would break parsing
  for (const auto& f : fs) {
    for (const auto& s : f.samples) EXPECT_EQ(s.labels.at("model_name"), name) << s.name;
  }
  EXPECT_NE(page.find(R"(model_name="org/\"quoted\" \\path\\\nline2")"), std::string::npos);
}

TEST(MetricsTest, ValuesAreWrittenAsPrometheusFloats) {
  ServingMetrics metrics("m", "pagoda");
  EngineStats s;
  s.kv_cache_usage = 1.0 / 3.0;
  s.prompt_tokens = int64_t{1} << 40;
  const std::string page = metrics.render(s);
  EXPECT_NE(page.find("pagoda:num_requests_running{model_name=\"m\"} 0.0\n"), std::string::npos);
  EXPECT_NE(page.find("le=\"2560.0\"}"), std::string::npos);
  EXPECT_NE(page.find("le=\"+Inf\"}"), std::string::npos);
  const auto fs = parse_exposition(page);
  EXPECT_DOUBLE_EQ(scalar(fs, "pagoda:kv_cache_usage_perc"), 1.0 / 3.0);  // round-trips
  EXPECT_EQ(scalar(fs, "pagoda:prompt_tokens_total"), static_cast<double>(int64_t{1} << 40));
}

TEST(MetricsTest, ConcurrentRecordsAndRendersLoseNothing) {
  ServingMetrics metrics("m", "pagoda");
  constexpr int kThreads = 8, kPerThread = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RequestRecord r;
      r.finished_reason = t % 2 == 0 ? "stop" : "length";
      r.ttft_seconds = 0.5;
      r.itl_seconds = {0.01, 0.02};
      for (int i = 0; i < kPerThread; ++i) {
        metrics.record(r);
        if (i % 100 == 0) (void)parse_exposition(metrics.render(EngineStats{}));
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto fs = parse_exposition(metrics.render(EngineStats{}));
  const auto ttft = read_histogram(fs, "pagoda:time_to_first_token_seconds", kTtft, "m");
  EXPECT_EQ(ttft.count, kThreads * kPerThread);
  EXPECT_DOUBLE_EQ(ttft.sum, 0.5 * kThreads * kPerThread);
  const auto itl = read_histogram(fs, "pagoda:inter_token_latency_seconds", kItl, "m");
  EXPECT_EQ(itl.count, 2 * kThreads * kPerThread);
  double total = 0;
  for (const auto& s : family(fs, "pagoda:request_success_total").samples) total += s.value;
  EXPECT_EQ(total, kThreads * kPerThread);
}

TEST(ExpositionParserTest, RejectsWhatAScrapeRejects) {
  EXPECT_THROW(parse_exposition("a 1\n"), std::runtime_error);  // no TYPE
  EXPECT_THROW(parse_exposition("# TYPE a gauge\na{x=\"1} 1\n"), std::runtime_error);
  EXPECT_THROW(parse_exposition("# TYPE a gauge\na{x=\"\\q\"} 1\n"), std::runtime_error);
  EXPECT_THROW(parse_exposition("# TYPE a gauge\na 1x\n"), std::runtime_error);
  EXPECT_THROW(parse_exposition("# TYPE a gauge\n# TYPE a gauge\n"), std::runtime_error);
  EXPECT_THROW(parse_exposition("# TYPE a gauge\na_bucket 1\n"), std::runtime_error);
  EXPECT_THROW(parse_exposition("# TYPE a gauge\na 1"), std::runtime_error);
  const auto fs = parse_exposition(
      "# HELP h x y\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\n"
      "h_sum 3.5\nh_count 2\n");
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].help, "x y");
  EXPECT_EQ(fs[0].samples.size(), 3u);
}

}  // namespace
}  // namespace pagoda::server
