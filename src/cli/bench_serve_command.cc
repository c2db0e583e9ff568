// `pagoda bench serve`: online serving benchmark against a running OpenAI-compatible server, with
// the flags, the measurements and the printed report of `vllm bench serve` (random dataset).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/hub_env.h"
#include "core/status.h"
#include "hub/cache.h"
#include "server/client/bench_metrics.h"
#include "server/client/http_client.h"
#include "server/client/prometheus.h"

namespace pagoda::cli {
namespace {

using nlohmann::json;

struct ServeBenchOptions {
  std::string base_url = "http://127.0.0.1:8000";
  std::string model;
  std::string endpoint = "/v1/completions";
  std::string dataset = "random";
  int random_input_len = 1024;
  int random_output_len = 128;
  double random_range_ratio = 0;
  int64_t random_vocab_size = 0;
  std::string tokenizer;
  int num_prompts = 1000;
  std::string request_rate = "inf";
  double burstiness = 1.0;
  int max_concurrency = 0;
  std::string save_result;
  uint64_t seed = 0;
  std::string api_key;
  double temperature = 0;
  std::string extra_body;  // a JSON object merged into every request (e.g. structured outputs)
  int num_threads = 0;
  double timeout_s = 3600;
};

// Prompts of the chat endpoint are words rather than token ids (messages carry text).
constexpr const char* kWords[] = {
    "time",     "year",    "people",   "way",    "day",    "man",     "thing",   "woman",
    "life",     "child",   "world",    "school", "state",  "family",  "student", "group",
    "country",  "problem", "hand",     "part",   "place",  "case",    "week",    "company",
    "system",   "program", "question", "work",   "number", "night",   "point",   "home",
    "water",    "room",    "mother",   "area",   "money",  "story",   "fact",    "month",
    "lot",      "right",   "study",    "book",   "eye",    "job",     "word",    "business",
    "issue",    "side",    "kind",     "head",   "house",  "service", "friend",  "father",
    "power",    "hour",    "game",     "line",   "end",    "member",  "law",     "car",
    "city",     "name",    "team",     "minute", "idea",   "kid",     "body",    "back",
    "parent",   "face",    "others",   "level",  "office", "door",    "health",  "person",
    "art",      "war",     "history",  "party",  "result", "change",  "morning", "reason",
    "research", "girl",    "guy",      "moment", "air",    "teacher", "force",   "education",
    "little",   "happy",   "tree",     "garden", "sun",    "dog",     "cat",     "bird",
    "boat",     "river"};

/// The vocabulary size that random token ids are drawn from: the flag, or config.json of the
/// tokenizer directory (or of --model when it is a local directory).
int64_t vocab_size(const ServeBenchOptions& o, const std::string& model) {
  if (o.random_vocab_size > 0) return o.random_vocab_size;
  // A Hub repo id: --tokenizer from the Hugging Face cache or the Hub, the served model name
  // from the cache only (it may be any name).
  std::string tokenizer = o.tokenizer, model_dir = model;
  std::error_code ec;
  if (!tokenizer.empty() && !std::filesystem::exists(tokenizer, ec) && hub::is_repo_id(tokenizer)) {
    tokenizer = resolve_model_argument(tokenizer, "", /*weights=*/false, hub_config_from_env(""));
  }
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
  throw InvalidArgument(
      "--dataset random needs the vocabulary size for token-id prompts: pass --random-vocab-size "
      "or --tokenizer <model directory with config.json>");
}

int sample_len(int len, double range_ratio, std::mt19937_64& rng) {
  const int lo = std::max(1, static_cast<int>(std::floor(len * (1 - range_ratio))));
  const int hi = std::max(lo, static_cast<int>(std::ceil(len * (1 + range_ratio))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

struct Dataset {
  std::vector<client::StreamRequest> requests;
  std::vector<int64_t> input_lens;  // requested prompt lengths (tokens; words for chat)
};

/// vLLM's random dataset: prompts of random token ids (completions) or random words (chat),
/// max_tokens = the output length and ignore_eos, so that every request generates all of it.
Dataset make_random_dataset(const ServeBenchOptions& o, const std::string& model) {
  const bool chat = o.endpoint.find("chat") != std::string::npos;
  const int64_t vocab = chat ? 0 : vocab_size(o, model);
  std::mt19937_64 rng(o.seed);
  Dataset d;
  for (int i = 0; i < o.num_prompts; ++i) {
    const int input_len = sample_len(o.random_input_len, o.random_range_ratio, rng);
    const int output_len = sample_len(o.random_output_len, o.random_range_ratio, rng);
    json body = {{"model", model},
                 {"max_tokens", output_len},
                 {"temperature", o.temperature},
                 {"ignore_eos", true},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    if (chat) {
      std::string text;
      for (int t = 0; t < input_len; ++t) {
        if (t > 0) text += ' ';
        text += kWords[rng() % std::size(kWords)];
      }
      body["messages"] = json::array({{{"role", "user"}, {"content", text}}});
    } else {
      std::vector<int64_t> ids(input_len);
      for (int64_t& id : ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
      body["prompt"] = ids;
    }
    if (!o.extra_body.empty()) body.update(json::parse(o.extra_body));
    d.requests.push_back({o.endpoint, body.dump()});
    d.input_lens.push_back(input_len);
  }
  return d;
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
  const std::pair<const char*, const client::Summary*> summaries[] = {
      {"ttft", &m.ttft}, {"tpot", &m.tpot}, {"itl", &m.itl}, {"e2el", &m.e2el}};
  for (const auto& [name, s] : summaries) {
    r[fmt::format("mean_{}_ms", name)] = s->mean_ms;
    r[fmt::format("median_{}_ms", name)] = s->median_ms;
    r[fmt::format("std_{}_ms", name)] = s->std_ms;
    r[fmt::format("p99_{}_ms", name)] = s->p99_ms;
  }
  if (prefix) {
    r["prefix_cache_queries"] = prefix->queries;
    r["prefix_cache_hits"] = prefix->hits;
    r["prefix_cache_hit_rate"] = prefix->hit_rate();
  }
  return r;
}

int run_serve_bench(const ServeBenchOptions& o) {
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
  const Dataset dataset = make_random_dataset(o, model);

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
      client::run_streaming_load(endpoint, {dataset.requests.front()}, load_options);
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
  const client::LoadResult load =
      client::run_streaming_load(endpoint, dataset.requests, load_options);
  const auto after = read_prefix_cache(endpoint, o.api_key);
  std::optional<client::PrefixCacheDelta> prefix;
  if (before && after)
    prefix = client::PrefixCacheDelta{after->queries - before->queries, after->hits - before->hits};

  const client::BenchmarkMetrics m =
      client::calculate_metrics(load.results, dataset.input_lens, load.duration_s);
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
  cmd->add_option("--base-url", o->base_url, "the server, http://host:port")->capture_default_str();
  cmd->add_option("--model", o->model, "model name (default: the first of /v1/models)");
  cmd->add_option("--endpoint", o->endpoint, "API endpoint")
      ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}))
      ->capture_default_str();
  cmd->add_option("--dataset,--dataset-name", o->dataset, "prompt source")
      ->check(CLI::IsMember({"random"}))
      ->capture_default_str();
  cmd->add_option("--random-input-len", o->random_input_len, "prompt tokens (words for chat)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--random-output-len", o->random_output_len, "output tokens (max_tokens)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--random-range-ratio", o->random_range_ratio,
                  "lengths are drawn from [len*(1-r), len*(1+r)]")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--random-vocab-size", o->random_vocab_size,
                  "token ids are drawn below this (default: vocab_size of --tokenizer's config)");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "model directory or Hub repo id whose config.json gives the vocab");
  cmd->add_option("--num-prompts", o->num_prompts, "requests")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option(
         "--request-rate", o->request_rate,
         "requests/s, arrivals a Poisson process (gamma with --burstiness); inf: all at once")
      ->capture_default_str();
  cmd->add_option("--burstiness", o->burstiness, "gamma shape of the inter-arrival times")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-concurrency", o->max_concurrency,
                  "most requests in flight (default: no limit)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--save-result", o->save_result, "write the results as JSON to FILE");
  cmd->add_option("--seed", o->seed, "seed of the prompts and the arrival times")
      ->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "sent as Authorization: Bearer")
      ->envname("OPENAI_API_KEY");
  cmd->add_option("--temperature", o->temperature, "sampling temperature")->capture_default_str();
  cmd->add_option("--extra-body", o->extra_body,
                  "a JSON object merged into every request body, e.g. "
                  "'{\"guided_json\": {...}}'")
      ->check([](const std::string& text) -> std::string {
        const json j = json::parse(text, nullptr, false);
        return j.is_object() ? "" : "--extra-body must be a JSON object";
      });
  cmd->add_option("--num-client-threads", o->num_threads,
                  "threads reading the streams (default: up to 4)");
  cmd->add_option("--request-timeout", o->timeout_s, "seconds of silence before a request fails")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->callback([o, &exit_code] { exit_code = run_serve_bench(*o); });
}

}  // namespace pagoda::cli
