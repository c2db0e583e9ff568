#include "cli/bench_serve_options.h"

#include <fmt/format.h>

#include <cmath>

#include "core/status.h"

namespace pagoda::cli {

using nlohmann::json;

void add_serve_bench_options(CLI::App& cmd, ServeBenchOptions& o) {
  cmd.add_option("--base-url", o.base_url, "the server, http://host:port")->capture_default_str();
  cmd.add_option("--model", o.model, "model name (default: the first of /v1/models)");
  cmd.add_option("--endpoint", o.endpoint, "API endpoint")
      ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}))
      ->capture_default_str();
  cmd.add_option("--dataset,--dataset-name", o.dataset, "prompt source")
      ->check(CLI::IsMember({"random", "prefix_repetition", "sharegpt"}))
      ->capture_default_str();
  cmd.add_option("--dataset-path", o.dataset_path,
                 "sharegpt: a JSON list of {\"conversations\": [{\"from\", \"value\"}, ...]}");
  cmd.add_option("--random-input-len", o.random_input_len,
                 "random: prompt tokens after the prefix (words for chat)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--random-output-len", o.random_output_len, "random: output tokens (max_tokens)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--random-range-ratio", o.random_range_ratio,
                 "random: lengths are drawn from [len*(1-r), len*(1+r)], r in [0, 1)")
      ->capture_default_str();
  cmd.add_option("--random-prefix-len", o.random_prefix_len,
                 "random: tokens of one random prefix that every prompt starts with")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_option("--random-vocab-size", o.random_vocab_size,
                 "token ids are drawn below this (default: vocab_size of --tokenizer's config)");
  cmd.add_option("--prefix-repetition-prefix-len", o.prefix_repetition_prefix_len,
                 "prefix_repetition: tokens of each shared prefix")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--prefix-repetition-suffix-len", o.prefix_repetition_suffix_len,
                 "prefix_repetition: tokens of each prompt's own suffix")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--prefix-repetition-num-prefixes", o.prefix_repetition_num_prefixes,
                 "prefix_repetition: distinct prefixes, each shared by num-prompts / this prompts")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--prefix-repetition-output-len", o.prefix_repetition_output_len,
                 "prefix_repetition: output tokens (max_tokens)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--sharegpt-output-len", o.sharegpt_output_len,
                 "sharegpt: output tokens of every request (default: the reply's length)")
      ->check(CLI::PositiveNumber);
  cmd.add_flag("--no-oversample", o.no_oversample,
               "sharegpt: send fewer requests when fewer conversations pass the filter");
  cmd.add_option("--tokenizer", o.tokenizer,
                 "model directory or Hub repo id (config.json gives the vocabulary, "
                 "tokenizer.json counts sharegpt's tokens) or a tokenizer.json");
  cmd.add_option("--num-prompts", o.num_prompts, "requests")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option(
         "--request-rate", o.request_rate,
         "requests/s, arrivals a Poisson process (gamma with --burstiness); inf: all at once")
      ->capture_default_str();
  cmd.add_option("--burstiness", o.burstiness, "gamma shape of the inter-arrival times")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--max-concurrency", o.max_concurrency,
                 "most requests in flight (default: no limit)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--save-result", o.save_result, "write the results as JSON to FILE");
  cmd.add_option("--seed", o.seed, "seed of the prompts and the arrival times")
      ->capture_default_str();
  cmd.add_option("--api-key", o.api_key, "sent as Authorization: Bearer")
      ->envname("OPENAI_API_KEY");
  cmd.add_option("--temperature", o.temperature, "sampling temperature (0: greedy)")
      ->capture_default_str();
  cmd.add_option("--top-p", o.top_p, "nucleus sampling mass in (0, 1], sent in every request");
  cmd.add_option("--top-k", o.top_k, "sample among the k most likely tokens (-1 or 0: all)");
  cmd.add_option("--min-p", o.min_p, "drop tokens below min_p times the top probability, [0, 1]");
  cmd.add_option("--logprobs", o.logprobs,
                 "top log-probabilities per output token (chat: logprobs + top_logprobs)");
  cmd.add_option("--extra-body", o.extra_body,
                 "a JSON object merged into every request body last, e.g. "
                 "'{\"guided_json\": {...}}'");
  cmd.add_option("--percentile-metrics", o.percentile_metrics,
                 "metrics reported with percentiles: a comma-separated subset of "
                 "ttft,tpot,itl,e2el")
      ->capture_default_str();
  cmd.add_option("--metric-percentiles", o.metric_percentiles,
                 "percentiles reported, comma-separated, e.g. 25,50,99")
      ->capture_default_str();
  cmd.add_option("--goodput", o.goodput,
                 "service level objectives KEY:VALUE in ms (keys ttft, tpot, e2el), e.g. "
                 "--goodput ttft:500 tpot:50; reports the requests/s that meet them all");
  cmd.add_option("--num-client-threads", o.num_threads,
                 "threads reading the streams (default: up to 4)");
  cmd.add_option("--request-timeout", o.timeout_s, "seconds of silence before a request fails")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

void validate(const ServeBenchOptions& o) {
  auto fail = [](std::string message) { throw InvalidArgument(std::move(message)); };
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    fail(fmt::format("--temperature must be >= 0, got {}", o.temperature));
  if (o.top_p && !(*o.top_p > 0 && *o.top_p <= 1))
    fail(fmt::format("--top-p must be in (0, 1], got {}", *o.top_p));
  if (o.top_k && *o.top_k < -1)
    fail(fmt::format("--top-k must be -1 or 0 (all tokens) or >= 1, got {}", *o.top_k));
  if (o.min_p && !(*o.min_p >= 0 && *o.min_p <= 1))
    fail(fmt::format("--min-p must be in [0, 1], got {}", *o.min_p));
  if (o.logprobs && *o.logprobs < 0)
    fail(fmt::format("--logprobs must be >= 0, got {}", *o.logprobs));
  if (!o.extra_body.empty() && !json::parse(o.extra_body, nullptr, false).is_object())
    fail(fmt::format("--extra-body must be a JSON object, got: {}", o.extra_body));
  if (o.num_prompts < 1) fail(fmt::format("--num-prompts must be >= 1, got {}", o.num_prompts));
  if (o.num_threads < 0)
    fail(fmt::format("--num-client-threads must be >= 0, got {}", o.num_threads));
  if (o.random_vocab_size < 0) {
    fail(fmt::format("--random-vocab-size must be >= 1 (or 0: from --tokenizer), got {}",
                     o.random_vocab_size));
  }
  if (o.dataset == "sharegpt" && o.dataset_path.empty())
    fail("--dataset-name sharegpt needs --dataset-path FILE (a ShareGPT JSON file)");
  if (o.dataset != "sharegpt" && !o.dataset_path.empty())
    fail(fmt::format("--dataset-path is for --dataset-name sharegpt, not {}", o.dataset));
  // The datasets' own flags are checked by their builders; the report's here, before any request.
  (void)metrics_config(o);
  (void)client::parse_percentile_metrics(o.percentile_metrics);
}

client::MetricsConfig metrics_config(const ServeBenchOptions& o) {
  client::MetricsConfig config;
  config.percentiles = client::parse_metric_percentiles(o.metric_percentiles);
  config.goodput = client::parse_goodput(o.goodput);
  return config;
}

json request_body(const ServeBenchOptions& o, const std::string& model,
                  const client::SampleRequest& request) {
  const bool chat = o.endpoint.find("chat") != std::string::npos;
  json body = {{"model", model},
               {"max_tokens", request.output_len},
               {"temperature", o.temperature},
               {"ignore_eos", true},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (o.top_p) body["top_p"] = *o.top_p;
  if (o.top_k) body["top_k"] = *o.top_k;
  if (o.min_p) body["min_p"] = *o.min_p;
  if (o.logprobs) {
    // Completions take the number; chat a flag and the number as top_logprobs (OpenAI's API).
    if (chat) {
      body["logprobs"] = true;
      body["top_logprobs"] = *o.logprobs;
    } else {
      body["logprobs"] = *o.logprobs;
    }
  }
  if (chat) {
    if (!request.prompt_token_ids.empty())
      throw InvalidArgument("the chat endpoint takes text prompts, not token ids");
    body["messages"] = json::array({{{"role", "user"}, {"content", request.prompt_text}}});
  } else if (!request.prompt_token_ids.empty()) {
    body["prompt"] = request.prompt_token_ids;
  } else {
    body["prompt"] = request.prompt_text;
  }
  if (!o.extra_body.empty()) body.update(json::parse(o.extra_body));
  return body;
}

std::vector<client::SampleRequest> sample_dataset(const ServeBenchOptions& o, int64_t vocab_size,
                                                  const client::TokenCounter& count_tokens) {
  const client::SyntheticVocabulary vocabulary{o.endpoint.find("chat") != std::string::npos,
                                               vocab_size};
  if (o.dataset == "random") {
    client::RandomDatasetOptions r;
    r.num_prompts = o.num_prompts;
    r.input_len = o.random_input_len;
    r.output_len = o.random_output_len;
    r.range_ratio = o.random_range_ratio;
    r.prefix_len = o.random_prefix_len;
    r.seed = o.seed;
    return client::sample_random(r, vocabulary);
  }
  if (o.dataset == "prefix_repetition") {
    client::PrefixRepetitionOptions p;
    p.num_prompts = o.num_prompts;
    p.prefix_len = o.prefix_repetition_prefix_len;
    p.suffix_len = o.prefix_repetition_suffix_len;
    p.num_prefixes = o.prefix_repetition_num_prefixes;
    p.output_len = o.prefix_repetition_output_len;
    p.seed = o.seed;
    return client::sample_prefix_repetition(p, vocabulary);
  }
  if (o.dataset == "sharegpt") {
    client::ShareGptOptions s;
    s.path = o.dataset_path;
    s.num_prompts = o.num_prompts;
    s.output_len = o.sharegpt_output_len;
    s.no_oversample = o.no_oversample;
    s.seed = o.seed;
    return client::sample_sharegpt(s, count_tokens);
  }
  throw InvalidArgument(
      fmt::format("--dataset-name '{}' must be random, prefix_repetition or sharegpt", o.dataset));
}

}  // namespace pagoda::cli
