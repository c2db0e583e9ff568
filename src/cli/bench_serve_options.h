#pragma once
// The options of `pagoda bench serve` (vLLM's `vllm bench serve` flag names), their validation and
// the request body each prompt becomes.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/client/bench_datasets.h"
#include "server/client/bench_metrics.h"

namespace pagoda::cli {

struct ServeBenchOptions {
  std::string base_url = "http://127.0.0.1:8000";
  std::string model;
  std::string endpoint = "/v1/completions";  // or /v1/chat/completions
  std::string dataset = "random";            // random, prefix_repetition or sharegpt
  std::string dataset_path;                  // sharegpt: the JSON file
  int random_input_len = 1024;               // tokens (words for chat)
  int random_output_len = 128;               // tokens
  double random_range_ratio = 0;
  int random_prefix_len = 0;      // tokens shared by every random prompt
  int64_t random_vocab_size = 0;  // 0: vocab_size of --tokenizer's (or --model's) config.json
  int prefix_repetition_prefix_len = 256;
  int prefix_repetition_suffix_len = 256;
  int prefix_repetition_num_prefixes = 10;
  int prefix_repetition_output_len = 128;
  std::optional<int> sharegpt_output_len;  // tokens; nullopt: the reply's length
  bool no_oversample = false;
  std::string tokenizer;  // model directory (config.json, tokenizer.json) or tokenizer.json
  int num_prompts = 1000;
  std::string request_rate = "inf";  // requests/s or "inf"
  double burstiness = 1.0;
  int max_concurrency = 0;  // 0: no limit
  std::string save_result;  // a JSON file of the results; empty: none
  uint64_t seed = 0;
  std::string api_key;
  // Sampling, sent in every request (vLLM's sampling flags; unset ones are not sent).
  double temperature = 0;       // >= 0; 0: greedy (always sent, vLLM's default)
  std::optional<double> top_p;  // (0, 1]
  std::optional<int> top_k;     // -1 or 0: off, else >= 1
  std::optional<double> min_p;  // [0, 1]
  std::optional<int> logprobs;  // >= 0: top log-probabilities per token
  std::string extra_body;       // a JSON object merged into every request last (e.g. guided_json)
  // The report.
  std::string percentile_metrics = "ttft,tpot,itl";  // from ttft, tpot, itl, e2el
  std::string metric_percentiles = "99";             // percentiles in [0, 100]
  std::vector<std::string> goodput;                  // KEY:VALUE objectives in ms
  int num_threads = 0;                               // 0: up to 4
  double timeout_s = 3600;                           // seconds of silence before a request fails
};

/// Declares the options on `cmd` (flags, defaults, help).
void add_serve_bench_options(CLI::App& cmd, ServeBenchOptions& o);

/// Checks what the flags alone cannot (InvalidArgument naming the flag): the sampling values, the
/// extra body, the dataset's flags, the report's metrics and percentiles, the goodput objectives.
void validate(const ServeBenchOptions& o);

/// The report's configuration from the options (validated).
[[nodiscard]] client::MetricsConfig metrics_config(const ServeBenchOptions& o);

/// The streamed request body of one prompt: the model, max_tokens = its output length and
/// ignore_eos (every request generates all of it), the sampling flags, the prompt (token ids or
/// text; a user message for chat), then --extra-body merged over it.
[[nodiscard]] nlohmann::json request_body(const ServeBenchOptions& o, const std::string& model,
                                          const client::SampleRequest& request);

/// The dataset's requests. `count_tokens` counts a text's tokens (ShareGPT); `vocab_size` is the
/// range of random token ids (unused for chat, whose synthetic prompts are words).
[[nodiscard]] std::vector<client::SampleRequest> sample_dataset(
    const ServeBenchOptions& o, int64_t vocab_size, const client::TokenCounter& count_tokens);

}  // namespace pagoda::cli
