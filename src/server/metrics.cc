// The /metrics page. Names, help texts and histogram buckets follow vLLM's PrometheusStatLogger so
// that dashboards and autoscalers written for vLLM read our series unchanged under --metrics-prefix
// vllm. Counters and gauges that the engine already keeps (tokens, preemptions, prefix cache,
// queue lengths, KV usage) are read from EngineStats at render time, so they are live while
// requests run; the per-request latency histograms are filled by record() when a request ends.
#include "server/metrics.h"

#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <memory>
#include <span>

#include "core/status.h"

namespace pagoda::server {
namespace {

constexpr std::array kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                     0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                     20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
constexpr std::array kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
constexpr std::array kRequestLatencyBuckets = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                               5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

// vLLM pre-creates request_success_total for every finish reason, so rate() works from the start.
constexpr std::array<const char*, 3> kFinishReasons = {"stop", "length", "abort"};

/// A Prometheus histogram: per-bucket (non-cumulative) counts, made cumulative when rendered.
struct Histogram {
  explicit Histogram(std::span<const double> bounds)
      : bounds(bounds.begin(), bounds.end()), counts(bounds.size() + 1, 0) {}
  void observe(double value) {
    size_t i = 0;
    while (i < bounds.size() && value > bounds[i]) ++i;  // le is inclusive
    ++counts[i];
    sum += value;
    ++count;
  }
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // counts[bounds.size()] is the +Inf overflow
  double sum = 0;
  uint64_t count = 0;
};

/// Formats a sample value as Python's prometheus_client does: shortest round-trip digits, a
/// trailing ".0" on integral values, and +Inf/-Inf/NaN spelled the Prometheus way.
std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, end);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string format_value(int64_t v) { return format_value(static_cast<double>(v)); }
std::string format_value(int v) { return format_value(static_cast<double>(v)); }

/// Label values escape backslash, double quote and newline (the text format's three escapes).
std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

bool is_valid_prefix(std::string_view prefix) {
  if (prefix.empty()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    const char c = prefix[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace

struct ServingMetrics::Impl {
  std::string prefix;                              // "pagoda:" or "vllm:", colon included
  std::string model_label;                         // model_name="..." with the value escaped
  mutable std::mutex mutex;                        // guards everything below
  std::map<std::string, int64_t> request_success;  // by finished_reason
  Histogram ttft{kTtftBuckets};
  Histogram itl{kItlBuckets};
  Histogram e2e{kRequestLatencyBuckets};
  Histogram queue{kRequestLatencyBuckets};
  Histogram prefill{kRequestLatencyBuckets};
  Histogram decode{kRequestLatencyBuckets};

  void header(std::string& out, std::string_view name, std::string_view type,
              std::string_view help) const {
    out.append("# HELP ").append(prefix).append(name).append(" ").append(help).append("\n");
    out.append("# TYPE ").append(prefix).append(name).append(" ").append(type).append("\n");
  }
  void scalar(std::string& out, std::string_view name, std::string_view type, std::string_view help,
              const std::string& value) const {
    header(out, name, type, help);
    out.append(prefix).append(name).append("{").append(model_label).append("} ");
    out.append(value).append("\n");
  }
  void histogram(std::string& out, std::string_view name, std::string_view help,
                 const Histogram& h) const {
    header(out, name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      const std::string le = i < h.bounds.size() ? format_value(h.bounds[i]) : "+Inf";
      out.append(prefix).append(name).append("_bucket{").append(model_label);
      out.append(",le=\"").append(le).append("\"} ");
      out.append(format_value(static_cast<double>(cumulative))).append("\n");
    }
    out.append(prefix).append(name).append("_sum{").append(model_label).append("} ");
    out.append(format_value(h.sum)).append("\n");
    out.append(prefix).append(name).append("_count{").append(model_label).append("} ");
    out.append(format_value(static_cast<double>(h.count))).append("\n");
  }
};

ServingMetrics::ServingMetrics(std::string model_name, std::string prefix)
    : impl_(std::make_shared<Impl>()) {
  // Accept "vllm" as well as "vllm:", the spelling of the --metrics-prefix flag.
  if (!prefix.empty() && prefix.back() == ':') prefix.pop_back();
  if (!is_valid_prefix(prefix)) {
    throw InvalidArgument(fmt::format(
        "metrics prefix '{}' is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)", prefix));
  }
  impl_->prefix = prefix + ":";
  impl_->model_label = "model_name=\"" + escape_label_value(model_name) + "\"";
  for (const char* reason : kFinishReasons) impl_->request_success[reason] = 0;
}

void ServingMetrics::record(const RequestRecord& record) {
  std::lock_guard lock(impl_->mutex);
  ++impl_->request_success[record.finished_reason];
  impl_->ttft.observe(record.ttft_seconds);
  for (double gap : record.itl_seconds) impl_->itl.observe(gap);
  impl_->e2e.observe(record.e2e_seconds);
  impl_->queue.observe(record.queue_seconds);
  impl_->prefill.observe(record.prefill_seconds);
  impl_->decode.observe(record.decode_seconds);
}

std::string ServingMetrics::render(const EngineStats& stats) const {
  const Impl& m = *impl_;
  std::string out;
  out.reserve(16384);
  m.scalar(out, "num_requests_running", "gauge", "Number of requests in model execution batches.",
           format_value(stats.num_running));
  m.scalar(out, "num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           format_value(stats.num_waiting));
  m.scalar(out, "kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           format_value(stats.kv_cache_usage));
  m.scalar(out, "prefix_cache_queries_total", "counter",
           "Prefix cache queries, in terms of number of queried tokens.",
           format_value(stats.prefix_cache_queries_tokens));
  m.scalar(out, "prefix_cache_hits_total", "counter",
           "Prefix cache hits, in terms of number of cached tokens.",
           format_value(stats.prefix_cache_hits_tokens));
  m.scalar(out, "num_preemptions_total", "counter",
           "Cumulative number of preemption from the engine.", format_value(stats.num_preemptions));
  m.scalar(out, "prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           format_value(stats.prompt_tokens));
  m.scalar(out, "generation_tokens_total", "counter", "Number of generation tokens processed.",
           format_value(stats.generation_tokens));

  if (!stats.spec_decode_num_accepted_tokens_per_pos.empty()) {
    // Speculative decoding (only when configured, as vLLM): its counters and the accepted drafts
    // per position, labelled position="0".. (acceptance rate = accepted / draft tokens, mean
    // acceptance length = 1 + accepted / drafts).
    m.scalar(out, "spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.",
             format_value(stats.spec_decode_num_drafts));
    m.scalar(out, "spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.",
             format_value(stats.spec_decode_num_draft_tokens));
    m.scalar(out, "spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
             format_value(stats.spec_decode_num_accepted_tokens));
    m.header(out, "spec_decode_num_accepted_tokens_per_pos_total", "counter",
             "Accepted tokens per draft position.");
    const auto& per_pos = stats.spec_decode_num_accepted_tokens_per_pos;
    for (size_t i = 0; i < per_pos.size(); ++i) {
      out.append(m.prefix).append("spec_decode_num_accepted_tokens_per_pos_total{");
      out.append(m.model_label).append(",position=\"").append(std::to_string(i)).append("\"} ");
      out.append(format_value(per_pos[i])).append("\n");
    }
  }

  std::lock_guard lock(m.mutex);
  m.header(out, "request_success_total", "counter", "Count of successfully processed requests.");
  for (const auto& [reason, count] : m.request_success) {
    out.append(m.prefix).append("request_success_total{").append(m.model_label);
    out.append(",finished_reason=\"").append(escape_label_value(reason)).append("\"} ");
    out.append(format_value(count)).append("\n");
  }
  m.histogram(out, "time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              m.ttft);
  m.histogram(out, "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              m.itl);
  m.histogram(out, "e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
              m.e2e);
  m.histogram(out, "request_queue_time_seconds",
              "Histogram of time spent in WAITING phase for request.", m.queue);
  m.histogram(out, "request_prefill_time_seconds",
              "Histogram of time spent in PREFILL phase for request.", m.prefill);
  m.histogram(out, "request_decode_time_seconds",
              "Histogram of time spent in DECODE phase for request.", m.decode);
  return out;
}

}  // namespace pagoda::server
