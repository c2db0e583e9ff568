// The /metrics page. Names, labels, help texts and histogram buckets follow vLLM's
// PrometheusStatLogger (vllm/v1/metrics/loggers.py) so that dashboards and autoscalers written for
// vLLM read our series unchanged under --metrics-prefix vllm. Counters, gauges and the tokens per
// step that the engine already keeps (tokens, preemptions, prefix cache, queue lengths, KV usage)
// are read from EngineStats at render time, so they are live while requests run; the per-request
// histograms are filled by record() when a completion (or a whole request) ends.
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

constexpr std::array kRequestsPerParamN = {1.0, 2.0, 5.0, 10.0, 20.0};

// vLLM pre-creates request_success_total for every finish reason, so rate() works from the start.
constexpr std::array<const char*, 3> kFinishReasons = {"stop", "length", "abort"};

/// vLLM's token-count buckets: 1, 2, 5 times the powers of ten, while they do not pass
/// `max_value`.
std::vector<double> one_two_five_buckets(int64_t max_value) {
  std::vector<double> bounds;
  for (int64_t power = 1;; power *= 10) {
    for (int64_t mantissa : {1, 2, 5}) {
      if (mantissa * power > max_value) return bounds;
      bounds.push_back(static_cast<double>(mantissa * power));
    }
  }
}

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

/// Python's str() of a bool, as vLLM's cache_config_info labels spell it.
std::string python_bool(bool b) { return b ? "True" : "False"; }

}  // namespace

struct ServingMetrics::Impl {
  explicit Impl(int64_t max_model_len)
      : prompt_tokens(one_two_five_buckets(max_model_len)),
        generation_tokens(one_two_five_buckets(max_model_len)),
        max_num_generation_tokens(one_two_five_buckets(max_model_len)),
        params_max_tokens(one_two_five_buckets(max_model_len)) {}

  std::string prefix;        // "pagoda:" or "vllm:", colon included
  std::string labels;        // model_name="...",engine="0" with the model name escaped
  std::string cache_label;   // cache_config_info's labels
  bool host_tier = false;    // a host KV tier exists: its families are rendered
  mutable std::mutex mutex;  // guards everything below
  std::map<std::string, int64_t> request_success;  // by finished_reason
  // Token counts (tokens), per completion but for the two per request (ParentRecord).
  Histogram prompt_tokens, generation_tokens, max_num_generation_tokens, params_max_tokens;
  Histogram params_n{kRequestsPerParamN};
  // Latencies (seconds).
  Histogram ttft{kTtftBuckets};
  Histogram itl{kItlBuckets};
  Histogram request_tpot{kItlBuckets};  // per completion: decode time / (tokens - 1)
  Histogram e2e{kRequestLatencyBuckets};
  Histogram queue{kRequestLatencyBuckets};
  Histogram inference{kRequestLatencyBuckets};  // prefill + decode
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
    out.append(prefix).append(name).append("{").append(labels).append("} ");
    out.append(value).append("\n");
  }
  /// A histogram from its bounds and per-bucket (non-cumulative) counts, the last one +Inf.
  template <class Bounds, class Counts>
  void histogram(std::string& out, std::string_view name, std::string_view help,
                 const Bounds& bounds, const Counts& counts, double sum, double count) const {
    header(out, name, "histogram", help);
    double cumulative = 0;
    for (size_t i = 0; i <= bounds.size(); ++i) {
      cumulative += static_cast<double>(counts[i]);
      const std::string le =
          i < bounds.size() ? format_value(static_cast<double>(bounds[i])) : "+Inf";
      out.append(prefix).append(name).append("_bucket{").append(labels);
      out.append(",le=\"").append(le).append("\"} ");
      out.append(format_value(cumulative)).append("\n");
    }
    out.append(prefix).append(name).append("_sum{").append(labels).append("} ");
    out.append(format_value(sum)).append("\n");
    out.append(prefix).append(name).append("_count{").append(labels).append("} ");
    out.append(format_value(count)).append("\n");
  }
  void histogram(std::string& out, std::string_view name, std::string_view help,
                 const Histogram& h) const {
    histogram(out, name, help, h.bounds, h.counts, h.sum, static_cast<double>(h.count));
  }
};

ServingMetrics::ServingMetrics(MetricsOptions options)
    : impl_(std::make_shared<Impl>(options.max_model_len)) {
  std::string prefix = std::move(options.prefix);
  // Accept "vllm" as well as "vllm:", the spelling of the --metrics-prefix flag.
  if (!prefix.empty() && prefix.back() == ':') prefix.pop_back();
  if (!is_valid_prefix(prefix)) {
    throw InvalidArgument(fmt::format(
        "metrics prefix '{}' is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)", prefix));
  }
  if (options.max_model_len < 1) {
    throw InvalidArgument(
        fmt::format("metrics: max_model_len must be >= 1 (the token-count "
                    "histograms' buckets reach it), got {}",
                    options.max_model_len));
  }
  const CacheInfo& c = options.cache;
  if (c.block_size < 1 || c.num_blocks < 1) {
    throw InvalidArgument(
        fmt::format("metrics: the KV cache needs a block size and blocks, got {} blocks of {}",
                    c.num_blocks, c.block_size));
  }
  impl_->prefix = prefix + ":";
  impl_->labels = "model_name=\"" + escape_label_value(options.model_name) + "\",engine=\"0\"";
  // vLLM's CacheConfig fields as Python prints them (what pagoda does not have: no swap space,
  // no CPU offload, no block-count override), then the engine. cache_dtype is the cache's
  // element type as built ("float32" for auto on the CPU, "fp8_e4m3" for fp8): the capacity is
  // num_gpu_blocks x block_size tokens of it.
  const auto opt = [](int64_t v) { return v > 0 ? std::to_string(v) : std::string("None"); };
  impl_->cache_label = fmt::format(
      "block_size=\"{}\",gpu_memory_utilization=\"{}\",swap_space_bytes=\"0\","
      "cache_dtype=\"{}\",is_attention_free=\"False\",num_gpu_blocks_override=\"None\","
      "sliding_window=\"{}\",enable_prefix_caching=\"{}\",cpu_offload_gb=\"0\","
      "calculate_kv_scales=\"{}\",kv_cache_memory_bytes=\"{}\",num_gpu_blocks=\"{}\","
      "num_cpu_blocks=\"None\",engine=\"0\"",
      c.block_size, format_value(c.gpu_memory_utilization), escape_label_value(c.cache_dtype),
      opt(c.sliding_window), python_bool(c.enable_prefix_caching),
      python_bool(c.calculate_kv_scales), opt(c.kv_cache_memory_bytes), c.num_blocks);
  impl_->host_tier = c.host_kv_blocks > 0;
  for (const char* reason : kFinishReasons) impl_->request_success[reason] = 0;
}

void ServingMetrics::record(const RequestRecord& record) {
  std::lock_guard lock(impl_->mutex);
  Impl& m = *impl_;
  ++m.request_success[record.finished_reason];
  m.prompt_tokens.observe(static_cast<double>(record.prompt_tokens));
  m.generation_tokens.observe(static_cast<double>(record.generation_tokens));
  if (record.max_tokens_param > 0)
    m.params_max_tokens.observe(static_cast<double>(record.max_tokens_param));
  m.ttft.observe(record.ttft_seconds);
  for (double gap : record.itl_seconds) m.itl.observe(gap);
  // vLLM's per-request TPOT: the decode phase over the tokens after the first (0 with one token).
  m.request_tpot.observe(record.generation_tokens > 1
                             ? record.decode_seconds /
                                   static_cast<double>(record.generation_tokens - 1)
                             : 0.0);
  m.e2e.observe(record.e2e_seconds);
  m.queue.observe(record.queue_seconds);
  m.inference.observe(record.prefill_seconds + record.decode_seconds);
  m.prefill.observe(record.prefill_seconds);
  m.decode.observe(record.decode_seconds);
}

void ServingMetrics::record(const ParentRecord& record) {
  std::lock_guard lock(impl_->mutex);
  impl_->params_n.observe(record.n);
  impl_->max_num_generation_tokens.observe(static_cast<double>(record.max_generation_tokens));
}

std::string ServingMetrics::render(const EngineStats& stats) const {
  const Impl& m = *impl_;
  std::string out;
  out.reserve(32768);
  m.scalar(out, "num_requests_running", "gauge", "Number of requests in model execution batches.",
           format_value(stats.num_running));
  m.scalar(out, "num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           format_value(stats.num_waiting));
  m.scalar(out, "gpu_cache_usage_perc", "gauge",
           "KV-cache usage. 1 means 100 percent usage. The older name of kv_cache_usage_perc.",
           format_value(stats.kv_cache_usage));
  m.scalar(out, "kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           format_value(stats.kv_cache_usage));
  m.scalar(out, "prefix_cache_queries_total", "counter",
           "Prefix cache queries, in terms of number of queried tokens.",
           format_value(stats.prefix_cache_queries_tokens));
  m.scalar(out, "prefix_cache_hits_total", "counter",
           "Prefix cache hits, in terms of number of cached tokens.",
           format_value(stats.prefix_cache_hits_tokens));
  // The host KV tier (--kv-offloading-size), when there is one: its lookups as vLLM reports a KV
  // connector's prefix cache, and pagoda's own usage and blocks copied each way.
  if (m.host_tier) {
    m.scalar(
        out, "external_prefix_cache_queries_total", "counter",
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms "
        "of number of queried tokens (pagoda: the host KV tier).",
        format_value(stats.external_prefix_cache_queries_tokens));
    m.scalar(
        out, "external_prefix_cache_hits_total", "counter",
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
        "number of cached tokens (pagoda: the host KV tier).",
        format_value(stats.external_prefix_cache_hits_tokens));
    m.scalar(out, "host_kv_cache_usage_perc", "gauge",
             "Host KV tier usage (--kv-offloading-size). 1 means 100 percent usage.",
             format_value(stats.host_kv_cache_usage));
    m.scalar(out, "host_kv_blocks_saved_total", "counter",
             "KV blocks copied from the device cache into the host KV tier.",
             format_value(stats.host_kv_blocks_saved));
    m.scalar(out, "host_kv_blocks_loaded_total", "counter",
             "KV blocks loaded from the host KV tier into the device cache instead of computed.",
             format_value(stats.host_kv_blocks_loaded));
  }
  // Prefill/decode disaggregation (--kv-transfer-config), when configured: the consumer's pulls
  // and the producer's exported blocks (both sets on a kv_both engine).
  if (!stats.kv_transfer_latency_counts.empty()) {
    m.scalar(out, "kv_transfer_received_tokens_total", "counter",
             "Prompt tokens whose KV was received from a producer and loaded instead of computed.",
             format_value(stats.kv_transfer_received_tokens));
    m.scalar(out, "kv_transfer_received_bytes_total", "counter",
             "Bytes received from producers by KV pulls.",
             format_value(stats.kv_transfer_received_bytes));
    m.scalar(out, "kv_transfer_failures_total", "counter",
             "KV pulls that failed (the request was prefilled locally instead).",
             format_value(stats.kv_transfer_failures));
    int64_t pulls = 0;
    for (const int64_t c : stats.kv_transfer_latency_counts) pulls += c;
    m.histogram(out, "kv_transfer_latency_seconds",
                "Histogram of KV pull latency (connect to last byte) in seconds.",
                kKVTransferLatencyBuckets, stats.kv_transfer_latency_counts,
                stats.kv_transfer_latency_sum, static_cast<double>(pulls));
    m.scalar(out, "kv_transfer_blocks_sent_total", "counter",
             "KV blocks a producer sent to consumers.",
             format_value(stats.kv_transfer_blocks_sent));
    m.scalar(out, "kv_transfer_blocks_freed_timeout_total", "counter",
             "KV blocks a producer freed unpulled after the keep timeout.",
             format_value(stats.kv_transfer_blocks_freed_timeout));
    m.scalar(out, "kv_transfer_pending_blocks", "gauge",
             "KV blocks a producer holds for consumers now.",
             format_value(stats.kv_transfer_pending_blocks));
    // Bi-directional KV: finished turns' blocks kept for a pull back, and imported ones.
    m.scalar(out, "kv_transfer_returned_blocks_total", "counter",
             "KV blocks of finished return_kv turns kept for the engine of the next turn's "
             "prefill.",
             format_value(stats.kv_transfer_returned_blocks));
    m.scalar(out, "kv_transfer_imported_blocks_total", "counter",
             "KV blocks of finished turns pulled from another engine into the prefix cache.",
             format_value(stats.kv_transfer_imported_blocks));
    m.scalar(out, "kv_transfer_import_failures_total", "counter",
             "KV imports that failed (the next turn recomputes those tokens).",
             format_value(stats.kv_transfer_import_failures));
    m.scalar(out, "prefix_cache_imported_hits_total", "counter",
             "Prefix cache hits on imported KV blocks (finished turns from another engine), in "
             "terms of number of cached tokens; part of prefix_cache_hits_total.",
             format_value(stats.prefix_cache_imported_hits_tokens));
  }
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
      out.append(m.labels).append(",position=\"").append(std::to_string(i)).append("\"} ");
      out.append(format_value(per_pos[i])).append("\n");
    }
  }
  const IterationTokens& it = stats.iteration_tokens;
  m.histogram(out, "iteration_tokens_total", "Histogram of number of tokens per engine_step.",
              kIterationTokensBuckets, it.counts, static_cast<double>(it.sum),
              static_cast<double>(it.count));

  {
    std::lock_guard lock(m.mutex);
    m.header(out, "request_success_total", "counter", "Count of successfully processed requests.");
    for (const auto& [reason, count] : m.request_success) {
      out.append(m.prefix).append("request_success_total{").append(m.labels);
      out.append(",finished_reason=\"").append(escape_label_value(reason)).append("\"} ");
      out.append(format_value(count)).append("\n");
    }
    m.histogram(out, "request_prompt_tokens", "Number of prefill tokens processed.",
                m.prompt_tokens);
    m.histogram(out, "request_generation_tokens", "Number of generation tokens processed.",
                m.generation_tokens);
    m.histogram(out, "request_max_num_generation_tokens",
                "Histogram of maximum number of requested generation tokens.",
                m.max_num_generation_tokens);
    m.histogram(out, "request_params_n", "Histogram of the n request parameter.", m.params_n);
    m.histogram(out, "request_params_max_tokens", "Histogram of the max_tokens request parameter.",
                m.params_max_tokens);
    m.histogram(out, "time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                m.ttft);
    m.histogram(out, "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                m.itl);
    m.histogram(out, "time_per_output_token_seconds",
                "Histogram of time per output token in seconds (the inter-token latencies).",
                m.itl);
    m.histogram(out, "request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.", m.request_tpot);
    m.histogram(out, "e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                m.e2e);
    m.histogram(out, "request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.", m.queue);
    m.histogram(out, "request_inference_time_seconds",
                "Histogram of time spent in RUNNING phase for request.", m.inference);
    m.histogram(out, "request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.", m.prefill);
    m.histogram(out, "request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.", m.decode);
  }
  m.header(out, "cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  out.append(m.prefix).append("cache_config_info{").append(m.cache_label).append("} 1.0\n");
  return out;
}

}  // namespace pagoda::server
