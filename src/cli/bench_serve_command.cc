// `pagoda bench serve`: online serving benchmark against a running OpenAI-compatible server, with
// the flags, the datasets (random, prefix_repetition, sharegpt), the measurements and the printed
// report of `vllm bench serve`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli/bench_serve_options.h"
#include "cli/commands.h"
#include "cli/hub_env.h"
#include "core/status.h"
#include "hub/cache.h"
#include "server/client/bench_metrics.h"
#include "server/client/http_client.h"
#include "server/client/prometheus.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

using nlohmann::json;

/// --tokenizer as a local path: a Hub repo id comes from the Hugging Face cache or the Hub.
std::string local_tokenizer(const ServeBenchOptions& o) {
  std::error_code ec;
  if (!o.tokenizer.empty() && !std::filesystem::exists(o.tokenizer, ec) &&
      hub::is_repo_id(o.tokenizer)) {
    return resolve_model_argument(o.tokenizer, "", /*weights=*/false, hub_config_from_env(""));
  }
  return o.tokenizer;
}

/// The vocabulary size that random token ids are drawn from: the flag, or config.json of the
/// tokenizer directory (or of --model when it is a local directory).
int64_t vocab_size(const ServeBenchOptions& o, const std::string& model) {
  if (o.random_vocab_size > 0) return o.random_vocab_size;
  // The served model name from the cache only (it may be any name).
  const std::string tokenizer = local_tokenizer(o);
  std::string model_dir = model;
  std::error_code ec;
  if (!model.empty() && !std::filesystem::exists(model, ec) && hub::is_repo_id(model)) {
    try {
      hub::HubConfig cache_only = hub_config_from_env("");
      cache_only.offline = true;
      model_dir = resolve_model_argument(model, "", /*weights=*/false, cache_only);
    } catch (const Error&) {
      // not in the cache: the vocabulary size must come from elsewhere
    }
  }
  for (const std::string& dir : {tokenizer, model_dir}) {
    const std::filesystem::path config = std::filesystem::path(dir) / "config.json";
    if (dir.empty() || !std::filesystem::is_regular_file(config)) continue;
    std::ifstream in(config);
    const json j = json::parse(in);
    if (j.contains("vocab_size")) return j["vocab_size"].get<int64_t>();
    if (j.contains("text_config")) return j["text_config"].at("vocab_size").get<int64_t>();
  }
  throw InvalidArgument(fmt::format(
      "--dataset-name {} needs the vocabulary size for token-id prompts: pass --random-vocab-size "
      "or --tokenizer <model directory with config.json>",
      o.dataset));
}

/// Counts a text's tokens with the tokenizer of --tokenizer (or of --model when it is a local
/// directory), as the server's usage counts them (special tokens included).
client::TokenCounter token_counter(const ServeBenchOptions& o, const std::string& model) {
  for (const std::string& path : {local_tokenizer(o), model}) {
    if (path.empty() || !std::filesystem::exists(path)) continue;
    auto tokenizer = std::make_shared<Tokenizer>(Tokenizer::load(path));
    return [tokenizer](std::string_view text) {
      return static_cast<int64_t>(tokenizer->encode(text, /*add_special_tokens=*/true).size());
    };
  }
  throw InvalidArgument(
      "--dataset-name sharegpt counts tokens with the model's tokenizer: pass --tokenizer <model "
      "directory or tokenizer.json>");
}

std::string first_served_model(const client::Endpoint& endpoint, const std::string& api_key) {
  const client::HttpResponse r = client::http_request(endpoint, "/v1/models", api_key);
  if (r.status != 200)
    throw Unavailable(fmt::format("GET /v1/models: HTTP {}: {}", r.status, r.body));
  const json j = json::parse(r.body);
  if (!j.contains("data") || j["data"].empty()) throw Unavailable("the server lists no model");
  return j["data"][0].at("id").get<std::string>();
}

/// The server's prefix-cache counters (pagoda: or vllm: names); nullopt when /metrics fails.
std::optional<client::PrefixCacheDelta> read_prefix_cache(const client::Endpoint& endpoint,
                                                          const std::string& api_key) {
  try {
    const client::HttpResponse r = client::http_request(endpoint, "/metrics", api_key);
    if (r.status != 200) return std::nullopt;
    const auto samples = client::parse_prometheus_text(r.body);
    for (const char* prefix : {"pagoda:", "vllm:"}) {
      bool found = false;
      client::PrefixCacheDelta c;
      c.queries =
          client::sum_samples(samples, std::string(prefix) + "prefix_cache_queries_total", &found);
      if (!found) continue;
      c.hits = client::sum_samples(samples, std::string(prefix) + "prefix_cache_hits_total");
      return c;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: could not read /metrics: %s\n", e.what());
  }
  return std::nullopt;
}

json result_json(const ServeBenchOptions& o, const std::string& model, double rate,
                 const client::LoadResult& load, const client::BenchmarkMetrics& m,
                 const std::optional<client::PrefixCacheDelta>& prefix) {
  const bool goodput = !o.goodput.empty();
  json r = {{"backend", "openai"},
            {"endpoint", o.endpoint},
            {"model_id", model},
            {"num_prompts", o.num_prompts},
            {"request_rate", std::isinf(rate) ? json("inf") : json(rate)},
            {"burstiness", o.burstiness},
            {"max_concurrency", o.max_concurrency > 0 ? json(o.max_concurrency) : json(nullptr)},
            {"duration", load.duration_s},
            {"completed", m.completed},
            {"failed", m.failed},
            {"total_input_tokens", m.total_input},
            {"total_output_tokens", m.total_output},
            {"request_throughput", m.request_throughput},
            {"request_goodput", goodput ? json(m.request_goodput) : json(nullptr)},
            {"output_throughput", m.output_throughput},
            {"total_token_throughput", m.total_token_throughput},
            {"max_output_tokens_per_s", m.max_output_tokens_per_s},
            {"max_concurrent_requests", m.max_concurrent_requests},
            {"input_lens", m.input_lens},
            {"output_lens", m.output_lens}};
  json ttfts = json::array(), itls = json::array(), latencies = json::array(),
       starts = json::array(), texts = json::array(), errors = json::array();
  for (const client::StreamResult& s : load.results) {
    ttfts.push_back(s.ttft);
    itls.push_back(s.itl);
    latencies.push_back(s.latency);
    starts.push_back(s.start_time);
    texts.push_back(s.generated_text);
    errors.push_back(s.error);
  }
  r["ttfts"] = ttfts;
  r["itls"] = itls;
  r["latencies"] = latencies;
  r["start_times"] = starts;
  r["generated_texts"] = texts;
  r["errors"] = errors;
  // The chosen metrics' statistics, keyed as vLLM keys them (p99_ttft_ms, p99.9_itl_ms, ...).
  const std::pair<const char*, const client::Summary*> summaries[] = {
      {"ttft", &m.ttft}, {"tpot", &m.tpot}, {"itl", &m.itl}, {"e2el", &m.e2el}};
  const std::vector<std::string> chosen = client::parse_percentile_metrics(o.percentile_metrics);
  for (const auto& [name, s] : summaries) {
    if (std::find(chosen.begin(), chosen.end(), name) == chosen.end()) continue;
    r[fmt::format("mean_{}_ms", name)] = s->mean_ms;
    r[fmt::format("median_{}_ms", name)] = s->median_ms;
    r[fmt::format("std_{}_ms", name)] = s->std_ms;
    for (const auto& [p, value] : s->percentiles_ms)
      r[fmt::format("p{}_{}_ms", client::percentile_word(p), name)] = value;
  }
  if (prefix) {
    r["prefix_cache_queries"] = prefix->queries;
    r["prefix_cache_hits"] = prefix->hits;
    r["prefix_cache_hit_rate"] = prefix->hit_rate();
  }
  return r;
}

int run_serve_bench(const ServeBenchOptions& o) {
  validate(o);
  const client::MetricsConfig metrics = metrics_config(o);
  double rate = std::numeric_limits<double>::infinity();
  if (o.request_rate != "inf") {
    try {
      rate = std::stod(o.request_rate);
    } catch (const std::exception&) {
      rate = -1;
    }
    if (!(rate > 0)) throw InvalidArgument("--request-rate must be 'inf' or a positive number");
  }
  const client::Endpoint endpoint = client::parse_base_url(o.base_url);
  const std::string model = o.model.empty() ? first_served_model(endpoint, o.api_key) : o.model;
  // Token-id prompts need the vocabulary; ShareGPT's texts the tokenizer (their lengths).
  const bool token_ids = o.dataset != "sharegpt" && o.endpoint.find("chat") == std::string::npos;
  const std::vector<client::SampleRequest> samples =
      sample_dataset(o, token_ids ? vocab_size(o, model) : 0,
                     o.dataset == "sharegpt" ? token_counter(o, model) : client::TokenCounter{});
  std::vector<client::StreamRequest> requests;
  std::vector<int64_t> input_lens;
  for (const client::SampleRequest& sample : samples) {
    requests.push_back({o.endpoint, request_body(o, model, sample).dump()});
    input_lens.push_back(sample.prompt_len);
  }
  if (static_cast<int>(requests.size()) != o.num_prompts) {
    std::printf("The %s dataset gives %zu requests (of --num-prompts %d).\n", o.dataset.c_str(),
                requests.size(), o.num_prompts);
  }

  client::LoadOptions load_options;
  load_options.request_rate = rate;
  load_options.burstiness = o.burstiness;
  load_options.max_concurrency = o.max_concurrency;
  load_options.seed = o.seed;
  load_options.api_key = o.api_key;
  load_options.timeout_s = o.timeout_s;
  load_options.num_threads =
      o.num_threads > 0 ? o.num_threads
                        : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));

  std::printf("Starting initial single prompt test run...\n");
  const client::LoadResult test =
      client::run_streaming_load(endpoint, {requests.front()}, load_options);
  if (!test.results.front().success) {
    throw InvalidArgument(
        "Initial test run failed - Please make sure benchmark arguments are "
        "correctly specified. Error: " +
        test.results.front().error);
  }
  std::printf("Initial test run completed. Starting main benchmark run...\n");
  std::printf("Traffic request rate: %s\n", o.request_rate.c_str());
  std::printf("Burstiness factor: %s (%s)\n", fmt::format("{:.1f}", o.burstiness).c_str(),
              o.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
  std::printf("Maximum request concurrency: %s\n",
              o.max_concurrency > 0 ? std::to_string(o.max_concurrency).c_str() : "None");
  std::fflush(stdout);

  const auto before = read_prefix_cache(endpoint, o.api_key);
  const client::LoadResult load = client::run_streaming_load(endpoint, requests, load_options);
  const auto after = read_prefix_cache(endpoint, o.api_key);
  std::optional<client::PrefixCacheDelta> prefix;
  if (before && after)
    prefix = client::PrefixCacheDelta{after->queries - before->queries, after->hits - before->hits};

  const client::BenchmarkMetrics m =
      client::calculate_metrics(load.results, input_lens, load.duration_s, metrics);
  int shown = 0;
  for (const client::StreamResult& r : load.results) {
    if (r.success || shown >= 10) continue;
    if (shown++ == 0)
      std::printf("Failed requests during benchmark run detected (capping to 10):\n");
    std::printf("Error %d: %s\n", shown - 1, r.error.c_str());
  }
  client::ReportHeader header;
  if (o.max_concurrency > 0) header.max_concurrency = o.max_concurrency;
  header.request_rate = rate;
  header.duration_s = load.duration_s;
  header.goodput = !metrics.goodput.empty();
  header.percentile_metrics = client::parse_percentile_metrics(o.percentile_metrics);
  std::fputs(client::format_report(m, header, prefix).c_str(), stdout);
  std::fflush(stdout);

  if (!o.save_result.empty()) {
    std::ofstream out(o.save_result);
    if (!out) throw InvalidArgument("cannot write --save-result " + o.save_result);
    out << result_json(o, model, rate, load, m, prefix).dump(2) << "\n";
  }
  return m.failed == 0 ? 0 : 1;
}

}  // namespace

void register_bench_serve_command(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<ServeBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "serve", "Online serving benchmark against a running OpenAI-compatible server");
  add_serve_bench_options(*cmd, *o);
  // A dataset's own flags with another dataset would be ignored: refuse them by name.
  const std::pair<const char*, const char*> dataset_flags[] = {
      {"--random-input-len", "random"},
      {"--random-output-len", "random"},
      {"--random-range-ratio", "random"},
      {"--random-prefix-len", "random"},
      {"--prefix-repetition-prefix-len", "prefix_repetition"},
      {"--prefix-repetition-suffix-len", "prefix_repetition"},
      {"--prefix-repetition-num-prefixes", "prefix_repetition"},
      {"--prefix-repetition-output-len", "prefix_repetition"},
      {"--dataset-path", "sharegpt"},
      {"--sharegpt-output-len", "sharegpt"},
      {"--no-oversample", "sharegpt"}};
  cmd->callback([o, cmd, dataset_flags, &exit_code] {
    for (const auto& [flag, dataset] : dataset_flags) {
      if (cmd->count(flag) > 0 && o->dataset != dataset) {
        throw InvalidArgument(
            fmt::format("{} is a flag of --dataset-name {}, not of {}", flag, dataset, o->dataset));
      }
    }
    exit_code = run_serve_bench(*o);
  });
}

}  // namespace pagoda::cli
