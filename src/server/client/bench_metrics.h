#pragma once
// The statistics `pagoda bench serve` reports, computed as vLLM's `bench serve` computes them, and
// its printed report.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/client/http_client.h"

namespace pagoda::client {

/// Mean, median, standard deviation and 99th percentile of a sample, in milliseconds; numpy's
/// definitions (population std, linear interpolation between order statistics). All 0 when empty.
struct Summary {
  double mean_ms = 0;
  double median_ms = 0;
  double std_ms = 0;
  double p99_ms = 0;
};

[[nodiscard]] double percentile(std::vector<double> values, double p);
[[nodiscard]] Summary summarize_seconds(const std::vector<double>& seconds);

struct BenchmarkMetrics {
  int completed = 0;
  int failed = 0;
  int64_t total_input = 0;
  int64_t total_output = 0;
  double request_throughput = 0;  // completed requests / duration
  double output_throughput = 0;   // output tokens / duration
  double total_token_throughput = 0;
  double max_output_tokens_per_s = 0;  // the busiest one-second bucket
  int max_concurrent_requests = 0;     // peak overlap of the successful requests
  Summary ttft, tpot, itl, e2el;
  std::vector<int64_t> input_lens;   // per request; 0 for a failure
  std::vector<int64_t> output_lens;  // per request; 0 for a failure
};

/// Output tokens come from each request's usage (else its number of chunks); input tokens from the
/// usage too, else from `requested_input_lens`. TPOT = (latency - ttft) / (output tokens - 1) over
/// the requests with more than one token.
[[nodiscard]] BenchmarkMetrics calculate_metrics(const std::vector<StreamResult>& results,
                                                 const std::vector<int64_t>& requested_input_lens,
                                                 double duration_s);

/// The prefix cache of the server during the run, from /metrics read before and after.
struct PrefixCacheDelta {
  double queries = 0;  // tokens
  double hits = 0;     // tokens
  [[nodiscard]] double hit_rate() const { return queries > 0 ? hits / queries : 0; }
};

struct ReportHeader {
  std::optional<int> max_concurrency;
  double request_rate = 0;  // inf: not printed
  double duration_s = 0;
};

/// The result block exactly as `vllm bench serve` lays it out, plus a prefix-cache section.
[[nodiscard]] std::string format_report(const BenchmarkMetrics& m, const ReportHeader& header,
                                        const std::optional<PrefixCacheDelta>& prefix_cache);

}  // namespace pagoda::client
