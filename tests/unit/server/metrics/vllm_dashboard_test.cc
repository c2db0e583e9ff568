// vLLM's own dashboards against a live server started with --metrics-prefix vllm: every series
// their panels query exists on /metrics, labelled model_name and engine as vLLM v1 labels them,
// after a few real requests; and the new series hold the values of what was served (the
// prompt-token histogram's sum is the prompt tokens served, and so on). To cover another panel,
// add the series its PromQL names to kDashboardSeries with the file it comes from.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/engine_core.h"
#include "exposition_parser.h"
#include "http/test_client.h"
#include "server/server.h"

namespace pagoda::server {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

/// The series named in the PromQL expressions of vLLM's dashboards.
constexpr const char* kDashboardSeries[] = {
    // examples/online_serving/prometheus_grafana/grafana.json (vLLM's Grafana dashboard)
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:e2e_request_latency_seconds_sum",
    "vllm:e2e_request_latency_seconds_count",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:time_per_output_token_seconds_bucket",
    "vllm:time_per_output_token_seconds_sum",
    "vllm:time_per_output_token_seconds_count",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count",
    "vllm:gpu_cache_usage_perc",
    "vllm:request_prompt_tokens_bucket",
    "vllm:request_generation_tokens_bucket",
    "vllm:request_success_total",
    "vllm:request_queue_time_seconds_sum",
    "vllm:request_prefill_time_seconds_sum",
    "vllm:request_decode_time_seconds_sum",
    "vllm:request_max_num_generation_tokens_sum",
    // examples/online_serving/dashboards/grafana/performance_statistics.json and
    // query_statistics.json (their Perses twins in dashboards/perses/ query the same)
    "vllm:iteration_tokens_total_count",
    "vllm:kv_cache_usage_perc",
};

constexpr std::string_view kAuth = "Authorization: Bearer k\r\n";

class VllmDashboardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineArgs args;
    args.model = PAGODA_SOURCE_DIR "/models/stories260K";
    args.device = "cpu";
    args.kv_cache_memory_bytes = int64_t{16} << 20;
    args.num_threads = 2;
    engine_ = new EngineCore(args);
    ServerOptions options;
    options.http.port = 0;
    options.served_model_names = {"stories"};
    options.api_key = "k";
    options.metrics_prefix = "vllm";
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

  /// POSTs a body and returns the parsed JSON answer (non-streamed) or the usage chunk (streamed).
  static json post(std::string_view path, const json& body) {
    http::testing::TestClient client(server_->port(), 60s);
    client.send_request("POST", path, body.dump(), kAuth);
    const auto r = client.read_response();
    EXPECT_EQ(r.status, 200) << r.body;
    if (!body.value("stream", false)) return json::parse(r.body);
    json usage;
    for (size_t at = 0; (at = r.body.find("data: {", at)) != std::string::npos;) {
      const size_t end = r.body.find("\n\n", at);
      const json event = json::parse(r.body.substr(at + 6, end - at - 6));
      if (event.contains("usage") && !event["usage"].is_null()) usage = event;
      at = end;
    }
    return usage;
  }

  static std::vector<testing::Family> scrape() {
    return testing::parse_exposition(http::testing::fetch(server_->port(), "GET", "/metrics").body);
  }

  static EngineCore* engine_;
  static Server* server_;
};
EngineCore* VllmDashboardTest::engine_ = nullptr;
Server* VllmDashboardTest::server_ = nullptr;

/// The value of sample `name` (summed over its label sets).
double value(const std::vector<testing::Family>& fs, const std::string& name) {
  double sum = 0;
  bool found = false;
  for (const auto& f : fs) {
    for (const auto& s : f.samples) {
      if (s.name != name) continue;
      found = true;
      sum += s.value;
    }
  }
  EXPECT_TRUE(found) << "no series " << name;
  return sum;
}

TEST_F(VllmDashboardTest, EveryPanelFindsItsSeriesWithTheValuesServed) {
  // Four requests, five completions: a completion of n=2, a streamed completion, a chat.
  struct Served {
    int n;
    int max_tokens;
    json usage;
  };
  std::vector<Served> served;
  served.push_back({2, 5,
                    post("/v1/completions", {{"prompt", "Once upon a time"},
                                             {"n", 2},
                                             {"max_tokens", 5},
                                             {"ignore_eos", true}})["usage"]});
  served.push_back(
      {1, 7,
       post("/v1/completions", {{"prompt", "The little dog"},
                                {"max_tokens", 7},
                                {"ignore_eos", true},
                                {"stream", true},
                                {"stream_options", {{"include_usage", true}}}})["usage"]});
  served.push_back(
      {1, 4,
       post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
                                     {"max_tokens", 4},
                                     {"ignore_eos", true}})["usage"]});
  int64_t prompt = 0, generation = 0, max_tokens = 0, max_generation = 0, n = 0;
  int completions = 0;
  for (const Served& s : served) {
    ASSERT_TRUE(s.usage.is_object());
    // Usage counts the prompt once; each of the n completions is a finished request with it.
    prompt += s.n * s.usage["prompt_tokens"].get<int64_t>();
    generation += s.usage["completion_tokens"].get<int64_t>();
    max_tokens += int64_t{s.n} * s.max_tokens;
    max_generation += s.max_tokens;  // ignore_eos: every completion generates max_tokens
    n += s.n;
    completions += s.n;
  }
  ASSERT_EQ(generation, 2 * 5 + 7 + 4);

  // The engine's counters are published after the step's outputs go out: wait for the engine to
  // have counted every token (bounded by progress: nothing else runs).
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (engine_->stats().generation_tokens < generation || engine_->stats().num_running > 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the engine never went idle";
    std::this_thread::sleep_for(5ms);
  }
  const auto fs = scrape();

  for (const char* name : kDashboardSeries) {
    bool found = false;
    for (const auto& f : fs) {
      for (const auto& s : f.samples) {
        if (s.name != name) continue;
        found = true;
        // The dashboards filter on model_name="$model_name"; vLLM v1 adds engine.
        EXPECT_EQ(s.labels.count("model_name") ? s.labels.at("model_name") : "", "stories") << name;
        EXPECT_EQ(s.labels.count("engine") ? s.labels.at("engine") : "", "0") << name;
      }
    }
    EXPECT_TRUE(found) << name << " is not on /metrics";
  }

  // The values of what was served.
  EXPECT_EQ(value(fs, "vllm:request_prompt_tokens_count"), completions);
  EXPECT_EQ(value(fs, "vllm:request_prompt_tokens_sum"), prompt);
  EXPECT_EQ(value(fs, "vllm:request_generation_tokens_sum"), generation);
  EXPECT_EQ(value(fs, "vllm:request_params_max_tokens_sum"), max_tokens);
  EXPECT_EQ(value(fs, "vllm:request_params_n_count"), served.size());
  EXPECT_EQ(value(fs, "vllm:request_params_n_sum"), n);
  EXPECT_EQ(value(fs, "vllm:request_max_num_generation_tokens_count"), served.size());
  EXPECT_EQ(value(fs, "vllm:request_max_num_generation_tokens_sum"), max_generation);
  EXPECT_EQ(value(fs, "vllm:e2e_request_latency_seconds_count"), completions);
  EXPECT_EQ(value(fs, "vllm:request_inference_time_seconds_count"), completions);
  EXPECT_NEAR(value(fs, "vllm:request_inference_time_seconds_sum"),
              value(fs, "vllm:request_prefill_time_seconds_sum") +
                  value(fs, "vllm:request_decode_time_seconds_sum"),
              1e-9);
  EXPECT_EQ(value(fs, "vllm:request_time_per_output_token_seconds_count"), completions);
  EXPECT_EQ(value(fs, "vllm:time_per_output_token_seconds_count"),
            value(fs, "vllm:inter_token_latency_seconds_count"));
  EXPECT_GT(value(fs, "vllm:time_per_output_token_seconds_count"), 0);
  EXPECT_EQ(value(fs, "vllm:generation_tokens_total"), generation);
  // Each step's tokens: the prompt tokens it computed and the tokens it sampled.
  EXPECT_EQ(value(fs, "vllm:iteration_tokens_total_sum"),
            value(fs, "vllm:prompt_tokens_total") + value(fs, "vllm:generation_tokens_total"));
  EXPECT_EQ(value(fs, "vllm:iteration_tokens_total_count"), engine_->stats().num_steps);
  EXPECT_EQ(value(fs, "vllm:gpu_cache_usage_perc"), value(fs, "vllm:kv_cache_usage_perc"));

  // cache_config_info: the KV cache the engine built.
  const auto info = std::find_if(fs.begin(), fs.end(),
                                 [](const auto& f) { return f.name == "vllm:cache_config_info"; });
  ASSERT_NE(info, fs.end());
  ASSERT_EQ(info->samples.size(), 1u);
  const auto& labels = info->samples[0].labels;
  EXPECT_EQ(labels.at("block_size"), std::to_string(engine_->cache_info().block_size));
  EXPECT_EQ(labels.at("num_gpu_blocks"), std::to_string(engine_->cache_info().num_blocks));
  EXPECT_EQ(labels.at("enable_prefix_caching"), "True");
  EXPECT_EQ(labels.at("kv_cache_memory_bytes"), std::to_string(int64_t{16} << 20));
  EXPECT_EQ(labels.at("engine"), "0");
}

}  // namespace
}  // namespace pagoda::server
