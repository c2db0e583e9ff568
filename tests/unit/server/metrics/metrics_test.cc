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
    {"gpu_cache_usage_perc", "gauge"},
    {"kv_cache_usage_perc", "gauge"},
    {"prefix_cache_queries_total", "counter"},
    {"prefix_cache_hits_total", "counter"},
    {"num_preemptions_total", "counter"},
    {"prompt_tokens_total", "counter"},
    {"generation_tokens_total", "counter"},
    {"iteration_tokens_total", "histogram"},
    {"request_success_total", "counter"},
    {"request_prompt_tokens", "histogram"},
    {"request_generation_tokens", "histogram"},
    {"request_max_num_generation_tokens", "histogram"},
    {"request_params_n", "histogram"},
    {"request_params_max_tokens", "histogram"},
    {"time_to_first_token_seconds", "histogram"},
    {"inter_token_latency_seconds", "histogram"},
    {"time_per_output_token_seconds", "histogram"},
    {"request_time_per_output_token_seconds", "histogram"},
    {"e2e_request_latency_seconds", "histogram"},
    {"request_queue_time_seconds", "histogram"},
    {"request_inference_time_seconds", "histogram"},
    {"request_prefill_time_seconds", "histogram"},
    {"request_decode_time_seconds", "histogram"},
    {"cache_config_info", "gauge"},
};

/// The options of a server of max_model_len 2048 with 129 blocks of 16 tokens.
MetricsOptions options(std::string model = "m", std::string prefix = "pagoda") {
  MetricsOptions o;
  o.model_name = std::move(model);
  o.prefix = std::move(prefix);
  o.max_model_len = 2048;
  o.cache = {16, 129, true, 0.9, 0, 0};
  return o;
}

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtft = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                   0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                   20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItl = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                  0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kTokens2048 = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000};
const std::vector<double> kIterationTokens = {1,   8,    16,   32,   64,   128,  256,
                                              512, 1024, 2048, 4096, 8192, 16384};
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
    EXPECT_EQ(s.labels.at("engine"), "0") << s.name;
    if (s.name == name + "_bucket") {
      EXPECT_EQ(s.labels.size(), 3u);
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
  ServingMetrics metrics(options("stories", "pagoda"));
  const auto fs = parse_exposition(metrics.render(EngineStats{}));
  ASSERT_EQ(fs.size(), std::size(kFamilies));
  for (size_t i = 0; i < fs.size(); ++i) {
    EXPECT_EQ(fs[i].name, std::string("pagoda:") + kFamilies[i].name);
    EXPECT_EQ(fs[i].type, kFamilies[i].type) << fs[i].name;
    EXPECT_FALSE(fs[i].help.empty()) << fs[i].name;
    ASSERT_FALSE(fs[i].samples.empty()) << fs[i].name;
    for (const auto& s : fs[i].samples) {
      EXPECT_EQ(s.labels.at("engine"), "0") << s.name;
      if (fs[i].name == "pagoda:cache_config_info") {
        EXPECT_FALSE(s.labels.count("model_name")) << "vLLM labels it with its config alone";
        EXPECT_EQ(s.value, 1);
        continue;
      }
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
  ServingMetrics metrics(options("m", "pagoda"));
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

TEST(MetricsTest, HostTierFamiliesWhenTheTierIsConfigured) {
  MetricsOptions o = options("m", "vllm");
  o.cache.kv_offloading_bytes = int64_t{1} << 30;
  o.cache.host_kv_blocks = 4096;
  ServingMetrics metrics(o);
  EngineStats s = sample_stats();
  s.external_prefix_cache_queries_tokens = 900;
  s.external_prefix_cache_hits_tokens = 320;
  s.host_kv_blocks_saved = 41;
  s.host_kv_blocks_loaded = 20;
  s.host_kv_cache_usage = 0.01;
  const auto fs = parse_exposition(metrics.render(s));
  EXPECT_EQ(scalar(fs, "vllm:external_prefix_cache_queries_total"), 900);
  EXPECT_EQ(scalar(fs, "vllm:external_prefix_cache_hits_total"), 320);
  EXPECT_EQ(scalar(fs, "vllm:prefix_cache_hits_total"), 640);  // the device's, apart
  EXPECT_EQ(scalar(fs, "vllm:host_kv_blocks_saved_total"), 41);
  EXPECT_EQ(scalar(fs, "vllm:host_kv_blocks_loaded_total"), 20);
  EXPECT_EQ(scalar(fs, "vllm:host_kv_cache_usage_perc"), 0.01);
  EXPECT_EQ(family(fs, "vllm:external_prefix_cache_hits_total").type, "counter");
  EXPECT_EQ(family(fs, "vllm:host_kv_cache_usage_perc").type, "gauge");
  // Without a tier (the other tests' options) none of them is rendered.
  const auto plain = parse_exposition(ServingMetrics(options("m", "vllm")).render(s));
  EXPECT_THROW((void)family(plain, "vllm:external_prefix_cache_hits_total"), std::runtime_error);
}

TEST(MetricsTest, SpecDecodeCountersWhenSpeculationIsConfigured) {
  ServingMetrics metrics(options("m", "vllm"));
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
  ServingMetrics metrics(options("m", "pagoda"));
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
    ServingMetrics metrics(options("m", prefix));
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
  EXPECT_THROW(ServingMetrics(options("m", "")), InvalidArgument);
  EXPECT_THROW(ServingMetrics(options("m", "9lives")), InvalidArgument);
  EXPECT_THROW(ServingMetrics(options("m", "has space")), InvalidArgument);
  EXPECT_THROW(ServingMetrics(options("m", "dash-ed")), InvalidArgument);
  EXPECT_NO_THROW(ServingMetrics(options("m", "my_engine2")));
}

TEST(MetricsTest, ModelNameIsEscapedInEveryLabel) {
  const std::string name = "org/\"quoted\" \\path\\\nline2";
  ServingMetrics metrics(options(name, "pagoda"));
  RequestRecord r;
  r.finished_reason = "stop";
  metrics.record(r);
  const std::string page = metrics.render(EngineStats{});
  const auto fs = parse_exposition(page);  // a raw newline or quote would break parsing
  for (const auto& f : fs) {
    if (f.name == "pagoda:cache_config_info") continue;
    for (const auto& s : f.samples) EXPECT_EQ(s.labels.at("model_name"), name) << s.name;
  }
  EXPECT_NE(page.find(R"(model_name="org/\"quoted\" \\path\\\nline2")"), std::string::npos);
}

TEST(MetricsTest, ValuesAreWrittenAsPrometheusFloats) {
  ServingMetrics metrics(options("m", "pagoda"));
  EngineStats s;
  s.kv_cache_usage = 1.0 / 3.0;
  s.prompt_tokens = int64_t{1} << 40;
  const std::string page = metrics.render(s);
  EXPECT_NE(page.find("pagoda:num_requests_running{model_name=\"m\",engine=\"0\"} 0.0\n"),
            std::string::npos);
  EXPECT_NE(page.find("le=\"2560.0\"}"), std::string::npos);
  EXPECT_NE(page.find("le=\"+Inf\"}"), std::string::npos);
  const auto fs = parse_exposition(page);
  EXPECT_DOUBLE_EQ(scalar(fs, "pagoda:kv_cache_usage_perc"), 1.0 / 3.0);  // round-trips
  EXPECT_EQ(scalar(fs, "pagoda:prompt_tokens_total"), static_cast<double>(int64_t{1} << 40));
}

TEST(MetricsTest, ConcurrentRecordsAndRendersLoseNothing) {
  ServingMetrics metrics(options("m", "pagoda"));
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

TEST(MetricsTest, TokenHistogramsCountPerCompletionAndPerRequest) {
  ServingMetrics metrics(options());
  RequestRecord a;  // one of the two completions of an n=2 request
  a.finished_reason = "length";
  a.prompt_tokens = 10;  // exactly a boundary: le is inclusive
  a.generation_tokens = 7;
  a.max_tokens_param = 7;
  a.prefill_seconds = 0.25;
  a.decode_seconds = 0.6;  // 6 gaps after the first token: 0.1 s per token
  RequestRecord b = a;
  b.finished_reason = "stop";
  b.generation_tokens = 3;
  b.decode_seconds = 0.5;  // 0.25 s per token
  RequestRecord c;         // a request that generated one token (no TPOT: 0) and set no max_tokens
  c.finished_reason = "stop";
  c.prompt_tokens = 3000;  // past max_model_len's last bucket: +Inf only
  c.generation_tokens = 1;
  c.decode_seconds = 0;
  for (const RequestRecord* r : {&a, &b, &c}) metrics.record(*r);
  metrics.record(ParentRecord{2, 7});
  metrics.record(ParentRecord{1, 1});
  const auto fs = parse_exposition(metrics.render(EngineStats{}));

  const auto prompt = read_histogram(fs, "pagoda:request_prompt_tokens", kTokens2048, "m");
  EXPECT_EQ(prompt.count, 3);
  EXPECT_EQ(prompt.sum, 3020);
  EXPECT_EQ(prompt.cumulative[3], 2);                       // le=10
  EXPECT_EQ(prompt.cumulative[kTokens2048.size() - 1], 2);  // le=2000
  const auto generation = read_histogram(fs, "pagoda:request_generation_tokens", kTokens2048, "m");
  EXPECT_EQ(generation.sum, 11);
  EXPECT_EQ(generation.cumulative[0], 1);  // le=1: c
  EXPECT_EQ(generation.cumulative[2], 2);  // le=5: + b
  EXPECT_EQ(generation.cumulative[3], 3);  // le=10: + a
  // max_tokens is observed where the request set it (vLLM skips an unset one).
  const auto max_tokens = read_histogram(fs, "pagoda:request_params_max_tokens", kTokens2048, "m");
  EXPECT_EQ(max_tokens.count, 2);
  EXPECT_EQ(max_tokens.sum, 14);
  // One observation per request, not per completion.
  const auto n = read_histogram(fs, "pagoda:request_params_n", {1, 2, 5, 10, 20}, "m");
  EXPECT_EQ(n.count, 2);
  EXPECT_EQ(n.sum, 3);
  EXPECT_EQ(n.cumulative[0], 1);
  EXPECT_EQ(n.cumulative[1], 2);
  const auto max_gen =
      read_histogram(fs, "pagoda:request_max_num_generation_tokens", kTokens2048, "m");
  EXPECT_EQ(max_gen.count, 2);
  EXPECT_EQ(max_gen.sum, 8);

  const auto tpot = read_histogram(fs, "pagoda:request_time_per_output_token_seconds", kItl, "m");
  EXPECT_EQ(tpot.count, 3);
  EXPECT_DOUBLE_EQ(tpot.sum, 0.35);
  EXPECT_EQ(tpot.cumulative[0], 1);  // le=0.01: c's 0
  EXPECT_EQ(tpot.cumulative[4], 2);  // le=0.1: + a
  const auto inference = read_histogram(fs, "pagoda:request_inference_time_seconds", kRequest, "m");
  EXPECT_EQ(inference.count, 3);
  EXPECT_DOUBLE_EQ(inference.sum, 0.85 + 0.75 + 0);
}

TEST(MetricsTest, TimePerOutputTokenIsTheInterTokenLatencyUnderItsOlderName) {
  ServingMetrics metrics(options());
  RequestRecord r;
  r.finished_reason = "stop";
  r.itl_seconds = {0.02, 0.3, 0.004};
  metrics.record(r);
  const auto fs = parse_exposition(metrics.render(EngineStats{}));
  const auto itl = read_histogram(fs, "pagoda:inter_token_latency_seconds", kItl, "m");
  const auto tpot = read_histogram(fs, "pagoda:time_per_output_token_seconds", kItl, "m");
  EXPECT_EQ(tpot.cumulative, itl.cumulative);
  EXPECT_DOUBLE_EQ(tpot.sum, 0.324);
  EXPECT_EQ(tpot.count, 3);
}

TEST(MetricsTest, IterationTokensComeFromTheEngineSteps) {
  ServingMetrics metrics(options());
  EngineStats s;
  for (int64_t tokens : {1, 8, 9, 64, 20000}) s.iteration_tokens.observe(tokens);
  const auto fs = parse_exposition(metrics.render(s));
  const auto h = read_histogram(fs, "pagoda:iteration_tokens_total", kIterationTokens, "m");
  EXPECT_EQ(h.count, 5);
  EXPECT_EQ(h.sum, 20082);
  EXPECT_EQ(h.cumulative[0], 1);                            // le=1
  EXPECT_EQ(h.cumulative[1], 2);                            // le=8
  EXPECT_EQ(h.cumulative[2], 3);                            // le=16: 9
  EXPECT_EQ(h.cumulative[4], 4);                            // le=64
  EXPECT_EQ(h.cumulative[kIterationTokens.size() - 1], 4);  // le=16384
  EXPECT_EQ(h.cumulative.back(), 5);
}

TEST(MetricsTest, CacheConfigInfoCarriesTheKvCacheAsVllmSpellsIt) {
  auto info = [](const MetricsOptions& o) {
    const auto fs = parse_exposition(ServingMetrics(o).render(EngineStats{}));
    const Family& f = family(fs, std::string(o.prefix) + ":cache_config_info");
    EXPECT_EQ(f.samples.size(), 1u);
    EXPECT_EQ(f.samples.at(0).value, 1);
    return f.samples.at(0).labels;
  };
  auto labels = info(options());
  EXPECT_EQ(labels.at("block_size"), "16");
  EXPECT_EQ(labels.at("num_gpu_blocks"), "129");
  EXPECT_EQ(labels.at("enable_prefix_caching"), "True");
  EXPECT_EQ(labels.at("gpu_memory_utilization"), "0.9");
  EXPECT_EQ(labels.at("cache_dtype"), "float32");  // --kv-cache-dtype auto on the CPU
  EXPECT_EQ(labels.at("calculate_kv_scales"), "False");
  EXPECT_EQ(labels.at("kv_cache_memory_bytes"), "None");
  EXPECT_EQ(labels.at("sliding_window"), "None");
  EXPECT_EQ(labels.at("num_cpu_blocks"), "None");
  EXPECT_EQ(labels.at("swap_space_bytes"), "0");
  EXPECT_EQ(labels.at("engine"), "0");
  MetricsOptions o = options("m", "vllm");
  o.cache = {32, 7, false, 0.5, int64_t{64} << 20, 4096, "fp8_e4m3", true};
  labels = info(o);
  EXPECT_EQ(labels.at("cache_dtype"), "fp8_e4m3");
  EXPECT_EQ(labels.at("calculate_kv_scales"), "True");
  EXPECT_EQ(labels.at("block_size"), "32");
  EXPECT_EQ(labels.at("num_gpu_blocks"), "7");
  EXPECT_EQ(labels.at("enable_prefix_caching"), "False");
  EXPECT_EQ(labels.at("gpu_memory_utilization"), "0.5");
  EXPECT_EQ(labels.at("kv_cache_memory_bytes"), "67108864");
  EXPECT_EQ(labels.at("sliding_window"), "4096");
}

TEST(MetricsTest, RejectsOptionsWithoutBucketsOrACache) {
  MetricsOptions o = options();
  o.max_model_len = 0;
  EXPECT_THROW(ServingMetrics{o}, InvalidArgument);
  o = options();
  o.cache.block_size = 0;
  EXPECT_THROW(ServingMetrics{o}, InvalidArgument);
  o = options();
  o.cache.num_blocks = 0;
  EXPECT_THROW(ServingMetrics{o}, InvalidArgument);
  o = options();
  o.max_model_len = 1;  // one bucket, le=1
  const auto fs = parse_exposition(ServingMetrics(o).render(EngineStats{}));
  (void)read_histogram(fs, "pagoda:request_prompt_tokens", {1}, "m");
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
