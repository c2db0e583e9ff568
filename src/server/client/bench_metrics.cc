#include "server/client/bench_metrics.h"

#include <fmt/format.h>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include "core/status.h"

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
  std::string out = rule(header, '-') + line(fmt::format("Mean {} (ms):", name), s.mean_ms) +
                    line(fmt::format("Median {} (ms):", name), s.median_ms);
  for (const auto& [p, value] : s.percentiles_ms)
    out += line(fmt::format("P{} {} (ms):", percentile_word(p), name), value);
  return out;
}

/// The pieces of `text` between commas (empty pieces included).
std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos) return parts;
    start = comma + 1;
  }
}

/// The whole of `text` as a finite number, or nullopt.
std::optional<double> parse_number(std::string_view text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v))
    return std::nullopt;
  return v;
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

Summary summarize_seconds(const std::vector<double>& seconds,
                          const std::vector<double>& percentiles) {
  Summary s;
  // An empty sample reports 0 for each percentile, as vLLM's np.percentile(values or 0, p).
  for (double p : percentiles) s.percentiles_ms.emplace_back(p, percentile(seconds, p) * 1000);
  if (seconds.empty()) return s;
  const double n = static_cast<double>(seconds.size());
  const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / n;
  double var = 0;
  for (double v : seconds) var += (v - mean) * (v - mean);
  s.mean_ms = mean * 1000;
  s.std_ms = std::sqrt(var / n) * 1000;
  s.median_ms = percentile(seconds, 50) * 1000;
  return s;
}

std::vector<std::string> parse_percentile_metrics(std::string_view text) {
  std::vector<std::string> metrics;
  for (std::string_view part : split_commas(text)) {
    const bool known = std::any_of(std::begin(kPercentileMetrics), std::end(kPercentileMetrics),
                                   [&](const char* m) { return part == m; });
    if (!known) {
      throw InvalidArgument(fmt::format(
          "--percentile-metrics: '{}' is not one of ttft, tpot, itl, e2el (comma-separated)",
          part));
    }
    if (std::find(metrics.begin(), metrics.end(), part) != metrics.end())
      throw InvalidArgument(fmt::format("--percentile-metrics: '{}' is given twice", part));
    metrics.emplace_back(part);
  }
  return metrics;
}

std::vector<double> parse_metric_percentiles(std::string_view text) {
  std::vector<double> percentiles;
  for (std::string_view part : split_commas(text)) {
    const std::optional<double> p = parse_number(part);
    if (!p || *p < 0 || *p > 100) {
      throw InvalidArgument(fmt::format(
          "--metric-percentiles: '{}' is not a percentile in [0, 100] (comma-separated, e.g. "
          "25,50,99)",
          part));
    }
    percentiles.push_back(*p);
  }
  return percentiles;
}

std::string percentile_word(double p) {
  if (p == std::floor(p)) return fmt::format("{}", static_cast<int64_t>(p));
  return fmt::format("{}", p);
}

GoodputSlos parse_goodput(const std::vector<std::string>& pairs) {
  GoodputSlos slos;
  for (const std::string& pair : pairs) {
    const size_t colon = pair.find(':');
    const std::optional<double> value =
        colon == std::string::npos ? std::nullopt : parse_number(pair.substr(colon + 1));
    if (!value) {
      throw InvalidArgument(fmt::format(
          "--goodput: '{}' is not KEY:VALUE, a metric name and a number of milliseconds (e.g. "
          "ttft:500 tpot:50 e2el:1000)",
          pair));
    }
    const std::string name = pair.substr(0, colon);
    std::optional<double>* slot = name == "ttft"   ? &slos.ttft_ms
                                  : name == "tpot" ? &slos.tpot_ms
                                  : name == "e2el" ? &slos.e2el_ms
                                                   : nullptr;
    if (slot == nullptr) {
      throw InvalidArgument(fmt::format(
          "--goodput: '{}' names no objective: the keys are ttft, tpot and e2el", pair));
    }
    if (*value < 0)
      throw InvalidArgument(fmt::format("--goodput: '{}': an objective is >= 0 ms", pair));
    if (*slot) throw InvalidArgument(fmt::format("--goodput: {} is given twice", name));
    *slot = *value;
  }
  return slos;
}

BenchmarkMetrics calculate_metrics(const std::vector<StreamResult>& results,
                                   const std::vector<int64_t>& requested_input_lens,
                                   double duration_s, const MetricsConfig& config) {
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
    const double tpot =
        output_len > 1 ? (r.latency - r.ttft) / static_cast<double>(output_len - 1) : 0.0;
    if (output_len > 1) tpots.push_back(tpot);
    // Goodput, as vLLM counts it: a request is good when it meets every objective given.
    const GoodputSlos& slo = config.goodput;
    if (!slo.empty() && (!slo.ttft_ms || r.ttft * 1000 <= *slo.ttft_ms) &&
        (!slo.tpot_ms || tpot * 1000 <= *slo.tpot_ms) &&
        (!slo.e2el_ms || r.latency * 1000 <= *slo.e2el_ms)) {
      ++m.good_completed;
    }
    itls.insert(itls.end(), r.itl.begin(), r.itl.end());
    ttfts.push_back(r.ttft);
    e2els.push_back(r.latency);
    first_start = std::min(first_start, r.start_time);
    last_end = std::max(last_end, r.start_time + r.latency);
  }
  if (duration_s > 0) {
    m.request_throughput = m.completed / duration_s;
    m.request_goodput = m.good_completed / duration_s;
    m.output_throughput = static_cast<double>(m.total_output) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
  }
  m.ttft = summarize_seconds(ttfts, config.percentiles);
  m.tpot = summarize_seconds(tpots, config.percentiles);
  m.itl = summarize_seconds(itls, config.percentiles);
  m.e2el = summarize_seconds(e2els, config.percentiles);
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
  if (header.goodput) out += line("Request goodput (req/s):", m.request_goodput);
  out += line("Output token throughput (tok/s):", m.output_throughput);
  out += line("Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
  out += line("Peak concurrent requests:", static_cast<double>(m.max_concurrent_requests));
  out += line("Total token throughput (tok/s):", m.total_token_throughput);
  // The chosen metrics' sections, in vLLM's order whatever the order of the flag.
  const auto chosen = [&](std::string_view metric) {
    return std::find(header.percentile_metrics.begin(), header.percentile_metrics.end(), metric) !=
           header.percentile_metrics.end();
  };
  if (chosen("ttft")) out += section("Time to First Token", "TTFT", m.ttft);
  if (chosen("tpot")) out += section("Time per Output Token (excl. 1st token)", "TPOT", m.tpot);
  if (chosen("itl")) out += section("Inter-token Latency", "ITL", m.itl);
  if (chosen("e2el")) out += section("End-to-end Latency", "E2EL", m.e2el);
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
