#pragma once
// Serving metrics in the Prometheus text format, with vLLM's metric names under a configurable
// prefix ("pagoda:" by default, "vllm:" for existing vLLM dashboards), all labelled model_name.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace pagoda::server {

/// What the server observed of one finished completion.
struct RequestRecord {
  std::string finished_reason;  // "stop", "length" or "abort"
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  double ttft_seconds = 0;          // arrival at the server -> first token
  std::vector<double> itl_seconds;  // gaps between successive tokens
  double e2e_seconds = 0;           // arrival -> finish
  double queue_seconds = 0;         // from RequestOutput::queue_seconds
  double prefill_seconds = 0;       // from RequestOutput::prefill_seconds
  double decode_seconds = 0;        // first token -> finish
};

/// Thread-safe collector of the serving metrics; render() also reads the engine's gauges.
class ServingMetrics {
 public:
  ServingMetrics(std::string model_name, std::string prefix);

  void record(const RequestRecord& record);
  /// The whole /metrics page: counters (pagoda:prompt_tokens_total, pagoda:generation_tokens_total,
  /// pagoda:request_success_total{finished_reason}, pagoda:num_preemptions_total,
  /// pagoda:prefix_cache_queries_total, pagoda:prefix_cache_hits_total), gauges
  /// (pagoda:num_requests_running, pagoda:num_requests_waiting, pagoda:kv_cache_usage_perc) and
  /// histograms (pagoda:time_to_first_token_seconds, pagoda:inter_token_latency_seconds,
  /// pagoda:e2e_request_latency_seconds, pagoda:request_queue_time_seconds,
  /// pagoda:request_prefill_time_seconds, pagoda:request_decode_time_seconds).
  [[nodiscard]] std::string render(const EngineStats& stats) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace pagoda::server
