#pragma once
// The statistics `pagoda bench serve` reports, computed as vLLM's `bench serve` computes them, and
// its printed report.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/client/http_client.h"

namespace pagoda::client {

/// Mean, median, standard deviation and the chosen percentiles of a sample, in milliseconds;
/// numpy's definitions (population std, linear interpolation between order statistics). All 0
/// when empty.
struct Summary {
  double mean_ms = 0;
  double median_ms = 0;
  double std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (percentile in [0, 100], value)
};

[[nodiscard]] double percentile(std::vector<double> values, double p);
[[nodiscard]] Summary summarize_seconds(const std::vector<double>& seconds,
                                        const std::vector<double>& percentiles = {99});

/// The metrics whose statistics the report prints (--percentile-metrics), in vLLM's order.
inline constexpr const char* kPercentileMetrics[] = {"ttft", "tpot", "itl", "e2el"};

/// --percentile-metrics "ttft,tpot,itl,e2el" (a comma-separated subset, none twice) in the
/// given order; InvalidArgument naming the flag otherwise.
[[nodiscard]] std::vector<std::string> parse_percentile_metrics(std::string_view text);
/// --metric-percentiles "25,50,99": numbers in [0, 100]; InvalidArgument naming the flag.
[[nodiscard]] std::vector<double> parse_metric_percentiles(std::string_view text);
/// vLLM's name of percentile p in the report and the JSON keys: "99", "99.9".
[[nodiscard]] std::string percentile_word(double p);

/// --goodput's service level objectives, in milliseconds: a request is good when each of its
/// metrics named here is at most the objective (TPOT of a one-token request counts as 0).
struct GoodputSlos {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2el_ms;
  [[nodiscard]] bool empty() const { return !ttft_ms && !tpot_ms && !e2el_ms; }
};

/// --goodput ttft:500 tpot:50 e2el:1000: KEY:VALUE pairs, keys ttft, tpot or e2el (once each),
/// values non-negative milliseconds; InvalidArgument naming the flag otherwise.
[[nodiscard]] GoodputSlos parse_goodput(const std::vector<std::string>& pairs);

/// What calculate_metrics() computes beyond the fixed statistics.
struct MetricsConfig {
  std::vector<double> percentiles = {99};  // --metric-percentiles
  GoodputSlos goodput;                     // --goodput; empty: no goodput
};

struct BenchmarkMetrics {
  int completed = 0;
  int failed = 0;
  int64_t total_input = 0;
  int64_t total_output = 0;
  double request_throughput = 0;  // completed requests / duration
  int good_completed = 0;         // requests that met every --goodput objective
  double request_goodput = 0;     // good_completed / duration
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
                                                 double duration_s,
                                                 const MetricsConfig& config = {});

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
  bool goodput = false;  // print "Request goodput (req/s):"
  /// The metrics with a section (mean, median, each percentile), from kPercentileMetrics.
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};
};

/// The result block exactly as `vllm bench serve` lays it out, plus a prefix-cache section.
[[nodiscard]] std::string format_report(const BenchmarkMetrics& m, const ReportHeader& header,
                                        const std::optional<PrefixCacheDelta>& prefix_cache);

}  // namespace pagoda::client
