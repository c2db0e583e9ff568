#pragma once
// The router's own Prometheus metrics, all named pagoda_router:*: what it routed where and why,
// how requests ended per backend, retries, health checks, and the backends' health and load.
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "router/backend_pool.h"
#include "router/prefix_policy.h"

namespace pagoda::router {

/// How one proxied request ended on one backend (the outcome label).
enum class Outcome {
  kSuccess,        // the backend answered below 400 and the answer reached the client
  kErrorStatus,    // the backend answered 400 or above (forwarded as it was)
  kConnectFailed,  // the connection failed before any response byte (retried elsewhere)
  kBroken,         // the connection failed after the answer began (502, or an SSE error event)
  kCancelled,      // the client went away first (the backend connection was closed)
  kNoBackend,      // no healthy backend was left to send it to (backend label "none")
};
inline constexpr size_t kNumOutcomes = 6;
[[nodiscard]] const char* outcome_name(Outcome outcome);

/// Bi-directional KV (--bidirectional-kv): how the import of a finished turn's KV ended.
enum class KVReturnOutcome {
  kImported,   // the producer imported it
  kFailed,     // no producer, or its import failed
  kNoHandOff,  // the decode engine's answer named no KV (nothing full to keep)
};

class RouterMetrics {
 public:
  explicit RouterMetrics(std::vector<std::string> backend_urls);

  void count_route(const RouteDecision& decision);
  /// `backend` nullopt: kNoBackend.
  void count_request(std::optional<size_t> backend, Outcome outcome);
  void count_retry(size_t failed_backend);
  void count_health_check(size_t backend, bool ok);
  /// Seconds from the request's arrival to the end of its answer.
  void observe_duration(double seconds);
  /// P/D mode (--prefill/--decode): a request's prefill handed its KV off to the decode engine
  /// (`handed_off`), or it was sent to the decode engine to prefill itself (the fallback).
  void count_prefill(bool handed_off);
  /// Bi-directional KV: a finished turn's import into a producer.
  void count_kv_return(KVReturnOutcome outcome);

  /// The whole /metrics page; the gauges come from `pool`.
  [[nodiscard]] std::string render(const PoolSnapshot& pool) const;

 private:
  static constexpr size_t kNumReasons = 3;
  std::vector<std::string> labels_;  // the backends' URLs, escaped for a label value
  mutable std::mutex mutex_;
  std::vector<std::array<uint64_t, kNumOutcomes>> requests_;  // per backend, last: "none"
  std::vector<std::array<uint64_t, kNumReasons>> routes_;
  std::vector<uint64_t> matched_blocks_;
  std::vector<uint64_t> retries_;
  std::vector<std::array<uint64_t, 2>> health_checks_;  // failed, ok
  std::vector<uint64_t> duration_buckets_;              // cumulative at render
  uint64_t duration_count_ = 0;
  double duration_sum_ = 0;
  std::array<uint64_t, 2> prefills_{};    // P/D mode: fallback, handed_off
  bool pd_mode_ = false;                  // a prefill was counted: render the P/D counters
  std::array<uint64_t, 3> kv_returns_{};  // imported, failed, no_hand_off
  bool kv_return_mode_ = false;           // a return was counted: render its counter
};

}  // namespace pagoda::router
