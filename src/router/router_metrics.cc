#include "router/router_metrics.h"

#include <fmt/format.h>

namespace pagoda::router {
namespace {

constexpr std::array<double, 16> kDurationBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                     2.5,   5,    10,    30,   60,  120,  300, 600};

std::string escape_label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP pagoda_router:{} {}\n", name, help);
  fmt::format_to(std::back_inserter(out), "# TYPE pagoda_router:{} {}\n", name, type);
}

}  // namespace

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kSuccess:
      return "success";
    case Outcome::kErrorStatus:
      return "error_status";
    case Outcome::kConnectFailed:
      return "connect_failed";
    case Outcome::kBroken:
      return "broken";
    case Outcome::kCancelled:
      return "cancelled";
    case Outcome::kNoBackend:
      return "no_backend";
  }
  return "unknown";
}

RouterMetrics::RouterMetrics(std::vector<std::string> backend_urls) {
  for (const std::string& url : backend_urls) labels_.push_back(escape_label(url));
  const size_t n = labels_.size();
  requests_.assign(n + 1, {});
  routes_.assign(n, {});
  matched_blocks_.assign(n, 0);
  retries_.assign(n, 0);
  health_checks_.assign(n, {});
  duration_buckets_.assign(kDurationBuckets.size(), 0);
}

void RouterMetrics::count_route(const RouteDecision& decision) {
  std::lock_guard lock(mutex_);
  ++routes_[decision.backend][static_cast<size_t>(decision.reason)];
  matched_blocks_[decision.backend] += decision.matched_blocks;
}

void RouterMetrics::count_request(std::optional<size_t> backend, Outcome outcome) {
  std::lock_guard lock(mutex_);
  ++requests_[backend.value_or(labels_.size())][static_cast<size_t>(outcome)];
}

void RouterMetrics::count_retry(size_t failed_backend) {
  std::lock_guard lock(mutex_);
  ++retries_[failed_backend];
}

void RouterMetrics::count_health_check(size_t backend, bool ok) {
  std::lock_guard lock(mutex_);
  ++health_checks_[backend][ok ? 1 : 0];
}

void RouterMetrics::count_prefill(bool handed_off) {
  std::lock_guard lock(mutex_);
  pd_mode_ = true;
  ++prefills_[handed_off ? 1 : 0];
}

void RouterMetrics::count_kv_return(KVReturnOutcome outcome) {
  std::lock_guard lock(mutex_);
  kv_return_mode_ = true;
  ++kv_returns_[static_cast<size_t>(outcome)];
}

void RouterMetrics::observe_duration(double seconds) {
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < kDurationBuckets.size(); ++i) {
    if (seconds <= kDurationBuckets[i]) {
      ++duration_buckets_[i];
      break;
    }
  }
  ++duration_count_;
  duration_sum_ += seconds;
}

std::string RouterMetrics::render(const PoolSnapshot& pool) const {
  std::lock_guard lock(mutex_);
  std::string out;
  auto line = [&out](std::string_view name, std::string_view labels, auto value) {
    fmt::format_to(std::back_inserter(out), "pagoda_router:{}{{{}}} {}\n", name, labels, value);
  };
  const size_t n = labels_.size();

  header(out, "requests_total", "counter",
         "Requests proxied, by backend and how they ended (backend \"none\": no healthy backend)");
  for (size_t b = 0; b <= n; ++b) {
    const std::string backend = b < n ? labels_[b] : "none";
    for (size_t o = 0; o < kNumOutcomes; ++o) {
      if (b == n && o != static_cast<size_t>(Outcome::kNoBackend)) continue;
      if (b < n && o == static_cast<size_t>(Outcome::kNoBackend)) continue;
      line("requests_total",
           fmt::format("backend=\"{}\",outcome=\"{}\"", backend,
                       outcome_name(static_cast<Outcome>(o))),
           requests_[b][o]);
    }
  }
  header(out, "routed_requests_total", "counter",
         "Routing decisions, by backend and reason (prefix_hit, load_balanced, least_loaded)");
  for (size_t b = 0; b < n; ++b) {
    for (size_t r = 0; r < kNumReasons; ++r) {
      line("routed_requests_total",
           fmt::format("backend=\"{}\",reason=\"{}\"", labels_[b],
                       route_reason_name(static_cast<RouteReason>(r))),
           routes_[b][r]);
    }
  }
  header(out, "prefix_matched_blocks_total", "counter",
         "Leading prompt blocks the chosen backend already held, summed over routed requests");
  for (size_t b = 0; b < n; ++b) {
    line("prefix_matched_blocks_total", fmt::format("backend=\"{}\"", labels_[b]),
         matched_blocks_[b]);
  }
  header(out, "retries_total", "counter",
         "Requests retried on another backend after this one failed before answering");
  for (size_t b = 0; b < n; ++b) {
    line("retries_total", fmt::format("backend=\"{}\"", labels_[b]), retries_[b]);
  }
  header(out, "health_checks_total", "counter", "GET /health probes of each backend, by result");
  for (size_t b = 0; b < n; ++b) {
    line("health_checks_total", fmt::format("backend=\"{}\",result=\"failed\"", labels_[b]),
         health_checks_[b][0]);
    line("health_checks_total", fmt::format("backend=\"{}\",result=\"ok\"", labels_[b]),
         health_checks_[b][1]);
  }
  header(out, "requests_in_flight", "gauge", "Requests being answered by each backend");
  for (size_t b = 0; b < n; ++b) {
    line("requests_in_flight", fmt::format("backend=\"{}\"", labels_[b]), pool.in_flight[b]);
  }
  header(out, "backend_healthy", "gauge",
         "1 when the backend passed its last health check and has not failed a request since");
  for (size_t b = 0; b < n; ++b) {
    line("backend_healthy", fmt::format("backend=\"{}\"", labels_[b]), pool.healthy[b] ? 1 : 0);
  }
  if (pd_mode_) {
    header(out, "pd_prefills_total", "counter",
           "P/D mode: prefills whose KV was handed off to a decode engine, and those that fell "
           "back to a prefill on the decode engine");
    line("pd_prefills_total", "outcome=\"handed_off\"", prefills_[1]);
    line("pd_prefills_total", "outcome=\"fallback\"", prefills_[0]);
  }
  if (kv_return_mode_) {
    header(out, "kv_returns_total", "counter",
           "Bi-directional KV: finished turns whose KV a producer imported, whose import failed, "
           "and answers that named no KV");
    line("kv_returns_total", "outcome=\"imported\"", kv_returns_[0]);
    line("kv_returns_total", "outcome=\"failed\"", kv_returns_[1]);
    line("kv_returns_total", "outcome=\"no_hand_off\"", kv_returns_[2]);
  }
  header(out, "request_duration_seconds", "histogram",
         "Seconds from a request's arrival at the router to the end of its answer");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kDurationBuckets.size(); ++i) {
    cumulative += duration_buckets_[i];
    line("request_duration_seconds_bucket", fmt::format("le=\"{}\"", kDurationBuckets[i]),
         cumulative);
  }
  line("request_duration_seconds_bucket", "le=\"+Inf\"", duration_count_);
  fmt::format_to(std::back_inserter(out), "pagoda_router:request_duration_seconds_sum {}\n",
                 duration_sum_);
  fmt::format_to(std::back_inserter(out), "pagoda_router:request_duration_seconds_count {}\n",
                 duration_count_);
  return out;
}

}  // namespace pagoda::router
