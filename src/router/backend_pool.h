#pragma once
// The router's backends: their addresses, health, requests in flight and the prefix policy's
// state, behind one lock. Every request takes a Lease on the backend it is sent to.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "router/prefix_policy.h"
#include "server/client/http_client.h"

namespace pagoda::router {

class BackendPool;

/// One request's hold on a backend: counts it in flight until destroyed.
class Lease {
 public:
  Lease(BackendPool* pool, RouteDecision decision) : pool_(pool), decision_(decision) {}
  ~Lease();
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  [[nodiscard]] size_t backend() const { return decision_.backend; }
  [[nodiscard]] const RouteDecision& decision() const { return decision_; }

 private:
  BackendPool* pool_;
  RouteDecision decision_;
};

/// What /metrics and /health read of the backends.
struct PoolSnapshot {
  std::vector<bool> healthy;
  std::vector<int64_t> in_flight;
};

/// Thread-safe. Backends start unhealthy: the first health check admits them.
class BackendPool {
 public:
  /// `urls`: http://host:port[/prefix], at least one, no duplicates. Throws InvalidArgument.
  BackendPool(std::vector<std::string> urls, PrefixPolicyOptions policy);

  [[nodiscard]] size_t size() const { return urls_.size(); }
  [[nodiscard]] const std::string& url(size_t b) const { return urls_[b]; }
  [[nodiscard]] const client::Endpoint& endpoint(size_t b) const { return endpoints_[b]; }

  /// Chooses a healthy backend not in `tried` (one flag per backend) for a request with these
  /// prefix block hashes and counts the request in flight there; nullopt when none is left.
  [[nodiscard]] std::unique_ptr<Lease> assign(const std::vector<uint64_t>& hashes,
                                              const std::vector<bool>& tried);

  /// Sets a backend's health; returns its previous health.
  bool set_healthy(size_t b, bool healthy);
  [[nodiscard]] bool any_healthy() const;
  [[nodiscard]] PoolSnapshot snapshot() const;

 private:
  friend class Lease;
  void release(size_t b);

  std::vector<std::string> urls_;
  std::vector<client::Endpoint> endpoints_;
  mutable std::mutex mutex_;
  std::vector<bool> healthy_;
  std::vector<int64_t> in_flight_;
  PrefixPolicy policy_;
};

}  // namespace pagoda::router
