#pragma once
// Serving metrics in the Prometheus text format, with vLLM's metric names under a configurable
// prefix ("pagoda:" by default, "vllm:" for existing vLLM dashboards), labelled model_name and
// engine ("0", the one engine core) as vLLM v1 labels them.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace pagoda::server {

/// What the server observed of one finished completion (vLLM's finished request: each of the n
/// completions of a request is one).
struct RequestRecord {
  std::string finished_reason;  // "stop", "length" or "abort"
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t max_tokens_param = 0;     // the request's max_tokens (tokens); 0: not observed
  double ttft_seconds = 0;          // arrival at the server -> first token
  std::vector<double> itl_seconds;  // gaps between successive tokens
  double e2e_seconds = 0;           // arrival -> finish
  double queue_seconds = 0;         // from RequestOutput::queue_seconds
  double prefill_seconds = 0;       // from RequestOutput::prefill_seconds (scheduled -> 1st token)
  double decode_seconds = 0;        // first token -> finish
};

/// One engine request whose n completions have all finished (vLLM's parent request).
struct ParentRecord {
  int n = 1;                          // the request's n parameter
  int64_t max_generation_tokens = 0;  // the most tokens one of its completions generated
};

/// How the /metrics page is labelled and bucketed.
struct MetricsOptions {
  std::string model_name = "model";  // the model_name label
  std::string prefix = "pagoda";     // "pagoda" or "vllm" (a trailing ':' is accepted)
  /// Tokens: the token-count histograms' buckets are 1, 2, 5, 10, 20, 50, ... up to this (vLLM's
  /// build_1_2_5_buckets(max_model_len)); must be >= 1.
  int64_t max_model_len = 0;
  CacheInfo cache;  // the KV cache, as cache_config_info reports it
};

/// Thread-safe collector of the serving metrics; render() also reads the engine's gauges.
class ServingMetrics {
 public:
  explicit ServingMetrics(MetricsOptions options);

  void record(const RequestRecord& record);
  void record(const ParentRecord& record);
  /// The whole /metrics page. From EngineStats: the gauges num_requests_running,
  /// num_requests_waiting, kv_cache_usage_perc (and its old name gpu_cache_usage_perc), the
  /// counters prefix_cache_queries_total, prefix_cache_hits_total,
  /// with a host KV tier (options.cache.host_kv_blocks > 0) external_prefix_cache_queries_total,
  /// external_prefix_cache_hits_total, host_kv_cache_usage_perc, host_kv_blocks_saved_total and
  /// host_kv_blocks_loaded_total, then num_preemptions_total,
  /// prompt_tokens_total, generation_tokens_total (and spec_decode_* with speculation) and the
  /// histogram iteration_tokens_total. From the records: request_success_total{finished_reason},
  /// the token histograms request_prompt_tokens, request_generation_tokens,
  /// request_max_num_generation_tokens, request_params_n, request_params_max_tokens, and the
  /// latency histograms time_to_first_token_seconds, inter_token_latency_seconds,
  /// time_per_output_token_seconds (vLLM's older name of the same gaps),
  /// request_time_per_output_token_seconds, e2e_request_latency_seconds,
  /// request_queue_time_seconds, request_inference_time_seconds, request_prefill_time_seconds,
  /// request_decode_time_seconds. Last, the gauge cache_config_info (value 1).
  [[nodiscard]] std::string render(const EngineStats& stats) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace pagoda::server
