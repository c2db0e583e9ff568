#include "server/client/bench_metrics.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <numeric>

namespace pagoda::client {
namespace {

std::string line(std::string_view label, double value) {
  return fmt::format("{:<40} {:<10.2f}\n", label, value);
}
std::string line(std::string_view label, int64_t value) {
  return fmt::format("{:<40} {:<10}\n", label, value);
}
/// A title centred in 50 columns of `fill`, as Python's "{:c^50}" (extra fill goes right).
std::string rule(std::string_view title, char fill) {
  const size_t pad = title.size() < 50 ? 50 - title.size() : 0;
  return std::string(pad / 2, fill) + std::string(title) + std::string(pad - pad / 2, fill) + "\n";
}
std::string section(std::string_view header, std::string_view name, const Summary& s) {
  return rule(header, '-') + line(fmt::format("Mean {} (ms):", name), s.mean_ms) +
         line(fmt::format("Median {} (ms):", name), s.median_ms) +
         line(fmt::format("P99 {} (ms):", name), s.p99_ms);
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

Summary summarize_seconds(const std::vector<double>& seconds) {
  Summary s;
  if (seconds.empty()) return s;
  const double n = static_cast<double>(seconds.size());
  const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / n;
  double var = 0;
  for (double v : seconds) var += (v - mean) * (v - mean);
  s.mean_ms = mean * 1000;
  s.std_ms = std::sqrt(var / n) * 1000;
  s.median_ms = percentile(seconds, 50) * 1000;
  s.p99_ms = percentile(seconds, 99) * 1000;
  return s;
}

BenchmarkMetrics calculate_metrics(const std::vector<StreamResult>& results,
                                   const std::vector<int64_t>& requested_input_lens,
                                   double duration_s) {
  BenchmarkMetrics m;
  std::vector<double> ttfts, tpots, itls, e2els;
  double first_start = INFINITY, last_end = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const StreamResult& r = results[i];
    if (!r.success) {
      ++m.failed;
      m.input_lens.push_back(0);
      m.output_lens.push_back(0);
      continue;
    }
    ++m.completed;
    const int64_t output_len =
        r.output_tokens >= 0 ? r.output_tokens : static_cast<int64_t>(r.itl.size()) + 1;
    const int64_t input_len = r.prompt_tokens >= 0              ? r.prompt_tokens
                              : i < requested_input_lens.size() ? requested_input_lens[i]
                                                                : 0;
    m.input_lens.push_back(input_len);
    m.output_lens.push_back(output_len);
    m.total_input += input_len;
    m.total_output += output_len;
    if (output_len > 1) tpots.push_back((r.latency - r.ttft) / static_cast<double>(output_len - 1));
    itls.insert(itls.end(), r.itl.begin(), r.itl.end());
    ttfts.push_back(r.ttft);
    e2els.push_back(r.latency);
    first_start = std::min(first_start, r.start_time);
    last_end = std::max(last_end, r.start_time + r.latency);
  }
  if (duration_s > 0) {
    m.request_throughput = m.completed / duration_s;
    m.output_throughput = static_cast<double>(m.total_output) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
  }
  m.ttft = summarize_seconds(ttfts);
  m.tpot = summarize_seconds(tpots);
  m.itl = summarize_seconds(itls);
  m.e2el = summarize_seconds(e2els);
  if (m.completed == 0) return m;

  // Output chunks per one-second bucket, from each request's first-token time and its gaps.
  std::vector<double> per_second(static_cast<size_t>(std::ceil(last_end - first_start)) + 1, 0);
  std::vector<std::pair<double, int>> events;  // (time, +1 start / -1 end)
  for (const StreamResult& r : results) {
    if (!r.success) continue;
    double t = r.start_time + r.ttft;
    auto count = [&](double time) {
      const auto bucket = static_cast<int64_t>(time - first_start);
      if (bucket >= 0 && bucket < static_cast<int64_t>(per_second.size())) ++per_second[bucket];
    };
    count(t);
    for (double gap : r.itl) count(t += gap);
    events.emplace_back(r.start_time, 1);
    events.emplace_back(r.start_time + r.latency, -1);
  }
  m.max_output_tokens_per_s = *std::max_element(per_second.begin(), per_second.end());
  // Half-open intervals: at equal times an end comes before a start.
  std::sort(events.begin(), events.end());
  int current = 0;
  for (const auto& [time, delta] : events)
    m.max_concurrent_requests = std::max(m.max_concurrent_requests, current += delta);
  return m;
}

std::string format_report(const BenchmarkMetrics& m, const ReportHeader& header,
                          const std::optional<PrefixCacheDelta>& prefix_cache) {
  std::string out = rule(" Serving Benchmark Result ", '=');
  out += line("Successful requests:", static_cast<int64_t>(m.completed));
  out += line("Failed requests:", static_cast<int64_t>(m.failed));
  if (header.max_concurrency)
    out += line("Maximum request concurrency:", static_cast<int64_t>(*header.max_concurrency));
  if (!std::isinf(header.request_rate))
    out += line("Request rate configured (RPS):", header.request_rate);
  out += line("Benchmark duration (s):", header.duration_s);
  out += line("Total input tokens:", m.total_input);
  out += line("Total generated tokens:", m.total_output);
  out += line("Request throughput (req/s):", m.request_throughput);
  out += line("Output token throughput (tok/s):", m.output_throughput);
  out += line("Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
  out += line("Peak concurrent requests:", static_cast<double>(m.max_concurrent_requests));
  out += line("Total token throughput (tok/s):", m.total_token_throughput);
  out += section("Time to First Token", "TTFT", m.ttft);
  out += section("Time per Output Token (excl. 1st token)", "TPOT", m.tpot);
  out += section("Inter-token Latency", "ITL", m.itl);
  out += section("End-to-end Latency", "E2EL", m.e2el);
  if (prefix_cache) {
    out += rule("Prefix Cache", '-');
    out += line("Prefix cache queries (tokens):", static_cast<int64_t>(prefix_cache->queries));
    out += line("Prefix cache hits (tokens):", static_cast<int64_t>(prefix_cache->hits));
    out += line("Prefix cache hit rate (%):", prefix_cache->hit_rate() * 100);
  }
  out += std::string(50, '=') + "\n";
  return out;
}

}  // namespace pagoda::client
